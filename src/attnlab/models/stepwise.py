"""Sequence-to-sequence models decoded one step at a time, and the stop helpers they share.

:class:`StepwiseSeq2Seq` is the decoding of Syntactic Attention
(:mod:`attnlab.models.syntactic_attention`), the GRU + attention baseline
(:mod:`attnlab.models.gru_attention`) and the Transformer (:mod:`attnlab.models.transformer`): a
subclass says how to :meth:`~StepwiseSeq2Seq.start` (encode a batch) and how to take one
:meth:`~StepwiseSeq2Seq.step`, and gets teacher-forced ``forward``, batched greedy decoding that
stops each sequence at its own ``<eos>`` (with the optional stop rules ``stop_threshold`` and
``stop_lookahead``), and decoding with the output length given (no ``<eos>`` predicted; Russin et
al.'s evaluation). Tensors are batch-first; padding masks are ``True`` at padding.

The helpers are those of a model that stops by itself (issues 28, 29): :func:`end_marker_word`
gives the end marker its word id, :func:`append_end_marker` puts it after each source's words,
:func:`stop_log_probs` turns a stop probability (e.g. the attention on that position) and word
logits into log-probabilities, and :func:`check_stop_threshold` checks a stop rule's option.
:func:`run_packed` runs the recurrent encoders over right-padded sources.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.attention.base import check_right_padded
from attnlab.checks import check_int
from attnlab.models.seq2seq import Seq2SeqOutput, check_target_input, check_vocabularies

__all__ = [
    "StepwiseSeq2Seq",
    "append_end_marker",
    "check_stop_threshold",
    "end_marker_word",
    "run_packed",
    "stop_log_probs",
]


class StepwiseSeq2Seq(nn.Module):
    """A decoder run one step at a time: teacher forcing, greedy and given-length decoding.

    Subclasses implement :meth:`start` (encode a batch, return the decoding state) and
    :meth:`step` (one decoding step from the previous output tokens).
    """

    never_predicted: torch.Tensor
    never_predicted_given_length: torch.Tensor

    def __init__(
        self, source_vocab_size: int, target_vocab_size: int, pad_id: int, sos_id: int, eos_id: int
    ) -> None:
        super().__init__()
        check_vocabularies(type(self).__name__, source_vocab_size, target_vocab_size, pad_id, sos_id, eos_id)
        self.pad_id, self.sos_id, self.eos_id = pad_id, sos_id, eos_id
        never_predicted = torch.zeros(target_vocab_size)
        never_predicted[[pad_id, sos_id]] = float("-inf")
        self.register_buffer("never_predicted", never_predicted, persistent=False)
        no_eos = never_predicted.clone()
        no_eos[eos_id] = float("-inf")
        self.register_buffer("never_predicted_given_length", no_eos, persistent=False)

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> Any:
        raise NotImplementedError

    def step(self, state: Any, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``previous`` ``[B]`` → logits ``[B, V]``, attention ``[B, S]`` and the next state."""
        raise NotImplementedError

    def forward(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, target_input: torch.Tensor
    ) -> Seq2SeqOutput:
        """Teacher forcing: logits ``[B, T, V]`` for ``target_input`` ``[B, T]`` (``<sos>`` + target)."""
        check_target_input(type(self).__name__, source, target_input)
        state = self.start(source, source_padding_mask)
        logits, weights = [], []
        for t in range(target_input.size(1)):
            step_logits, step_weights, state = self.step(state, target_input[:, t])
            logits.append(step_logits)
            weights.append(step_weights)
        return Seq2SeqOutput(torch.stack(logits, dim=1), torch.stack(weights, dim=1))

    @torch.no_grad()
    def greedy_decode(
        self,
        source: torch.Tensor,
        source_padding_mask: torch.Tensor,
        max_length: int,
        stop_threshold: float | None = None,
        stop_lookahead: float | None = None,
    ) -> Seq2SeqOutput:
        """Batched greedy decoding; each sequence stops at its own ``<eos>``.

        Decoding ends when every sequence has produced ``<eos>`` or after ``max_length`` steps.
        Positions after a sequence's ``<eos>`` hold the pad id and zero attention.

        Two stop rules read nothing but the model's own output (no length, no oracle; issue 29,
        docs/results.md). Both default to ``None``, plain greedy: ``<eos>`` when it is the most
        probable token. ``p(<eos>)`` is the step's softmax over the tokens that can be predicted;
        with Syntactic Attention's ``stop_from_attention`` it is the attention on the end marker.

        * ``stop_threshold`` ``τ``: a step emits ``<eos>`` exactly when ``p(<eos>) ≥ τ``, and
          otherwise the most probable other token: "stop only once the end marker holds at least
          ``τ`` of the attention". On add-jump the trained alignment brushes the marker with
          0.5–0.7 of its mass at the boundaries of repeated parts and reaches it with about 0.999
          at the end; a model whose true ends are soft (undertrained) then stops too late.
        * ``stop_lookahead`` ``ρ``: decode the whole budget, feeding the most probable token
          other than ``<eos>`` at every step, and stop at the first step whose ``<eos>`` passes the
          rule above (or is the most probable token, without ``τ``) and has
          ``p(<eos>) ≥ ρ · max_{j ≥ i} p_j(<eos>)``: a tentative end is skipped when the model is
          much surer of an end later. Costs ``max_length`` steps for every batch; with a decoder
          that does not read its outputs (Syntactic Attention) the later steps are exactly those
          greedy decoding would have taken.
        """
        check_int("max_length", max_length)  # decoding steps
        check_stop_threshold(stop_threshold)
        check_stop_threshold(stop_lookahead, "stop_lookahead")
        if stop_lookahead is not None:
            return self._decode_with_lookahead(
                source, source_padding_mask, max_length, stop_threshold, stop_lookahead
            )
        state = self.start(source, source_padding_mask)
        previous = torch.full((source.size(0),), self.sos_id, dtype=torch.long, device=source.device)
        finished = torch.zeros_like(previous, dtype=torch.bool)
        logits, weights, tokens = [], [], []
        for _ in range(max_length):
            step_logits, step_weights, state = self.step(state, previous)
            stops, others = self.stop_and_other(step_logits, stop_threshold)
            step_tokens = torch.where(stops, torch.full_like(others, self.eos_id), others)
            step_tokens = step_tokens.masked_fill(finished, self.pad_id)
            logits.append(step_logits)
            weights.append(step_weights * (~finished).unsqueeze(-1))
            tokens.append(step_tokens)
            finished = finished | (step_tokens == self.eos_id)
            if bool(finished.all()):
                break
            previous = step_tokens
        return Seq2SeqOutput(
            torch.stack(logits, dim=1), torch.stack(weights, dim=1), tokens=torch.stack(tokens, dim=1)
        )

    def stop_and_other(
        self, logits: torch.Tensor, stop_threshold: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether each row of ``logits`` ``[..., V]`` stops (see :meth:`greedy_decode`), and its
        most probable token other than ``<eos>``: the two choices of a greedy decoding step."""
        others = (logits + self.never_predicted_given_length).argmax(dim=-1)
        if stop_threshold is None:
            stops = (logits + self.never_predicted).argmax(dim=-1) == self.eos_id
        else:
            stops = self._eos_probability(logits) >= stop_threshold
        return stops, others

    def _eos_probability(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits + self.never_predicted, dim=-1)[..., self.eos_id]

    def _decode_with_lookahead(
        self,
        source: torch.Tensor,
        source_padding_mask: torch.Tensor,
        max_length: int,
        stop_threshold: float | None,
        stop_lookahead: float,
    ) -> Seq2SeqOutput:
        """:meth:`greedy_decode` with ``stop_lookahead``: all ``max_length`` steps, then the stop."""
        state = self.start(source, source_padding_mask)
        previous = torch.full((source.size(0),), self.sos_id, dtype=torch.long, device=source.device)
        logits, weights, stops, others = [], [], [], []
        for _ in range(max_length):
            step_logits, step_weights, state = self.step(state, previous)
            step_stops, previous = self.stop_and_other(step_logits, stop_threshold)
            logits.append(step_logits)
            weights.append(step_weights)
            stops.append(step_stops)
            others.append(previous)
        all_logits = torch.stack(logits, dim=1)  # [B, T, V]
        eos = self._eos_probability(all_logits)  # [B, T]
        later_max = eos.flip(1).cummax(dim=1).values.flip(1)  # max over steps j >= i
        stop_here = torch.stack(stops, dim=1) & (eos >= stop_lookahead * later_max)
        steps = torch.arange(max_length, device=source.device)
        stop = torch.where(stop_here, steps, max_length).min(dim=1).values  # [B]; max_length: none
        width = min(int(stop.max()) + 1, max_length)
        tokens = torch.stack(others, dim=1)[:, :width]
        tokens = torch.where(steps[:width] == stop.unsqueeze(1), self.eos_id, tokens)
        tokens = tokens.masked_fill(steps[:width] > stop.unsqueeze(1), self.pad_id)
        kept = (steps[:width] <= stop.unsqueeze(1)).unsqueeze(-1)
        return Seq2SeqOutput(
            all_logits[:, :width], torch.stack(weights, dim=1)[:, :width] * kept, tokens=tokens
        )

    @torch.no_grad()
    def decode_with_lengths(
        self, source: torch.Tensor, source_padding_mask: torch.Tensor, lengths: torch.Tensor
    ) -> Seq2SeqOutput:
        """Greedy decoding of exactly ``lengths[b]`` tokens per sequence (the output length given).

        ``<eos>`` is never predicted; the returned ``tokens`` ``[B, max(lengths) + 1]`` hold the
        decoded tokens, an ``<eos>`` at position ``lengths[b]`` and padding after it, so the usual
        sequence metrics apply. Logits and attention cover the ``max(lengths)`` decoded steps
        (attention is zero past each sequence's length).
        """
        lengths = lengths.to(source.device)
        if (
            lengths.dim() != 1
            or lengths.size(0) != source.size(0)
            or lengths.is_floating_point()
            or lengths.dtype == torch.bool
            or bool((lengths < 1).any())
        ):
            raise ValueError(
                f"lengths must be [batch={source.size(0)}] positive ints, "
                f"got {lengths.dtype} {lengths.tolist()}"
            )
        state = self.start(source, source_padding_mask)
        previous = torch.full((source.size(0),), self.sos_id, dtype=torch.long, device=source.device)
        logits, weights, tokens = [], [], []
        for t in range(int(lengths.max())):
            step_logits, step_weights, state = self.step(state, previous)
            alive = lengths > t
            step_tokens = (step_logits + self.never_predicted_given_length).argmax(dim=-1)
            step_tokens = step_tokens.masked_fill(~alive, self.pad_id)
            logits.append(step_logits)
            weights.append(step_weights * alive.unsqueeze(-1))
            tokens.append(step_tokens)
            previous = step_tokens
        decoded = torch.stack(tokens + [torch.full_like(previous, self.pad_id)], dim=1)
        decoded.scatter_(1, lengths.unsqueeze(1), self.eos_id)
        return Seq2SeqOutput(torch.stack(logits, dim=1), torch.stack(weights, dim=1), tokens=decoded)


# ------------------------------------------------------------------------------ stopping by itself


def check_stop_threshold(value: float | None, name: str = "stop_threshold") -> None:
    """A ``ValueError`` unless ``value`` (a stop rule's ``stop_threshold`` or ``stop_lookahead``)
    is ``None`` or a number in ``(0, 1]``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a probability in (0, 1] or None, got {value!r}")
    if not 0.0 < value <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be a probability in (0, 1] (a fraction of p(<eos>)), got {value}")


def stop_log_probs(
    word_logits: torch.Tensor, eos_id: int, stop: torch.Tensor, rest: torch.Tensor
) -> torch.Tensor:
    """Log-probabilities ``[..., V]`` of a model whose stop decision is its own: ``log stop`` for
    ``<eos>``, and for every other token ``log rest`` plus its log-softmax among ``word_logits``
    without ``<eos>``. ``stop`` and ``rest`` (``[..., 1]``, e.g. the attention on an end position and
    on the words) should sum to 1; each is clamped to the smallest positive float before the log."""
    tiny = torch.finfo(word_logits.dtype).tiny
    is_eos = torch.zeros(word_logits.size(-1), dtype=torch.bool, device=word_logits.device)
    is_eos[eos_id] = True
    words = F.log_softmax(word_logits.masked_fill(is_eos, float("-inf")), dim=-1)
    return torch.where(is_eos, stop.clamp_min(tiny).log(), words + rest.clamp_min(tiny).log())


def end_marker_word(source_vocab_size: int, end_marker: bool, stop_from_attention: bool) -> int | None:
    """The end marker's word id, one past the ``source_vocab_size`` real words (``None`` without
    ``end_marker``), for a recurrent model's options ``end_marker`` / ``stop_from_attention``; the
    stop from the attention needs the marker (a ``ValueError`` without it)."""
    if stop_from_attention and not end_marker:
        raise ValueError(
            "stop_from_attention needs end_marker=True: p(<eos>) is the attention on the end marker"
        )
    return source_vocab_size if end_marker else None


def append_end_marker(
    source: torch.Tensor, padding_mask: torch.Tensor, end_id: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Append ``end_id`` after the last real word of each right-padded row.

    Returns the source ``[B, S + 1]``, its padding mask and the end marker's column ``[B]``.
    """
    lengths = (~padding_mask).sum(dim=1)
    check_right_padded("end_marker", padding_mask, "the source's padding mask")
    column = lengths.unsqueeze(1)
    rows = source.size(0)
    source = torch.cat([source, source.new_full((rows, 1), pad_id)], dim=1).scatter(1, column, end_id)
    padding_mask = torch.cat([padding_mask, padding_mask.new_ones(rows, 1)], dim=1).scatter(1, column, False)
    return source, padding_mask, lengths


def run_packed(
    rnn: nn.RNNBase, inputs: torch.Tensor, padding_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a (bidirectional) RNN over right-padded ``inputs`` per sequence length.

    Returns the outputs ``[B, S, dirs·H]`` (zero at padding) and the last layer's final states of
    both directions concatenated, ``[B, dirs·H]``.
    """
    lengths = (~padding_mask).sum(dim=1).cpu()
    packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    outputs, final = rnn(packed)
    outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=inputs.size(1))
    final = final[0] if isinstance(final, tuple) else final  # LSTM: (h_n, c_n)
    directions = 2 if rnn.bidirectional else 1
    return outputs, torch.cat(list(final[-directions:]), dim=-1)
