"""A plain-PyTorch reference for the Lookup Tables seq2seq, used by ``bench_lookup.py``.

The same architecture as ``attnlab.models.seq2seq.RecurrentSeq2Seq(attender="scaled_dot")``,
written the way a tutorial (pytorch/examples, the PyTorch seq2seq tutorial) would write it:

* encoder: ``nn.Embedding`` -> ``nn.GRU`` over the padded batch; the final state of each
  sequence is its output at the last real position; a bias-free linear projection of the
  embeddings is added to the encoder outputs (residual); 50% dropout on the final state;
* decoder: ``nn.GRUCell`` stepped in a Python loop over the target positions (teacher forcing),
  scaled dot-product attention per step (``masked_fill(-inf)`` + softmax), then
  ``tanh(W_c [d_t; g_t])`` and a linear generator;
* loss: cross-entropy ignoring the padding; greedy decoding batched over the examples (the loop
  runs over the steps only) that stops when every sequence has produced ``<eos>``.

Self-contained: only ``torch`` is imported. :func:`load_attnlab_state_dict` maps a state dict of
attnlab's model onto this one (same tensors, different names), for the twin test and so that the
benchmark starts both models from the same weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, embedding_dim: int, hidden_dim: int, dropout: float, pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embedding_dim, hidden_dim, batch_first=True)
        self.residual = nn.Linear(embedding_dim, hidden_dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor):
        embedded = self.embedding(src)  # [B, S, E]
        outputs, _ = self.rnn(embedded)  # [B, S, H]
        # Right-padded batch: the state after the last real token is the output at length - 1.
        final = outputs[torch.arange(src.size(0), device=src.device), src_lengths - 1]  # [B, H]
        outputs = outputs + self.residual(embedded)
        return outputs, self.dropout(final)


class Decoder(nn.Module):
    def __init__(self, vocab_size: int, embedding_dim: int, hidden_dim: int, pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        self.cell = nn.GRUCell(embedding_dim, hidden_dim)
        self.combine = nn.Linear(2 * hidden_dim, hidden_dim)
        self.generator = nn.Linear(hidden_dim, vocab_size)
        self.scale = 1.0 / math.sqrt(hidden_dim)

    def step(self, token: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor):
        """One step: ``token [B]``, ``hidden [B, H]`` -> logits ``[B, V]``, hidden, attention ``[B, S]``."""
        hidden = self.cell(self.embedding(token), hidden)
        scores = torch.bmm(memory, hidden.unsqueeze(2)).squeeze(2) * self.scale  # [B, S]
        scores = scores.masked_fill(src_mask, float("-inf"))
        attention = torch.softmax(scores, dim=-1)
        context = torch.bmm(attention.unsqueeze(1), memory).squeeze(1)  # [B, H]
        combined = torch.tanh(self.combine(torch.cat([hidden, context], dim=-1)))
        return self.generator(combined), hidden, attention


class ReferenceSeq2Seq(nn.Module):
    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embedding_dim: int = 64,
        hidden_dim: int = 128,
        dropout: float = 0.5,
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ):
        super().__init__()
        self.pad_id, self.sos_id, self.eos_id = pad_id, sos_id, eos_id
        self.encoder = Encoder(src_vocab_size, embedding_dim, hidden_dim, dropout, pad_id)
        self.decoder = Decoder(tgt_vocab_size, embedding_dim, hidden_dim, pad_id)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_input: torch.Tensor) -> torch.Tensor:
        """Teacher forcing. ``src_mask`` is True on padding. Returns logits ``[B, T, V]``."""
        src_lengths = (~src_mask).sum(dim=1)
        memory, hidden = self.encoder(src, src_lengths)
        logits = []
        for t in range(tgt_input.size(1)):
            step_logits, hidden, _ = self.decoder.step(tgt_input[:, t], hidden, memory, src_mask)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)

    def loss(
        self, src: torch.Tensor, src_mask: torch.Tensor, tgt_input: torch.Tensor, tgt_output: torch.Tensor
    ):
        logits = self(src, src_mask, tgt_input)
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt_output.reshape(-1), ignore_index=self.pad_id
        )

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, src_mask: torch.Tensor, max_length: int) -> torch.Tensor:
        """Greedy decoding of the whole batch; returns tokens ``[B, L]``, pad after each ``<eos>``."""
        src_lengths = (~src_mask).sum(dim=1)
        memory, hidden = self.encoder(src, src_lengths)
        token = torch.full((src.size(0),), self.sos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        outputs = []
        for _ in range(max_length):
            logits, hidden, _ = self.decoder.step(token, hidden, memory, src_mask)
            logits[:, [self.pad_id, self.sos_id]] = float("-inf")  # never predict <pad> / <sos>
            token = logits.argmax(dim=-1).masked_fill(finished, self.pad_id)
            outputs.append(token)
            finished = finished | (token == self.eos_id)
            if finished.all():
                break
        return torch.stack(outputs, dim=1)


@torch.no_grad()
def evaluate(model: ReferenceSeq2Seq, batches) -> dict[str, float]:
    """Sequence accuracy (percent) and teacher-forced loss per token over ``batches``.

    Each batch has ``source``, ``source_padding_mask``, ``target_input`` and ``target_output``
    attributes; decoding runs for at most ``2 * source_len + 10`` steps.
    """
    model.eval()
    examples = correct = tokens = 0
    total_loss = 0.0
    for batch in batches:
        predicted = model.greedy_decode(
            batch.source, batch.source_padding_mask, 2 * batch.source.size(1) + 10
        )
        target = batch.target_output
        width = max(predicted.size(1), target.size(1))
        predicted = F.pad(predicted, (0, width - predicted.size(1)), value=model.pad_id)
        target = F.pad(target, (0, width - target.size(1)), value=model.pad_id)
        correct += int((predicted == target).all(dim=1).sum())
        examples += target.size(0)
        n_tokens = int((batch.target_output != model.pad_id).sum())
        loss = model.loss(batch.source, batch.source_padding_mask, batch.target_input, batch.target_output)
        total_loss += float(loss) * n_tokens
        tokens += n_tokens
    return {"seq_acc": 100.0 * correct / max(examples, 1), "loss": total_loss / max(tokens, 1)}


# Names of attnlab's RecurrentSeq2Seq parameters -> names here (GRUCell has the same weight layout
# as a one-layer nn.GRU).
ATTNLAB_NAMES = {
    "source_embedding.weight": "encoder.embedding.weight",
    "encoder.weight_ih_l0": "encoder.rnn.weight_ih_l0",
    "encoder.weight_hh_l0": "encoder.rnn.weight_hh_l0",
    "encoder.bias_ih_l0": "encoder.rnn.bias_ih_l0",
    "encoder.bias_hh_l0": "encoder.rnn.bias_hh_l0",
    "residual.weight": "encoder.residual.weight",
    "target_embedding.weight": "decoder.embedding.weight",
    "decoder.weight_ih_l0": "decoder.cell.weight_ih",
    "decoder.weight_hh_l0": "decoder.cell.weight_hh",
    "decoder.bias_ih_l0": "decoder.cell.bias_ih",
    "decoder.bias_hh_l0": "decoder.cell.bias_hh",
    "combine.weight": "decoder.combine.weight",
    "combine.bias": "decoder.combine.bias",
    "generator.weight": "decoder.generator.weight",
    "generator.bias": "decoder.generator.bias",
}


def load_attnlab_state_dict(model: ReferenceSeq2Seq, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy the weights of attnlab's scaled-dot ``RecurrentSeq2Seq`` into ``model`` (strict)."""
    unexpected = sorted(set(state_dict) - set(ATTNLAB_NAMES))
    missing = sorted(set(ATTNLAB_NAMES) - set(state_dict))
    if unexpected or missing:
        raise KeyError(f"not a scaled-dot attnlab state dict: unexpected {unexpected}, missing {missing}")
    model.load_state_dict({ATTNLAB_NAMES[name]: value for name, value in state_dict.items()}, strict=True)
