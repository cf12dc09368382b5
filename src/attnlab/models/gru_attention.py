"""The GRU + attention baseline of Russin et al. (2019)'s Table 1: Bastings et al. (2018).

A bidirectional GRU encoder, additive attention (Bahdanau et al. 2015) and a GRU decoder fed
``[E y_{i−1} ; c_i]`` ("+attn") or ``c_i`` alone when its dependency on the previous action is
removed (``previous_output=False``, "+attn −dep"). Decoding is
:class:`~attnlab.models.stepwise.StepwiseSeq2Seq`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention import AttentionState, build_attender
from attnlab.attention.base import check_padding_mask
from attnlab.models.stepwise import StepwiseSeq2Seq, run_packed

__all__ = ["GRUAttentionSeq2Seq"]


@dataclass
class _GRUState:
    annotations: torch.Tensor  # [B, S, 2H]
    padding_mask: torch.Tensor
    hidden: torch.Tensor  # [B, D]
    attention: AttentionState


class GRUAttentionSeq2Seq(StepwiseSeq2Seq):
    """GRU encoder–decoder with additive attention: Bastings et al. (2018) "+attn" and "+attn −dep".

    Step ``i``: ``α_i = attention(s_{i−1}, h)``, ``c_i = Σ_j α_ij h_j``,
    ``s_i = GRU([E y_{i−1} ; c_i], s_{i−1})`` (or ``GRU(c_i, s_{i−1})`` with
    ``previous_output=False``), ``p(y_i) = softmax(W_o dropout([s_i ; c_i]))``;
    ``s_0 = tanh(W_0 [→h_T ; ←h_1])``. Defaults: Lake & Baroni's best add-jump model (1 layer,
    100 units, dropout 0.1), which Bastings et al. start from.
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        embedding_dim: int = 100,
        encoder_hidden_dim: int = 100,
        encoder_layers: int = 1,
        decoder_hidden_dim: int = 100,
        dropout: float = 0.1,
        previous_output: bool = True,
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__(target_vocab_size, pad_id, sos_id, eos_id)
        if min(embedding_dim, encoder_hidden_dim, decoder_hidden_dim, encoder_layers) < 1:
            raise ValueError("embedding_dim, hidden sizes and encoder_layers must be >= 1")
        self.previous_output = previous_output
        self.dropout = nn.Dropout(dropout)
        self.source_embedding = nn.Embedding(source_vocab_size, embedding_dim, padding_idx=pad_id)
        self.encoder = nn.GRU(
            embedding_dim,
            encoder_hidden_dim,
            encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if encoder_layers > 1 else 0.0,
        )
        annotation_dim = 2 * encoder_hidden_dim
        self.bridge = nn.Linear(annotation_dim, decoder_hidden_dim)
        self.attender = build_attender("additive", decoder_hidden_dim, annotation_dim, annotation_dim)
        self.target_embedding = (
            nn.Embedding(target_vocab_size, embedding_dim, padding_idx=pad_id) if previous_output else None
        )
        input_dim = annotation_dim + (embedding_dim if previous_output else 0)
        self.decoder_cell = nn.GRUCell(input_dim, decoder_hidden_dim)
        self.output = nn.Linear(decoder_hidden_dim + annotation_dim, target_vocab_size)

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> _GRUState:
        check_padding_mask(type(self).__name__, source_padding_mask, source.shape, "source_padding_mask")
        embedded = self.dropout(self.source_embedding(source))
        annotations, final = run_packed(self.encoder, embedded, source_padding_mask)
        return _GRUState(
            annotations=annotations,
            padding_mask=source_padding_mask,
            hidden=torch.tanh(self.bridge(final)),
            attention=self.attender.initial_state(annotations, source_padding_mask),
        )

    def step(self, state: _GRUState, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, _GRUState]:
        attended = self.attender(
            state.hidden, state.annotations, state.annotations, state.padding_mask, state.attention
        )
        inputs = attended.glimpse
        if self.target_embedding is not None:
            inputs = torch.cat([self.dropout(self.target_embedding(previous)), inputs], dim=-1)
        hidden = self.decoder_cell(inputs, state.hidden)
        logits = self.output(self.dropout(torch.cat([hidden, attended.glimpse], dim=-1)))
        return (
            logits,
            attended.weights,
            _GRUState(state.annotations, state.padding_mask, hidden, attended.state),
        )
