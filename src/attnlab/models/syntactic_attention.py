"""Syntactic Attention (Russin et al. 2019).

:class:`SyntacticAttentionSeq2Seq` keeps two streams apart (§2, Figure 2):

* translation: ``m_j = W_m x_j`` — an embedding of word ``j`` alone (120-d), no context;
* alignment: ``h_j = [→h_{j−1} ; ←h_{j+1}]`` from a bidirectional LSTM over the neighbours of word
  ``j`` (2 layers, 200 units per direction;
  :class:`~attnlab.attention.syntactic.ShiftedBidirectionalEncoder`);
* decoder: an LSTM (1 layer, 400 units) whose state ``s`` only aligns::

      e_ij = s_i · h_j,  α_ij = softmax_j(e_ij)                      (eq. 2)
      d_i = Σ_j α_ij m_j,  p(y_i | y_<i, x) = softmax(W_y d_i + b)    (eq. 1)
      c_i = Σ_j α_ij h_j,  s_{i+1} = LSTM(c_i, s_i)                   (eq. 3)

  The decoder never reads the previous output: what is said comes only from the ``m_j``.

Ablations (Table 2) are constructor flags: ``translation_encoder="rnn"`` replaces ``m_j`` by the
states ``[→m_j ; ←m_j]`` of a bidirectional LSTM over the translation embeddings, and
``translate_from_context=True`` predicts from ``f([d_i ; c_i])``.

Decoding (teacher forcing, greedy with ``<eos>``, the output length given: the paper's evaluation)
is :class:`~attnlab.models.stepwise.StepwiseSeq2Seq`'s, shared with the baseline of Table 1
(:mod:`attnlab.models.gru_attention`) and the Transformer. Tensors are batch-first; padding masks
are ``True`` at padding; attention weights come back in
:class:`~attnlab.models.seq2seq.Seq2SeqOutput`.

Choices where the paper is silent (some follow the authors' public code):

* the decoder starts from ``s_0 = ReLU(W_0 [→h_T ; ←h_1] + b_0)`` (the final states of both
  alignment LSTMs) and a zero cell state; attention at step ``i`` is computed from the state
  before the update with ``c_i``, so step 1 attends with ``s_0``;
* dropout (0.5) on both source embeddings and between the stacked LSTM layers;
* ``W_ih c_i = Σ_j α_ij (W_ih h_j)``: the decoder's input projection is applied to the ``h_j`` once
  per sentence and attended, which is exact (``Σ_j α_ij = 1``) and halves the work per step;
* the translation biLSTM of the first ablation has ``embedding_dim / 2`` units per direction, so
  ``m_j`` keeps its size, and as many layers as the alignment encoder.

Stopping by itself (attnlab options, not in the paper; issue 29). With the output length given the
model translates SCAN far better than it stops: most add-jump failures are a wrong ``<eos>`` step
(docs/results.md). The Lookup Tables work found the same for a decoder that counts steps, and
fixed it with a stop decision that follows from what is attended (``lookup_shift``,
:mod:`attnlab.attention.shift`). Two flags of :class:`SyntacticAttentionSeq2Seq` bring that here:

* ``end_marker=True`` appends an end-of-command position to every source (a learned word of its
  own in both streams, after the last real word, before the padding). Its translation ``m_end`` is
  read out by ``W_y`` like any word's, so "where" (alignment) reaches the end of the command and
  "what" (translation) of the end marker is ``<eos>``. Attention weights then have ``S + 1``
  columns, the last real one being the end marker.
* ``stop_from_attention=True`` (needs ``end_marker``) makes the stop decision the attention on
  the end marker and nothing else: ``p(<eos>) = α_i,end`` and
  ``p(y) = (1 − α_i,end) softmax_{y ≠ <eos>}(W_y d'_i + b)`` with ``d'_i`` the ``m_j`` of the real
  words averaged by ``α_ij / (1 − α_i,end)``. The logits returned are these log-probabilities.
  Neither the decoder state (except through ``α``) nor the words' translations can move it.

Two more options belong to decoding, not to the model
(:meth:`~attnlab.models.stepwise.StepwiseSeq2Seq.greedy_decode`, config keys
``evaluation.stop_threshold`` and ``evaluation.stop_lookahead``): ``stop_threshold=τ`` emits
``<eos>`` only when ``p(<eos>) ≥ τ``, with ``stop_from_attention`` only once ``α_i,end ≥ τ``;
``stop_lookahead=ρ`` skips a tentative end whose ``p(<eos>)`` is below ``ρ`` times
the largest one later in the budget. Both read nothing but the model's own output (no length, no
oracle). Why: at paper size on add-jump the model with both options stops early on 651
test commands, every one at a step where the alignment is split between the end marker (0.51–0.72
of the mass) and the word to act on next (the rest), at the boundary of a repeated part ("twice",
"thrice", "after"); at the true end the marker holds about 0.999 (docs/results.md, issue 29).
Plain greedy decoding (``τ = None``) stops whenever ``α_i,end`` outweighs the best action.

Where the decoder starts (an attnlab option, not in the paper; issue 29). ``decoder_init="summary"``
(the default, the authors' code) starts from the command's final encoder states, and
``→h_T`` is dominated by the last words. On the turn-left split with the end marker this is the
one failure left: "turn left" occurs in training only as the whole command, so a test command
ending in "… after turn left" starts the decoder where "turn left" alone did, and it goes to the
end marker after one action. Given the initial state of "… after turn right" instead, the same
paper-sized checkpoint translates all 102 such test commands right, stopping by itself; given the
end marker's key of "… after turn right" instead, 53.9% (docs/results.md). ``decoder_init="learned"``
starts every command from one learned state ``s_0``, so where to begin and when to end come from
the attention over the keys alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention import AttentionState
from attnlab.attention.base import check_padding_mask
from attnlab.attention.syntactic import ComposedWordEmbedding, DotProductAttender, ShiftedBidirectionalEncoder
from attnlab.checks import check_choice
from attnlab.models.seq2seq import Seq2SeqOutput, check_target_input
from attnlab.models.stepwise import (
    StepwiseSeq2Seq,
    append_end_marker,
    end_marker_word,
    run_packed,
    stop_log_probs,
)

__all__ = ["SyntacticAttentionSeq2Seq"]

TRANSLATION_ENCODERS = ("linear", "rnn")
DECODER_INITS = ("summary", "learned")


@dataclass
class _SyntacticState:
    """Per-batch decoding state of :class:`SyntacticAttentionSeq2Seq`."""

    translations: torch.Tensor  # m_j            [B, S, E]
    keys: torch.Tensor  # h_j                     [B, S, 2H]
    gate_inputs: torch.Tensor  # W_ih h_j + b     [B, S, 4D]
    padding_mask: torch.Tensor  # True = padding  [B, S]
    hidden: torch.Tensor  # s_i                   [B, D]
    cell: torch.Tensor  # LSTM cell state         [B, D]
    attention: AttentionState
    end_positions: torch.Tensor | None = None  # the end marker's column [B] (with end_marker)


class SyntacticAttentionSeq2Seq(StepwiseSeq2Seq):
    """Russin et al. (2019) Syntactic Attention, eqs. 1–3 (see the module docstring).

    ``decoder_hidden_dim`` must equal ``2 * encoder_hidden_dim`` (the dot product ``s_i · h_j``).

    ``uniform_alignment`` (default ``False``; an attnlab training aid, not in the paper) is a
    switch like ``train()``/``eval()``: while it is ``True`` every ``α_i`` is uniform over the real
    source words (the scores ``e_ij`` are zero), so ``d_i`` is the mean of the ``m_j`` and the
    translation stream learns what each word means before the alignment can sharpen. On the
    English–French set the alignment otherwise collapses onto the sentence-final "." within about
    50 updates and training stays at the unigram loss (docs/results.md).

    ``end_marker`` and ``stop_from_attention`` (default ``False``: the paper's model) are the
    stop mechanisms of the module docstring. The end marker is source word ``source_vocab_size``
    (the embeddings get one more row); sources must be right-padded.

    ``alignment_word_dropout`` (default 0: the paper's model) makes the alignment stream's word
    embedding a :class:`~attnlab.attention.syntactic.ComposedWordEmbedding` with that word-dropout
    probability: a word never seen composed with others in training (add-jump's "jump") is read
    by the alignment as the learned unknown word, not as its never-trained embedding.

    ``alignment_peers`` (default ``False``) reads such a word, when it was seen alone (a one-word
    source), as its peers instead: the mean alignment embedding of the words seen both alone and
    composed ("walk", "run", "look" for add-jump's "jump"). The unknown word stands for every
    dropped word, "turn" included, and on the paper-sized add-jump checkpoints its ambiguity is
    every length-given failure (docs/results.md, issue 29). Works with or without word dropout.

    ``decoder_init`` (``"summary"``, the default: ``s_0 = ReLU(W_0 [→h_T ; ←h_1] + b_0)``; or
    ``"learned"``: one learned ``s_0`` for every command, initialised to zeros, so the first
    attention is uniform until it learns) is where the decoder starts (module docstring).
    """

    uniform_alignment: bool = False

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        *,
        embedding_dim: int = 120,
        encoder_hidden_dim: int = 200,
        encoder_layers: int = 2,
        decoder_hidden_dim: int = 400,
        dropout: float = 0.5,
        translation_encoder: str = "linear",
        translate_from_context: bool = False,
        end_marker: bool = False,
        stop_from_attention: bool = False,
        alignment_word_dropout: float = 0.0,
        alignment_peers: bool = False,
        decoder_init: str = "summary",
        pad_id: int = 0,
        sos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__(source_vocab_size, target_vocab_size, pad_id, sos_id, eos_id)
        _check_options(embedding_dim, encoder_hidden_dim, decoder_hidden_dim, translation_encoder)
        check_choice("decoder_init", decoder_init, DECODER_INITS)
        self.translate_from_context = translate_from_context
        self.end_marker_id = end_marker_word(source_vocab_size, end_marker, stop_from_attention)
        self.stop_from_attention = stop_from_attention
        source_vocab_size += int(end_marker)
        self.dropout = nn.Dropout(dropout)
        self.translation_embedding = nn.Embedding(source_vocab_size, embedding_dim, padding_idx=pad_id)
        self.translation_rnn = (
            _bidirectional_lstm(embedding_dim, embedding_dim // 2, encoder_layers, dropout)
            if translation_encoder == "rnn"
            else None
        )
        self.alignment_embedding: nn.Embedding | ComposedWordEmbedding = (
            ComposedWordEmbedding(
                source_vocab_size, embedding_dim, alignment_word_dropout, pad_id, peers=alignment_peers
            )
            if alignment_word_dropout or alignment_peers
            else nn.Embedding(source_vocab_size, embedding_dim, padding_idx=pad_id)
        )
        self.alignment_encoder = ShiftedBidirectionalEncoder(
            embedding_dim, encoder_hidden_dim, encoder_layers, dropout
        )
        key_dim = self.alignment_encoder.output_dim
        self.initial_state: nn.Linear | None = None
        self.initial_hidden: nn.Parameter | None = None
        if decoder_init == "summary":
            self.initial_state = nn.Linear(key_dim, decoder_hidden_dim)
        else:
            self.initial_hidden = nn.Parameter(torch.zeros(decoder_hidden_dim))
        self.alignment = DotProductAttender(decoder_hidden_dim, key_dim, 4 * decoder_hidden_dim)
        self.decoder_cell = nn.LSTMCell(key_dim, decoder_hidden_dim)
        readout_dim = embedding_dim + (key_dim if translate_from_context else 0)
        self.output = nn.Linear(readout_dim, target_vocab_size)

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> _SyntacticState:
        check_padding_mask(
            type(self).__name__, source_padding_mask, source.shape, "source_padding_mask", right_padded=True
        )
        end_positions = None
        real_words = (~source_padding_mask).sum(dim=1)
        if self.end_marker_id is not None:
            source, source_padding_mask, end_positions = append_end_marker(
                source, source_padding_mask, self.end_marker_id, self.pad_id
            )
        translations = self._translations(source, source_padding_mask)
        if isinstance(self.alignment_embedding, ComposedWordEmbedding):
            words = self.alignment_embedding(source, source_padding_mask, real_words)
        else:
            words = self.alignment_embedding(source)
        encoding = self.alignment_encoder(self.dropout(words), source_padding_mask)
        cell = self.decoder_cell
        gate_inputs = F.linear(encoding.keys, cell.weight_ih, cell.bias_ih + cell.bias_hh)
        if self.initial_state is not None:
            hidden = torch.relu(self.initial_state(encoding.summary))
        else:
            assert self.initial_hidden is not None
            hidden = self.initial_hidden.expand(source.size(0), -1)
        return _SyntacticState(
            translations=translations,
            keys=encoding.keys,
            gate_inputs=gate_inputs,
            padding_mask=source_padding_mask,
            hidden=hidden,
            cell=torch.zeros_like(hidden),
            attention=self.alignment.initial_state(encoding.keys, source_padding_mask),
            end_positions=end_positions,
        )

    def _translations(self, source: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """``m_j = W_m x_j``, or ``[→m_j ; ←m_j]`` with the translation RNN (Table 2, first ablation)."""
        translations = self.dropout(self.translation_embedding(source))
        if self.translation_rnn is not None:
            translations = run_packed(self.translation_rnn, translations, padding_mask)[0]
        return translations

    def align(self, state: _SyntacticState) -> tuple[torch.Tensor, _SyntacticState]:
        """One alignment step: ``α_i`` from ``s_i`` (eq. 2), then ``s_{i+1} = LSTM(c_i, s_i)`` (eq. 3)."""
        query = torch.zeros_like(state.hidden) if self.uniform_alignment else state.hidden
        attended = self.alignment(query, state.keys, state.gate_inputs, state.padding_mask, state.attention)
        cell = self.decoder_cell
        gates = attended.glimpse + F.linear(state.hidden, cell.weight_hh)  # W_ih c_i + W_hh s_i + b
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
        cell_state = torch.sigmoid(forget_gate) * state.cell + torch.sigmoid(input_gate) * torch.tanh(
            candidate
        )
        hidden = torch.sigmoid(output_gate) * torch.tanh(cell_state)
        next_state = _SyntacticState(
            state.translations,
            state.keys,
            state.gate_inputs,
            state.padding_mask,
            hidden,
            cell_state,
            attended.state,
            state.end_positions,
        )
        return attended.weights, next_state

    def readout(self, weights: torch.Tensor, state: _SyntacticState) -> torch.Tensor:
        """Logits from ``d_i = Σ_j α_ij m_j`` (eq. 1), or ``[d_i ; c_i]``; ``weights`` ``[B, T, S]``.

        With ``stop_from_attention``: log-probabilities, ``log α_i,end`` for ``<eos>`` and the
        real words' readout scaled by ``1 − α_i,end`` for the rest (module docstring).
        """
        if not self.stop_from_attention:
            return self.output(self._features(weights, state))
        assert state.end_positions is not None
        index = state.end_positions.view(-1, 1, 1).expand(-1, weights.size(1), 1)
        on_end = weights.gather(2, index)  # α_i,end [B, T, 1]
        on_words = weights.scatter(2, index, 0.0)
        words_mass = on_words.sum(dim=-1, keepdim=True)
        features = self._features(on_words / words_mass.clamp_min(1e-6), state)
        return stop_log_probs(self._words_readout(features), self.eos_id, on_end, words_mass)

    def word_translations(self) -> torch.Tensor:
        """What each source word says when attended alone: ``softmax(W_y m_w + b)`` (eq. 1 with
        ``α`` one-hot on word ``w``), ``[source words (+ the end marker), target tokens]``.

        Dropout is not applied; with ``stop_from_attention`` no word reads out ``<eos>``. A row
        that splits its mass between an action and ``<eos>`` is a word the model cannot both act
        on and stop after; on add-jump the paper's model learns ``I_JUMP`` 0.52 / ``<eos>`` 0.48
        for "jump", whose only training command is "jump" (docs/results.md). Not defined when a
        word's translation depends on its context (``translation_encoder="rnn"`` or
        ``translate_from_context``): a ``ValueError``.
        """
        if not self.translates_words_alone:
            raise ValueError(
                "word_translations needs translation_encoder='linear' and translate_from_context=False: "
                "otherwise a word's translation depends on its context"
            )
        with torch.no_grad():
            return torch.softmax(self._words_readout(self.translation_embedding.weight), dim=-1)

    @property
    def translates_words_alone(self) -> bool:
        """Whether a word's translation ``m_w`` depends on that word alone (no translation RNN, no
        readout of the context ``c_i``), so that :meth:`word_translations` is defined."""
        return self.translation_rnn is None and not self.translate_from_context

    def _words_readout(self, features: torch.Tensor) -> torch.Tensor:
        """``W_y features + b``; with ``stop_from_attention`` the ``<eos>`` logit is ``-inf``: the
        stop comes from the attention on the end marker alone, never from what a word says."""
        logits = self.output(features)
        if self.stop_from_attention:
            logits = logits.index_fill(-1, torch.tensor([self.eos_id], device=logits.device), float("-inf"))
        return logits

    def _features(self, weights: torch.Tensor, state: _SyntacticState) -> torch.Tensor:
        features = torch.bmm(weights, state.translations)
        if self.translate_from_context:
            features = torch.cat([features, torch.bmm(weights, state.keys)], dim=-1)
        return features

    def step(
        self, state: _SyntacticState, previous: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, _SyntacticState]:
        """One decoding step; ``previous`` is ignored (the decoder never reads its outputs)."""
        weights, next_state = self.align(state)
        return self.readout(weights.unsqueeze(1), state).squeeze(1), weights, next_state

    def forward(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, target_input: torch.Tensor
    ) -> Seq2SeqOutput:
        """All ``T = target_input.size(1)`` steps; the readout runs once over all of them."""
        check_target_input(type(self).__name__, source, target_input)
        state = first = self.start(source, source_padding_mask)
        weights = []
        for _ in range(target_input.size(1)):
            step_weights, state = self.align(state)
            weights.append(step_weights)
        attention = torch.stack(weights, dim=1)
        return Seq2SeqOutput(self.readout(attention, first), attention)


def _check_options(embedding_dim: int, encoder_hidden: int, decoder_hidden: int, translation: str) -> None:
    if min(embedding_dim, encoder_hidden, decoder_hidden) < 1:
        raise ValueError("embedding_dim, encoder_hidden_dim and decoder_hidden_dim must be >= 1")
    if decoder_hidden != 2 * encoder_hidden:
        raise ValueError(
            f"decoder_hidden_dim ({decoder_hidden}) must be 2 * encoder_hidden_dim ({encoder_hidden}): "
            "the alignment score is the dot product s_i · h_j with h_j = [→h_(j-1); ←h_(j+1)]"
        )
    check_choice("translation_encoder", translation, TRANSLATION_ENCODERS)
    if translation == "rnn" and embedding_dim % 2:
        raise ValueError(f"translation_encoder='rnn' needs an even embedding_dim, got {embedding_dim}")


def _bidirectional_lstm(input_dim: int, hidden_dim: int, layers: int, dropout: float) -> nn.LSTM:
    return nn.LSTM(
        input_dim,
        hidden_dim,
        layers,
        batch_first=True,
        bidirectional=True,
        dropout=dropout if layers > 1 else 0.0,
    )
