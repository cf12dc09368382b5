"""Batched evaluation of sequence-to-sequence models: greedy decoding and the §6.2 metrics."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnlab.evaluation.metrics import (
    attention_squared_errors,
    sequence_correct,
    sequence_correct_before_eos,
)
from attnlab.models.seq2seq import RecurrentSeq2Seq
from attnlab.models.syntactic_attention import StepwiseSeq2Seq
from attnlab.tasks.examples import Seq2SeqBatch

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
    known = gold_attention >= 0
    if not bool(known.any()):
        return attention.new_zeros(())
    picked = attention.gather(-1, gold_attention.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return -picked[known].clamp_min(1e-30).log().mean()


@dataclass
class ExampleOutcomes:
    """What happened to each example of an evaluation, in the order of the batches: the decoded
    target ids (up to the first ``<eos>`` or the decoding budget) and, per metric name (e.g.
    ``seq_acc``), whether the example counted as correct. The units of a paired significance test
    (:mod:`attnlab.evaluation.significance`)."""

    predictions: list[list[int]] = field(default_factory=list)
    correct: dict[str, list[bool]] = field(default_factory=dict)

    def add(self, decoded: torch.Tensor, eos_id: int, **correct: torch.Tensor) -> None:
        """Record a batch: ``decoded`` ``[B, T]`` ids and a ``[B]`` bool tensor per metric."""
        for row in decoded.tolist():
            self.predictions.append(row[: row.index(eos_id)] if eos_id in row else row)
        for name, flags in correct.items():
            self.correct.setdefault(name, []).extend(bool(flag) for flag in flags.tolist())


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
    limit = decoding_budget(batch.source.size(1), max_length)
    decoded = model.greedy_decode(batch.source, batch.source_padding_mask, limit)
    assert decoded.tokens is not None
    ids = {"eos_id": model.eos_id, "pad_id": model.pad_id}
    correct = sequence_correct(decoded.tokens, batch.target_output, **ids)
    correct_before_eos = sequence_correct_before_eos(decoded.tokens, batch.target_output, **ids)
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
