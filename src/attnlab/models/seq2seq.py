"""Recurrent encoder–decoder with a pluggable attender (Dubois et al. 2020, §6.3, Figure 2).

Architecture (the paper's, which follows Hupkes et al. 2018): embeddings of size 64, a GRU encoder
and decoder of hidden size 128, 50% dropout on the encoder–decoder bottleneck (the encoder's final
state that initialises the decoder), a residual connection from the source embeddings to the
encoder outputs, keys = values = encoder outputs, query = decoder state.

Where the paper is silent:

* The residual connection adds a linear projection of the embeddings when their size differs from
  the hidden size (64 ≠ 128), ``e_s = GRU(x)_s + W_r x_s``.
* Attention is applied after the decoder's recurrence (Luong et al. 2015): the decoder state
  ``d_t`` is the query and the prediction comes from ``tanh(W_c [d_t; g_t])`` — the nonlinearity is
  needed because a lookup ``t_i(x)`` is not additive in the previous output ``x`` (held in
  ``d_t``) and the attended table ``t_i`` (held in ``g_t``). With the attention outside the
  recurrence, teacher-forced training runs the decoder GRU over all steps in one fused call, and
  stateless attenders attend for all steps at once.

Option ``prediction="word"`` (issue 26 part 3) predicts from ``tanh(W_c [y_{t-1}; sum_s alpha_ts
x_s])`` instead: the embedding of the previous output and the attention-weighted source
*embeddings*, no decoder state and no encoder context. A lookup ``t_i(x)`` is a function of the
previous output and the table word alone, so a table seen in training only alone (applied to every
input) is translated the same way inside compositions; with the default, the prediction also sees
the decoder state, which holds the previous glimpse (another table in a composition, the input word
when the table was alone), and with window values the word's neighbours. The decoder state is still
the query: it chooses the attention, not the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.attention import Attender, MeanPooling, build_attender
from attnlab.attention.base import check_padding_mask
from attnlab.attention.positional import source_positions
from attnlab.checks import check_choice, check_int


@dataclass
class Seq2SeqOutput:
    """Teacher-forced or decoded outputs, batch-first.

    ``logits``: ``[B, T, V]``; ``attention``: ``[B, T, S]``; ``variables``: the attender's
    interpretable variables, each ``[B, T]`` or ``[B, T, S]``; ``tokens`` (decoding only): the
    greedy predictions ``[B, T]``.
    """

    logits: torch.Tensor
    attention: torch.Tensor
    variables: dict[str, torch.Tensor] = field(default_factory=dict)
    tokens: torch.Tensor | None = None


def check_target_input(owner: str, source: torch.Tensor, target_input: torch.Tensor) -> None:
    """Teacher forcing's ``target_input`` is ``[B, T]`` token ids (``<sos>`` + target, ``T ≥ 1``)
    for the ``B`` sources of ``source``."""
    if (
        target_input.dim() != 2
        or target_input.size(1) == 0
        or target_input.size(0) != source.size(0)
        or target_input.dtype not in (torch.long, torch.int)
    ):
        raise ValueError(
            f"{owner}: target_input must be token ids (int64 or int32) [batch={source.size(0)}, steps ≥ 1] "
            f"(<sos> + target) for the source's batch, got {target_input.dtype} {tuple(target_input.shape)}"
        )


def check_vocabularies(
    owner: str, source_vocab_size: int, target_vocab_size: int, pad_id: int, sos_id: int, eos_id: int
) -> None:
    """The vocabularies hold the special ids: ``<pad>`` in both (the embeddings' padding row),
    ``<sos>`` and ``<eos>`` in the target's."""
    for name, size, ids in (
        ("source_vocab_size", source_vocab_size, {"pad_id": pad_id}),
        ("target_vocab_size", target_vocab_size, {"pad_id": pad_id, "sos_id": sos_id, "eos_id": eos_id}),
    ):
        check_int(name, size, owner=owner)
        outside = {key: value for key, value in ids.items() if not 0 <= value < size}
        if outside:
            listed = ", ".join(f"{key}={value}" for key, value in outside.items())
            raise ValueError(f"{owner}: {name}={size} has no id {listed} (ids run from 0 to {size - 1})")


class RecurrentSeq2Seq(nn.Module):
    """GRU encoder–decoder whose attender is chosen by name (see :mod:`attnlab.attention`)."""

    never_predicted: torch.Tensor

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        attender: str = "mix",
        attender_options: dict[str, Any] | None = None,
        embedding_dim: int = 64,
        hidden_dim: int = 128,
        bottleneck_dropout: float = 0.5,
        residual: bool = True,
        encoder: str = "gru",
        encoder_window: int = 3,
        encoder_context: str = "none",
        encoder_values: str = "outputs",
        decoder_recurrence: bool = True,
        input_feeding: bool = False,
        prediction: str = "state",
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__()
        check_vocabularies(type(self).__name__, source_vocab_size, target_vocab_size, pad_id, sos_id, eos_id)
        self.pad_id, self.sos_id, self.eos_id = pad_id, sos_id, eos_id
        self.source_embedding = nn.Embedding(source_vocab_size, embedding_dim, padding_idx=pad_id)
        self.target_embedding = nn.Embedding(target_vocab_size, embedding_dim, padding_idx=pad_id)
        check_choice("encoder", encoder, ENCODERS)
        if encoder_context != "none" and encoder != "local":
            raise ValueError(f"encoder_context={encoder_context!r} needs encoder='local', got {encoder!r}")
        self.encoder: nn.Module = (
            nn.GRU(embedding_dim, hidden_dim, batch_first=True)
            if encoder == "gru"
            else LocalEncoder(embedding_dim, hidden_dim, encoder_window, context=encoder_context)
        )
        self.residual = _residual_projection(embedding_dim, hidden_dim) if residual else None
        check_choice("encoder_values", encoder_values, ENCODER_VALUES)
        self.word_values = WordValues(embedding_dim, hidden_dim) if encoder_values == "word" else None
        self.bottleneck_dropout = nn.Dropout(bottleneck_dropout)
        self.decoder_recurrence = decoder_recurrence
        self.input_feeding = input_feeding
        self.attender: Attender = build_attender(
            attender, hidden_dim, hidden_dim, hidden_dim, **(attender_options or {})
        )
        glimpse_dim = self.attender.value_dim if input_feeding else 0
        self.decoder = nn.GRU(embedding_dim + glimpse_dim, hidden_dim, batch_first=True)
        check_choice("prediction", prediction, PREDICTIONS)
        self.prediction = prediction
        # prediction="word": tanh(W [y_{t-1}; sum_s alpha_ts x_s]) from embeddings only
        combined_inputs = 2 * hidden_dim if prediction == "state" else 2 * embedding_dim
        self.combine = nn.Linear(combined_inputs, hidden_dim)
        self.generator = nn.Linear(hidden_dim, target_vocab_size)
        never_predicted = torch.zeros(target_vocab_size)
        never_predicted[[pad_id, sos_id]] = float("-inf")
        self.register_buffer("never_predicted", never_predicted, persistent=False)

    def encode(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder outputs ``[B, S, H]`` (keys and values) and the decoder's initial state ``[1, B, H]``.
        The GRU encoder's sources must be right-padded (its final state is read at a row's last
        real position); the local encoder reads any padding layout."""
        check_padding_mask(
            type(self).__name__,
            source_padding_mask,
            source.shape,
            "source_padding_mask",
            right_padded=not isinstance(self.encoder, LocalEncoder),
        )
        embedded = self.source_embedding(source)
        if isinstance(self.encoder, LocalEncoder):
            outputs = self.encoder(embedded, source_padding_mask)
            final = self.encoder.summary(outputs, source_padding_mask).context.unsqueeze(0)
        else:
            outputs, _ = self.encoder(embedded)
            lengths = (~source_padding_mask).sum(dim=1)
            # Right padding: the last real position's output is the final state of each sequence.
            last = (lengths - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, outputs.size(-1))
            final = outputs.gather(1, last).transpose(0, 1).contiguous()
        if self.residual is not None:
            outputs = outputs + self.residual(embedded)
        return outputs, self.bottleneck_dropout(final)

    def encode_values(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, keys: torch.Tensor
    ) -> torch.Tensor:
        """The attention's values ``[B, S, H]``: the keys (encoder outputs), or with
        ``encoder_values="word"`` each word's own vector (:class:`WordValues`, plus the residual)."""
        if self.word_values is None:
            return keys
        embedded = self.source_embedding(source)
        values = self.word_values(embedded, source_padding_mask)
        return values if self.residual is None else values + self.residual(embedded)

    def forward(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, target_input: torch.Tensor
    ) -> Seq2SeqOutput:
        """Teacher forcing: predict ``target_output`` from ``target_input`` (``<sos>`` + target)."""
        check_target_input(type(self).__name__, source, target_input)
        memory, hidden = self.encode(source, source_padding_mask)
        values = self.encode_values(source, source_padding_mask, memory)
        embedded = self.target_embedding(target_input)
        if self.input_feeding:
            return self._teacher_forced_steps(
                embedded, memory, values, source_padding_mask, hidden, self._words(source)
            )
        if self.decoder_recurrence:
            decoder_states, _ = self.decoder(embedded, hidden)
        else:  # every step starts from the same fresh state: all steps in one call
            batch, steps, _ = embedded.shape
            flat, _ = self.decoder(
                embedded.reshape(batch * steps, 1, -1), self._fresh_hidden(batch * steps, memory)
            )
            decoder_states = flat.reshape(batch, steps, -1)
        attended = self.attender(decoder_states, memory, values, source_padding_mask)
        logits = self._predict(decoder_states, attended, embedded, self._words(source))
        return Seq2SeqOutput(logits, attended.weights, attended.variables)

    def _teacher_forced_steps(
        self,
        embedded: torch.Tensor,
        memory: torch.Tensor,
        values: torch.Tensor,
        source_padding_mask: torch.Tensor,
        hidden: torch.Tensor,
        words: torch.Tensor | None,
    ) -> Seq2SeqOutput:
        """Input feeding needs the previous glimpse, so teacher forcing runs step by step."""
        state = self.attender.initial_state(memory, source_padding_mask)
        glimpse = memory.new_zeros(memory.size(0), 1, self.attender.value_dim)
        alive = torch.ones(memory.size(0), dtype=torch.bool, device=memory.device)
        steps: list[_DecodedStep] = []
        for previous in embedded.split(1, dim=1):
            logits, hidden, attended = self._step(
                previous, hidden, glimpse, memory, values, source_padding_mask, state, words
            )
            state, glimpse = attended.state, attended.glimpse
            steps.append(_DecodedStep(logits, attended.weights, None, alive, attended.variables))
        decoded = _stack_steps(steps)
        return Seq2SeqOutput(decoded.logits, decoded.attention, decoded.variables)

    def _step(
        self,
        previous: torch.Tensor,
        hidden: torch.Tensor,
        glimpse: torch.Tensor,
        memory: torch.Tensor,
        values: torch.Tensor,
        source_padding_mask: torch.Tensor,
        state: Any,
        words: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One decoder step from the embedded previous token ``[B, 1, E]`` and the previous glimpse."""
        inputs = torch.cat([previous, glimpse], dim=-1) if self.input_feeding else previous
        if not self.decoder_recurrence:
            hidden = self._fresh_hidden(previous.size(0), memory)
        decoder_state, hidden = self.decoder(inputs, hidden)
        attended = self.attender(decoder_state, memory, values, source_padding_mask, state)
        return self._predict(decoder_state, attended, previous, words), hidden, attended

    def _fresh_hidden(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The state every step starts from without decoder recurrence: zeros, no encoder summary."""
        return like.new_zeros(1, batch, self.decoder.hidden_size)

    @torch.no_grad()
    def greedy_decode(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, max_length: int
    ) -> Seq2SeqOutput:
        """Batched greedy decoding; each sequence stops at its own ``<eos>``.

        Decoding ends when every sequence has produced ``<eos>`` or after ``max_length`` steps.
        Positions after a sequence's ``<eos>`` hold the pad id (and zero attention).
        """
        check_int("max_length", max_length)  # decoding steps
        memory, hidden = self.encode(source, source_padding_mask)
        values = self.encode_values(source, source_padding_mask, memory)
        words = self._words(source)
        batch = source.size(0)
        state = self.attender.initial_state(memory, source_padding_mask)
        previous = torch.full((batch, 1), self.sos_id, dtype=torch.long, device=source.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=source.device)
        steps: list[_DecodedStep] = []
        glimpse = memory.new_zeros(batch, 1, self.attender.value_dim)
        for _ in range(max_length):
            embedded = self.target_embedding(previous)
            logits, hidden, attended = self._step(
                embedded, hidden, glimpse, memory, values, source_padding_mask, state, words
            )
            state, glimpse = attended.state, attended.glimpse
            tokens = self._best_tokens(logits).masked_fill(finished, self.pad_id)
            steps.append(_DecodedStep(logits, attended.weights, tokens, ~finished, attended.variables))
            finished = finished | (tokens == self.eos_id)
            if bool(finished.all()):
                break
            previous = tokens.unsqueeze(1)
        return _stack_steps(steps)

    def _best_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """Argmax over the vocabulary for ``[B, 1, V]`` logits, never ``<pad>`` or ``<sos>``."""
        return (logits.squeeze(1) + self.never_predicted).argmax(dim=-1)

    def _words(self, source: torch.Tensor) -> torch.Tensor | None:
        """The source embeddings ``[B, S, E]`` that ``prediction="word"`` reads, else ``None``."""
        return self.source_embedding(source) if self.prediction == "word" else None

    def _predict(
        self,
        decoder_states: torch.Tensor,
        attended: Any,
        previous: torch.Tensor,
        words: torch.Tensor | None,
    ) -> torch.Tensor:
        """Logits ``[B, T, V]`` from ``tanh(W_c [d_t; g_t])``, or with ``prediction="word"`` from
        ``tanh(W_c [y_{t-1}; sum_s alpha_ts x_s])`` (``previous`` = the embedded ``y_{t-1}``)."""
        if words is None:
            inputs = torch.cat([decoder_states, attended.glimpse], dim=-1)
        else:
            inputs = torch.cat([previous, torch.bmm(attended.weights, words)], dim=-1)
        return self.generator(torch.tanh(self.combine(inputs)))


ENCODERS = ("gru", "local")
ENCODER_CONTEXTS = ("none", "right")
ENCODER_VALUES = ("outputs", "word")
PREDICTIONS = ("state", "word")


class WordValues(nn.Module):
    """Values that hold the attended word and its distance to the ends only (when small):
    ``tanh(W x_s + U f_s)``, ``f_s`` the one-hots of "s is the i-th word" and "s is the i-th word
    from the end" for ``i < edge`` (zero elsewhere).

    The option ``encoder_values="word"`` (issue 26 part 2): keys stay the encoder outputs (a
    window, a right context: what the content move and the chooser's scores need), but what a
    glimpse *reads* is the attended word, nothing of its neighbours. With window values, an
    attention one word past the right table reads that table through its neighbour's window, so a
    two-word move (``forward2``) lets the model read tables out of order and learn a pattern that
    holds at training lengths only (measured, docs/results.md, session 15). The edge flags keep
    what a window gives near the ends, independent of the length: the Reversed task stops after
    the first word, and with ``edge=2`` the chooser can tell the last table (second word from the
    end) from the others, where ``end`` and ``forward`` (``start`` and ``backward``) lead to the
    same word in training and only one of them extrapolates (with ``edge=1``, measured: some
    (output, word) pairs seen only at the last table learn ``end`` and stop early on longer inputs).
    """

    def __init__(self, embedding_dim: int, hidden_dim: int, edge: int = 2) -> None:
        super().__init__()
        self.edge = edge
        self.word = nn.Linear(embedding_dim, hidden_dim)
        self.flags = nn.Linear(2 * edge, hidden_dim, bias=False)

    def forward(self, embedded: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """``embedded [B, S, E]`` with ``padding_mask [B, S]`` → ``[B, S, H]`` (any padding layout)."""
        real = ~padding_mask
        from_start = source_positions(embedded, padding_mask).long()
        from_end = real.sum(dim=1, keepdim=True) - 1 - from_start
        offsets = torch.arange(self.edge, device=embedded.device)
        flags = torch.cat(
            [from_start.unsqueeze(-1) == offsets, from_end.unsqueeze(-1) == offsets], dim=-1
        ) & real.unsqueeze(-1)
        return torch.tanh(self.word(embedded) + self.flags(flags.to(embedded.dtype)))


class LocalEncoder(nn.Module):
    """Each source token encoded from a window of its neighbours: ``tanh(Conv1d(x)_s)``.

    With no recurrence, the vector of a token depends on its ``window`` neighbours only, never on
    its position or on the length of the source, so keys and values look the same on inputs
    longer than any seen in training. Padding and the space beyond either end of the source
    read as zero vectors, so the first and last tokens are recognisable as such.

    ``context="right"`` (issue 26 part 2) adds what follows each token, as a max-pooled summary:
    ``h_s = tanh(Conv1d(x)_s + U max_{s' > s} ReLU(V x_{s'}))`` (the max over nothing is 0). A
    feature of the summary says "some later word has property f" — e.g. "a ``!`` follows" — and,
    being a maximum, it does not depend on how many words follow, so keys still look the same at
    any length. Dubois et al. (2020)'s Noisy-multi Lookup Tables need it: the noise before the
    real tables may itself hold ``!``, the tables start after the *last* one, and neither a
    3-word window nor a left-to-right GRU can tell the word after the last ``!`` from the word
    after an earlier one. Measured (docs/results.md, session 15): it solves Noisy multi in 5 runs of
    6, but on short sources the summary of what follows is position-like, and on Reversed (and in
    the sixth run) the content move counts with it and stops extrapolating. Default ``"none"``:
    the window only.
    """

    def __init__(
        self, embedding_dim: int, hidden_dim: int, window: int = 3, *, context: str = "none"
    ) -> None:
        super().__init__()
        if window < 1 or window % 2 == 0:
            raise ValueError(f"encoder_window must be a positive odd number, got {window!r}")
        check_choice("encoder_context", context, ENCODER_CONTEXTS)
        self.convolution = nn.Conv1d(embedding_dim, hidden_dim, window, padding=window // 2)
        self.summary = MeanPooling(hidden_dim)  # the decoder's initial state: mean over real tokens
        self.context = context
        if context == "right":
            self.context_features = nn.Linear(embedding_dim, hidden_dim)  # V
            self.context_projection = nn.Linear(hidden_dim, hidden_dim, bias=False)  # U

    def forward(self, embedded: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """``embedded [B, S, E]`` with ``padding_mask [B, S]`` → ``[B, S, H]``."""
        embedded = embedded.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        local = self.convolution(embedded.transpose(1, 2)).transpose(1, 2)
        if self.context == "right":
            local = local + self.context_projection(self.right_context(embedded, padding_mask))
        return torch.tanh(local)

    def right_context(self, embedded: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """``max_{s' > s} ReLU(V x_{s'})`` over the real tokens after each ``s`` (0 where there are
        none): ``[B, S, H]``."""
        features = torch.relu(self.context_features(embedded)).masked_fill(padding_mask.unsqueeze(-1), 0.0)
        from_here = features.flip(1).cummax(dim=1).values.flip(1)  # max over s' >= s
        return torch.cat([from_here[:, 1:], torch.zeros_like(from_here[:, :1])], dim=1)


def _residual_projection(embedding_dim: int, hidden_dim: int) -> nn.Module:
    if embedding_dim == hidden_dim:
        return nn.Identity()
    return nn.Linear(embedding_dim, hidden_dim, bias=False)


@dataclass
class _DecodedStep:
    logits: torch.Tensor  # [B, 1, V]
    weights: torch.Tensor  # [B, 1, S]
    tokens: torch.Tensor | None  # [B]; None under teacher forcing
    alive: torch.Tensor  # [B] bool: no <eos> before this step
    variables: dict[str, torch.Tensor]


def _stack_steps(steps: list[_DecodedStep]) -> Seq2SeqOutput:
    alive = torch.stack([step.alive for step in steps], dim=1)
    attention = torch.cat([step.weights for step in steps], dim=1) * alive.unsqueeze(-1)
    variables = {
        name: torch.cat([step.variables[name] for step in steps], dim=1) for name in steps[0].variables
    }
    return Seq2SeqOutput(
        logits=torch.cat([step.logits for step in steps], dim=1),
        attention=attention,
        variables=variables,
        tokens=None if steps[0].tokens is None else torch.stack([s.tokens for s in steps], dim=1),  # type: ignore[misc]
    )
