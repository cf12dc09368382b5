"""Batched evaluation of sequence-to-sequence models: greedy decoding and its metrics.

:func:`evaluate_seq2seq`: the Lookup Tables' metrics (Dubois et al. 2020, §6.2: seqAcc, seqAccBE,
attnLoss) over any batches. :func:`evaluate_split`: SCAN's and English–French's (Russin et al.
2019) over an encoded split of :mod:`attnlab.tasks.scan_data` — exact match with and without the
target's length given, BLEU, ``<unk>`` counts. :func:`validate_split`: its loss and exact match
from one teacher-forced pass, without decoding (:func:`teacher_forced_verdicts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch
import torch.nn.functional as F

from attnlab.evaluation.bleu import corpus_bleu
from attnlab.evaluation.metrics import (
    attention_squared_errors,
    check_gold_positions,
    sequence_correct,
    sequence_correct_before_eos,
)
from attnlab.models.seq2seq import RecurrentSeq2Seq, Seq2SeqOutput
from attnlab.models.stepwise import StepwiseSeq2Seq
from attnlab.tasks import batching
from attnlab.tasks.examples import Seq2SeqBatch
from attnlab.tasks.scan_data import UNK_TOKEN, EncodedSplit
from attnlab.tasks.vocab import Vocabulary

Seq2SeqModel = RecurrentSeq2Seq | StepwiseSeq2Seq
"""A model with teacher-forced ``forward``, ``greedy_decode`` and ``pad_id`` / ``eos_id``."""


def decoding_budget(source_len: int, max_length: int | None = None) -> int:
    """How many tokens to decode: ``max_length`` when configured, else well beyond any target of a
    length-preserving task (``2·S + 10``)."""
    return max_length or 2 * source_len + 10


def teacher_forced_loss(
    model: Seq2SeqModel, batch: Seq2SeqBatch, attention_guidance: float = 0.0
) -> torch.Tensor:
    """Mean token cross-entropy of the target (``<eos>`` included, padding excluded).

    With ``attention_guidance > 0``, plus that weight times :func:`attention_guidance_loss` of the
    batch's gold attention (Hupkes et al. 2018's attentive guidance; the batch must have one).
    """
    output = model(batch.source, batch.source_padding_mask, batch.target_input)
    loss = F.cross_entropy(
        output.logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=model.pad_id
    )
    if attention_guidance > 0:
        if batch.gold_attention is None:
            raise ValueError("attention guidance needs gold attention, and this batch has none")
        loss = loss + attention_guidance * attention_guidance_loss(output.attention, batch.gold_attention)
    return loss


def attention_guidance_loss(attention: torch.Tensor, gold_attention: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log alpha_t[g_t]`` over the target steps with a gold position ``g_t``.

    The attentive-guidance loss of Hupkes et al. (2018, "Learning compositionally through attentive
    guidance"): the cross-entropy between the one-hot gold attention and the model's attention
    ``[B, T, S]``. ``gold_attention`` is ``[B, T]`` source indices, negative where unknown or padding.
    Weights below ``1e-30`` count as ``1e-30`` (a bounded loss where a Gaussian underflows).
    """
    if attention.dim() != 3 or gold_attention.shape != attention.shape[:2]:
        raise ValueError(
            f"gold_attention must be [batch, steps] = {tuple(attention.shape[:2])} for attention "
            f"[batch, steps, source_len] {tuple(attention.shape)}, got {tuple(gold_attention.shape)}"
        )
    known = gold_attention >= 0
    if not bool(known.any()):
        return attention.new_zeros(())
    check_gold_positions(gold_attention, attention.size(-1))
    picked = attention.gather(-1, gold_attention.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return -picked[known].clamp_min(1e-30).log().mean()


@dataclass
class ExampleOutcomes:
    """What happened to each example of an evaluation, in the order of its examples: the decoded
    target ids (up to the first ``<eos>`` or the decoding budget) and, per metric name (e.g.
    ``seq_acc``), whether the example counted as correct. The units of a paired significance test
    (:mod:`attnlab.evaluation.significance`)."""

    predictions: list[list[int]] = field(default_factory=list)
    correct: dict[str, list[bool]] = field(default_factory=dict)

    def add(self, decoded: torch.Tensor, eos_id: int, **correct: torch.Tensor) -> None:
        """Record a batch: ``decoded`` ``[B, T]`` ids and a ``[B]`` bool tensor per metric."""
        for name, flags in correct.items():
            if flags.shape != decoded.shape[:1]:
                raise ValueError(
                    f"{name} must hold one verdict per decoded row ({decoded.size(0)}), "
                    f"got shape {tuple(flags.shape)}"
                )
        for row in decoded.tolist():
            self.predictions.append(row[: row.index(eos_id)] if eos_id in row else row)
        for name, flags in correct.items():
            self.correct.setdefault(name, []).extend(bool(flag) for flag in flags.tolist())

    def extend_in_order(self, other: ExampleOutcomes, rows: list[int]) -> None:
        """Append ``other``'s examples, recorded in batch order, in the order of their dataset
        ``rows`` (``rows[i]`` is the dataset row of ``other``'s ``i``-th example; a permutation of
        ``0 … n-1``)."""
        if sorted(rows) != list(range(len(rows))) or len(rows) != len(other.predictions):
            raise ValueError("rows must be a permutation of the recorded examples' indices")
        position = {row: i for i, row in enumerate(rows)}
        order = [position[row] for row in range(len(rows))]
        self.predictions += [other.predictions[i] for i in order]
        for name, flags in other.correct.items():
            self.correct.setdefault(name, []).extend(flags[i] for i in order)


@dataclass
class _Totals:
    examples: int = 0
    correct: int = 0
    correct_before_eos: int = 0
    attention_error: float = 0.0
    attention_examples: int = 0
    loss: float = 0.0
    tokens: int = 0

    def metrics(self) -> dict[str, float]:
        result = {
            "seq_acc": 100.0 * self.correct / max(self.examples, 1),
            "seq_acc_be": 100.0 * self.correct_before_eos / max(self.examples, 1),
            "loss": self.loss / max(self.tokens, 1),
            "examples": float(self.examples),
        }
        if self.attention_examples:
            result["attn_loss"] = self.attention_error / self.attention_examples
        return result


@torch.no_grad()
def evaluate_seq2seq(
    model: Seq2SeqModel,
    batches: Iterable[Seq2SeqBatch],
    device: torch.device,
    *,
    max_length: int | None = None,
    outcomes: ExampleOutcomes | None = None,
) -> dict[str, float]:
    """seqAcc, seqAccBE (percent), attnLoss (squared positions) and teacher-forced loss.

    ``max_length`` caps the number of decoded tokens (``<eos>`` included); by default
    :func:`decoding_budget` of each batch's source length. ``outcomes``, when given, receives
    each example's prediction and its ``seq_acc`` / ``seq_acc_be`` verdicts.
    """
    model.eval()
    totals = _Totals()
    for batch in batches:
        batch = batch.to(device)
        _accumulate(model, batch, totals, max_length, outcomes)
    return totals.metrics()


def _accumulate(
    model: Seq2SeqModel,
    batch: Seq2SeqBatch,
    totals: _Totals,
    max_length: int | None,
    outcomes: ExampleOutcomes | None,
) -> None:
    decoded = decode_within_budget(model, batch.source, batch.source_padding_mask, max_length)
    assert decoded.tokens is not None
    eos_id, pad_id = model.eos_id, model.pad_id
    correct = sequence_correct(decoded.tokens, batch.target_output, eos_id=eos_id, pad_id=pad_id)
    correct_before_eos = sequence_correct_before_eos(
        decoded.tokens, batch.target_output, eos_id=eos_id, pad_id=pad_id
    )
    totals.examples += len(batch)
    totals.correct += int(correct.sum())
    totals.correct_before_eos += int(correct_before_eos.sum())
    if outcomes is not None:
        outcomes.add(decoded.tokens, model.eos_id, seq_acc=correct, seq_acc_be=correct_before_eos)
    if batch.gold_attention is not None:
        errors, scored = attention_squared_errors(
            decoded.attention, batch.gold_attention, decoded.tokens, eos_id=model.eos_id
        )
        totals.attention_error += float(errors[scored].sum())
        totals.attention_examples += int(scored.sum())
    tokens = int((batch.target_output != model.pad_id).sum())
    totals.loss += float(teacher_forced_loss(model, batch)) * tokens
    totals.tokens += tokens


@dataclass
class TeacherForcedVerdicts:
    """What one teacher-forced pass of a batch says: its summed token cross-entropy and ``tokens``
    (target tokens with ``<eos>``, padding excluded), and per example (bool ``[B]``) whether greedy
    decoding would produce the target exactly, stopping by itself (``exact``) or with its length
    given (``exact_given_length``)."""

    loss_sum: float
    tokens: int
    exact: torch.Tensor
    exact_given_length: torch.Tensor


def teacher_forced_verdicts(
    model: StepwiseSeq2Seq,
    batch: Seq2SeqBatch,
    max_length: int | None = None,
    stop_threshold: float | None = None,
) -> TeacherForcedVerdicts:
    """Greedy decoding's exact-match verdicts read from one teacher-forced pass.

    A decoder conditions each step on the tokens before it, so greedy decoding reproduces the
    target exactly iff, at every step ``t`` fed the target's first ``t`` tokens, its choice is the
    target's next token: while the decoded prefix equals the target's, the logits greedy decoding
    sees are the teacher-forced ones, and at the first different choice the output is wrong
    whatever follows. The choice is :meth:`StepwiseSeq2Seq.stop_and_other`'s (``<eos>`` when it
    wins, or when ``p(<eos>) >= stop_threshold``; else the best other token); with the length given
    (:meth:`StepwiseSeq2Seq.decode_with_lengths`) it is the best token other than ``<eos>`` at each
    of the target's word steps. ``exact`` also needs the target and its ``<eos>`` to fit in
    ``max_length`` decoded tokens. The verdicts equal decoding's up to floating-point rounding (a
    parallel teacher-forced pass may sum in another order than step-by-step decoding, which can
    only matter where two tokens tie). The stop rule ``stop_lookahead`` looks at later steps of the
    model's own output and cannot be read this way.
    """
    output = model(batch.source, batch.source_padding_mask, batch.target_input)
    target = batch.target_output
    real = target != model.pad_id
    stops, others = model.stop_and_other(output.logits, stop_threshold)
    chosen = torch.where(stops, torch.full_like(others, model.eos_id), others)
    exact = ((chosen == target) | ~real).all(dim=1)
    if max_length is not None:
        exact &= real.sum(dim=1) <= max_length
    words = real & (target != model.eos_id)
    loss_sum = F.cross_entropy(
        output.logits.flatten(0, 1), target.flatten(), ignore_index=model.pad_id, reduction="sum"
    )
    return TeacherForcedVerdicts(
        loss_sum=float(loss_sum),
        tokens=int(real.sum()),
        exact=exact,
        exact_given_length=((others == target) | ~words).all(dim=1),
    )


class SplitEvaluationOptions(Protocol):
    """What :func:`evaluate_split` reads of an experiment's ``evaluation:`` config."""

    batch_size: int
    max_length: int
    """Greedy decoding budget in tokens, ``<eos>`` included."""
    given_length: bool
    bleu: bool
    stop_threshold: float | None
    """``<eos>`` only when ``p(<eos>) >= stop_threshold`` (``None``: plain greedy)."""
    stop_lookahead: float | None
    """Skip a tentative ``<eos>`` below this fraction of a later step's ``p(<eos>)`` (``None``: no)."""


def decode_within_budget(
    model: Seq2SeqModel, source: torch.Tensor, source_padding_mask: torch.Tensor, max_length: int | None
) -> Seq2SeqOutput:
    """Greedy decoding as :func:`evaluate_seq2seq` does it (the Lookup Tables evaluation): at most
    ``max_length`` tokens, or without it :func:`decoding_budget` of each source's own length, so an
    output does not depend on the batch it is decoded in. (The batch is decoded for the budget of
    its longest source; each row is then cut at its own budget, as if decoded alone: no ``<eos>``
    after it, padding and zero attention from it on. No metric reads the cut steps of a target
    that fits its source's budget, as every generated Lookup Tables target does with 13 tokens to
    spare; a longer one needs ``max_length``, which the Lookup evaluation warns of:
    :func:`targets_past_the_budget`.)"""
    decoded = model.greedy_decode(source, source_padding_mask, decoding_budget(source.size(1), max_length))
    if max_length is not None or decoded.tokens is None:
        return decoded
    lengths = (~source_padding_mask).sum(dim=1).tolist()
    budgets = torch.tensor([decoding_budget(length) for length in lengths], device=source.device)
    cut = torch.arange(decoded.tokens.size(1), device=source.device)[None, :] >= budgets[:, None]
    if not cut.any():
        return decoded
    return replace(
        decoded,
        tokens=decoded.tokens.masked_fill(cut, model.pad_id),
        attention=decoded.attention.masked_fill(cut[:, :, None], 0.0),
    )


def decoded_steps(tokens: torch.Tensor, pad_id: int) -> list[int]:
    """Each row's number of decoded steps (``<eos>`` included) of a greedy decoding's ``tokens
    [B, T]``: its tokens that are not padding, since decoding pads a row after its ``<eos>`` and
    after its own budget (:func:`decode_within_budget`) and never predicts ``<pad>``."""
    return (tokens != pad_id).sum(dim=1).tolist()


def targets_past_the_budget(dataset: batching.EncodedDataset) -> int:
    """How many targets of ``dataset`` (``<eos>`` included) are longer than the default decoding
    budget of their source (:func:`decoding_budget`): outputs that cannot be right without
    ``max_length``."""
    budgets = torch.tensor([decoding_budget(int(length)) for length in dataset.source_lengths])
    return int((dataset.target_lengths > budgets).sum())


def decode_greedily(
    model: StepwiseSeq2Seq,
    source: torch.Tensor,
    source_padding_mask: torch.Tensor,
    options: SplitEvaluationOptions,
) -> Seq2SeqOutput:
    """Greedy decoding as the evaluation does it: ``options.max_length`` tokens at most, with the
    stop rules ``options.stop_threshold`` and ``options.stop_lookahead``
    (:meth:`StepwiseSeq2Seq.greedy_decode`)."""
    return model.greedy_decode(
        source, source_padding_mask, options.max_length, options.stop_threshold, options.stop_lookahead
    )


@torch.no_grad()
def evaluate_split(
    model: StepwiseSeq2Seq,
    split: EncodedSplit,
    target: Vocabulary,
    options: SplitEvaluationOptions,
    device: torch.device,
    *,
    given_length: bool | None = None,
    outcomes: ExampleOutcomes | None = None,
    ignored_ids: Sequence[int] = (),
) -> dict[str, float]:
    """The SCAN metrics of one encoded split, in batches of ``options.batch_size`` of similar target
    length (:func:`~attnlab.tasks.batching.length_sorted_batches`):

    * ``seq_acc`` — exact match with the model producing ``<eos>`` itself, greedy decoding of at
      most ``options.max_length`` tokens (``<eos>`` included), with the stop rules
      ``options.stop_threshold`` and ``options.stop_lookahead`` when they are set;
    * ``seq_acc_given_length`` (with ``given_length``, by default ``options.given_length``) — exact
      match when the model decodes exactly as many tokens as the target has (the evaluation of
      Russin et al.'s code, which runs the decoder for the target's length), read from the
      teacher-forced pass (:func:`teacher_forced_verdicts`) rather than decoded a second time;
    * ``loss`` — teacher-forced cross-entropy per token; ``examples``;
    * ``bleu`` (with ``options.bleu``) — sacrebleu corpus BLEU of the greedy outputs against the raw
      references;
    * with ``<unk>`` in the vocabularies, ``unknown_source_words`` / ``unknown_target_words``: the
      words outside them that were read as ``<unk>``.

    ``outcomes``, when given, receives each example's prediction and its ``seq_acc``
    (``seq_acc_given_length``) verdicts, in the split's order.

    ``ignored_ids``: target tokens that ``seq_acc`` does not score (removed from the output and the
    target before they are compared; SCAN's ``data.output_markers``). ``seq_acc_given_length`` and
    ``loss`` still read them: the length given is the target's, markers included.
    """
    model.eval()
    given_length = options.given_length if given_length is None else given_length
    totals = {"correct": 0, "correct_given_length": 0, "loss": 0.0, "tokens": 0}
    examples = len(split.dataset)
    hypotheses: list[str] = [""] * examples
    in_batch_order = ExampleOutcomes()
    rows_in_batch_order: list[int] = []
    for rows, batch in batching.length_sorted_batches(split.dataset, options.batch_size):
        batch = batch.to(device)
        decoded = decode_greedily(model, batch.source, batch.source_padding_mask, options)
        assert decoded.tokens is not None
        correct = {
            "seq_acc": sequence_correct(
                decoded.tokens,
                batch.target_output,
                eos_id=model.eos_id,
                pad_id=model.pad_id,
                ignored_ids=ignored_ids,
            )
        }
        totals["correct"] += int(correct["seq_acc"].sum())
        verdicts = teacher_forced_verdicts(model, batch)
        if given_length:
            correct["seq_acc_given_length"] = verdicts.exact_given_length
            totals["correct_given_length"] += int(verdicts.exact_given_length.sum())
        if outcomes is not None:
            in_batch_order.add(decoded.tokens, model.eos_id, **correct)
            rows_in_batch_order += rows.tolist()
        totals["loss"] += verdicts.loss_sum
        totals["tokens"] += verdicts.tokens
        if options.bleu:
            for row, decoded_row in zip(rows.tolist(), decoded.tokens.cpu()):
                hypotheses[row] = " ".join(target.decode(decoded_row, strip_specials=True))
    if outcomes is not None:
        outcomes.extend_in_order(in_batch_order, rows_in_batch_order)
    metrics = {
        "seq_acc": 100.0 * totals["correct"] / examples,
        "loss": totals["loss"] / max(totals["tokens"], 1),
        "examples": float(examples),
    }
    if given_length:
        metrics["seq_acc_given_length"] = 100.0 * totals["correct_given_length"] / examples
    if options.bleu:
        metrics["bleu"] = corpus_bleu(hypotheses, [" ".join(ref) for ref in split.references])
    if UNK_TOKEN in target.specials:
        metrics["unknown_source_words"] = float(split.unknown_source_words)
        metrics["unknown_target_words"] = float(split.unknown_target_words)
    return metrics


@torch.no_grad()
def validate_split(
    model: StepwiseSeq2Seq,
    split: EncodedSplit,
    target: Vocabulary,
    options: SplitEvaluationOptions,
    device: torch.device,
) -> dict[str, float]:
    """:func:`evaluate_split`'s ``loss``, ``seq_acc`` and ``examples`` of one encoded split, from
    one teacher-forced pass per batch (:func:`teacher_forced_verdicts`) instead of greedy decoding,
    with the same stop rule ``options.stop_threshold`` and budget ``options.max_length``: the same
    numbers for a fraction of the work, which is what a validation after every epoch needs. With
    ``options.stop_lookahead`` the verdicts need the decoded outputs, so this decodes as
    :func:`evaluate_split` does."""
    if options.stop_lookahead is not None:
        metrics = evaluate_split(model, split, target, options, device, given_length=False)
        return {name: metrics[name] for name in ("loss", "seq_acc", "examples")}
    model.eval()
    correct, loss_sum, tokens = 0, 0.0, 0
    for _, batch in batching.length_sorted_batches(split.dataset, options.batch_size):
        verdicts = teacher_forced_verdicts(
            model, batch.to(device), options.max_length, options.stop_threshold
        )
        correct += int(verdicts.exact.sum())
        loss_sum += verdicts.loss_sum
        tokens += verdicts.tokens
    examples = len(split.dataset)
    return {
        "seq_acc": 100.0 * correct / examples,
        "loss": loss_sum / max(tokens, 1),
        "examples": float(examples),
    }
