"""The GRU + attention baseline of Russin et al. (2019)'s Table 1: Bastings et al. (2018).

A bidirectional GRU encoder, additive attention (Bahdanau et al. 2015) and a GRU decoder fed
``[E y_{i−1} ; c_i]`` ("+attn") or ``c_i`` alone when its dependency on the previous action is
removed (``previous_output=False``, "+attn −dep"). Decoding is
:class:`~attnlab.models.stepwise.StepwiseSeq2Seq`'s.

attnlab options, not in Bastings et al. (issue 28: the recurrent Shift Attender beside the
Transformer on SCAN):

* ``attender`` / ``attender_options``: any attnlab attender in place of the additive one
  (:func:`attnlab.attention.build_attender`; query ``s_{i−1}``, keys and values the annotations
  ``h``). ``attender="shift"`` is Dubois et al. (2020)'s location-based walk in this recurrent
  model: the attention moves from where it was (:mod:`attnlab.attention.shift`).
* ``end_marker=True`` appends an end-of-command word after each source's last word
  (:func:`~attnlab.models.stepwise.append_end_marker`), which the attention can reach at the end.
* ``stop_from_attention=True`` (needs ``end_marker``) makes the stop the attention on that word and
  nothing else, as in Syntactic Attention's option of the same name: ``p(<eos>) = α_i,end`` and
  ``p(y) = (1 − α_i,end) softmax_{y ≠ <eos>}(W_o [s_i ; c_i])``
  (:func:`~attnlab.models.stepwise.stop_log_probs`); the logits returned are these
  log-probabilities. ``c_i`` is the glimpse of every column, the end marker's included (the paper
  is silent; the marker's value tells the readout where the attention is).
* ``decoder_cell="lstm"`` makes the decoder an LSTM cell (Hochreiter & Schmidhuber 1997):
  ``(s_i, m_i) = LSTM([E y_{i−1} ; c_i], (s_{i−1}, m_{i−1}))`` with ``m_0 = 0`` (our choice), the
  query and readout still reading ``s``. Why: the recurrent Shift Attender lengthens a SCAN sentence
  past the training lengths only when its decoder counts the walk's steps past them (one draw of
  six; docs/results.md, issue 28, sessions 49–50), and Weiss, Goldberg & Yahav (2018, "On the
  Practical Computational Power of Finite Precision RNNs for Language Recognition") show that an
  LSTM's cell can count without bound (``m_i = m_{i−1} + 1`` with its gates saturated), which a
  GRU's state, an interpolation between its past and a squashed candidate, cannot. Measured on the
  length split (``scan_lstm_shift``, 5 seeds; docs/results.md, issue 28, session 51): 11.6 ± 3.5%
  exact match (the GRU's five draws 21.5 ± 21.5%), no draw getting most of the 24-action sentences
  right; like the GRU draws that do not lengthen, it ends their loop at 18–23 actions. An option,
  not a default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.attention import AttentionState, build_attender
from attnlab.attention.base import check_padding_mask
from attnlab.checks import check_choice
from attnlab.models.stepwise import (
    StepwiseSeq2Seq,
    append_end_marker,
    end_marker_word,
    run_packed,
    stop_log_probs,
)

__all__ = ["DECODER_CELLS", "GRUAttentionSeq2Seq"]

DECODER_CELLS: dict[str, type[nn.GRUCell] | type[nn.LSTMCell]] = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}
"""The decoder cells of :class:`GRUAttentionSeq2Seq` (``decoder_cell``)."""


@dataclass
class _GRUState:
    annotations: torch.Tensor  # [B, S, 2H]
    padding_mask: torch.Tensor
    hidden: torch.Tensor  # [B, D]
    attention: AttentionState
    end_positions: torch.Tensor | None = None  # the end marker's column [B] (with end_marker)
    memory: torch.Tensor | None = None  # [B, D]: the LSTM's cell state (decoder_cell="lstm")


class GRUAttentionSeq2Seq(StepwiseSeq2Seq):
    """GRU encoder–decoder with additive attention: Bastings et al. (2018) "+attn" and "+attn −dep".

    Step ``i``: ``α_i = attention(s_{i−1}, h)``, ``c_i = Σ_j α_ij h_j``,
    ``s_i = GRU([E y_{i−1} ; c_i], s_{i−1})`` (or ``GRU(c_i, s_{i−1})`` with
    ``previous_output=False``), ``p(y_i) = softmax(W_o dropout([s_i ; c_i]))``;
    ``s_0 = tanh(W_0 [→h_T ; ←h_1])``. Defaults: Lake & Baroni's best add-jump model (1 layer,
    100 units, dropout 0.1), which Bastings et al. start from. ``attender``, ``attender_options``,
    ``end_marker``, ``stop_from_attention`` and ``decoder_cell`` (``"gru"``, the default, or
    ``"lstm"``): the module docstring.
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
        attender: str = "additive",
        attender_options: dict[str, Any] | None = None,
        end_marker: bool = False,
        stop_from_attention: bool = False,
        decoder_cell: str = "gru",
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__(source_vocab_size, target_vocab_size, pad_id, sos_id, eos_id)
        if min(embedding_dim, encoder_hidden_dim, decoder_hidden_dim, encoder_layers) < 1:
            raise ValueError("embedding_dim, hidden sizes and encoder_layers must be >= 1")
        check_choice("decoder_cell", decoder_cell, DECODER_CELLS)
        self.end_marker_id = end_marker_word(source_vocab_size, end_marker, stop_from_attention)
        self.stop_from_attention = stop_from_attention
        source_vocab_size += int(end_marker)
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
        self.attender = build_attender(
            attender, decoder_hidden_dim, annotation_dim, annotation_dim, **(attender_options or {})
        )
        self.target_embedding = (
            nn.Embedding(target_vocab_size, embedding_dim, padding_idx=pad_id) if previous_output else None
        )
        input_dim = annotation_dim + (embedding_dim if previous_output else 0)
        self.decoder_cell = DECODER_CELLS[decoder_cell](input_dim, decoder_hidden_dim)
        self.output = nn.Linear(decoder_hidden_dim + annotation_dim, target_vocab_size)

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> _GRUState:
        check_padding_mask(
            type(self).__name__, source_padding_mask, source.shape, "source_padding_mask", right_padded=True
        )
        end_positions = None
        if self.end_marker_id is not None:
            source, source_padding_mask, end_positions = append_end_marker(
                source, source_padding_mask, self.end_marker_id, self.pad_id
            )
        embedded = self.dropout(self.source_embedding(source))
        annotations, final = run_packed(self.encoder, embedded, source_padding_mask)
        hidden = torch.tanh(self.bridge(final))
        return _GRUState(
            annotations=annotations,
            padding_mask=source_padding_mask,
            hidden=hidden,
            attention=self.attender.initial_state(annotations, source_padding_mask),
            end_positions=end_positions,
            memory=torch.zeros_like(hidden) if isinstance(self.decoder_cell, nn.LSTMCell) else None,
        )

    def step(self, state: _GRUState, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, _GRUState]:
        attended = self.attender(
            state.hidden, state.annotations, state.annotations, state.padding_mask, state.attention
        )
        inputs = attended.glimpse
        if self.target_embedding is not None:
            inputs = torch.cat([self.dropout(self.target_embedding(previous)), inputs], dim=-1)
        memory = None
        if state.memory is None:
            hidden = self.decoder_cell(inputs, state.hidden)
        else:
            hidden, memory = self.decoder_cell(inputs, (state.hidden, state.memory))
        logits = self.output(self.dropout(torch.cat([hidden, attended.glimpse], dim=-1)))
        if self.stop_from_attention:
            assert state.end_positions is not None
            on_end = attended.weights.gather(1, state.end_positions.unsqueeze(1))  # α_i,end [B, 1]
            logits = stop_log_probs(logits, self.eos_id, on_end, 1.0 - on_end)
        next_state = _GRUState(
            state.annotations, state.padding_mask, hidden, attended.state, state.end_positions, memory
        )
        return logits, attended.weights, next_state
