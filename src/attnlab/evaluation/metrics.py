"""Sequence metrics of Dubois et al. 2020 (§6.2): seqAcc, seqAccBE and attnLoss.

All functions take batch-first tensors:

* ``predicted``: long ``[B, L]``, the decoded tokens; a sequence ends at its first ``<eos>``
  (later positions are ignored);
* ``target``: long ``[B, T]``, the gold tokens followed by ``<eos>`` and right-padded with
  ``pad_id``;
* ``attention``: float ``[B, L, S]``, the attention of each decoding step;
* ``gold_attention``: long ``[B, T]``, the gold source index of each target token (``-1`` where
  unknown or padding).

Definitions (per example; the reported value is the mean over examples, in percent for the
accuracies):

* **seqAcc** — the whole output is right, its length included: the tokens up to and including
  the model's first ``<eos>`` equal the target followed by ``<eos>``. An output with no ``<eos>``
  is wrong.
* **seqAccBE** ("before eos") — the tokens before the model's first ``<eos>`` (all tokens, if it
  emits none) equal the target's first tokens: stopping too early is forgiven, any wrong token or
  a token past the target's end is not. An output that stops at once counts as correct.
* **attnLoss** — mean squared error, in token positions, between the expected attended position
  ``sum_s alpha_ts * s`` and the gold position, averaged over the decoding steps before the
  model's first ``<eos>`` for which a gold position exists (the ``<eos>`` step is excluded), then
  over the examples that have at least one such step.

:func:`error_kind` says how a wrong output is wrong — where it stops, or which words — from its
tokens, and :func:`word_error_kind` whether its wrong words are those of one target word (the
failure anatomy of a predictions file, issue 28).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ERROR_KINDS = ("stops early", "stops late", "wrong words, right length", "wrong words, other length")
"""How a wrong output can be wrong (:func:`error_kind`), in the order reports list them."""


def error_kind(target: Sequence[str], prediction: Sequence[str]) -> str | None:
    """How ``prediction`` (the output's tokens before its ``<eos>``, or all of them if it has none)
    is wrong against ``target``, as one of :data:`ERROR_KINDS`; ``None`` when it is right.

    * ``stops early``: a proper prefix of the target (every word right, ``<eos>`` too soon);
    * ``stops late``: the target followed by more words (or no ``<eos>`` within the budget);
    * ``wrong words, right length``: as long as the target, some word different;
    * ``wrong words, other length``: a different length and not a prefix either way.

    The first two separate the stop decision from the rest (the EOS problem of Newman et al. 2020):
    every word of such an output is right up to where it stops.
    """
    target, prediction = list(target), list(prediction)
    if prediction == target:
        return None
    if len(prediction) < len(target) and prediction == target[: len(prediction)]:
        return ERROR_KINDS[0]
    if len(prediction) > len(target) and prediction[: len(target)] == target:
        return ERROR_KINDS[1]
    return ERROR_KINDS[2] if len(prediction) == len(target) else ERROR_KINDS[3]


WORD_ERROR_KINDS = ("one target word wrong", "one target word left out")
"""Outputs with wrong words whose errors all concern one word of the target
(:func:`word_error_kind`), in the order reports list them."""


def word_error_kind(target: Sequence[str], prediction: Sequence[str]) -> str | None:
    """Whether the wrong words of ``prediction`` (tokens as for :func:`error_kind`) all concern one
    word of ``target``: one of :data:`WORD_ERROR_KINDS`, else ``None`` (also when it is right or
    only stops early or late).

    * ``one target word wrong``: as long as the target, and every wrong token stands where the
      target has one and the same word (at some or all of that word's places, by any other words);
      a case of ``wrong words, right length``;
    * ``one target word left out``: the target with every occurrence of one of its words removed;
      a case of ``wrong words, other length``.

    Both keep the output's structure and lose one word's meaning: the failure that SCAN's
    add-primitive splits probe (Lake & Baroni 2018), where the primitive seen only alone in training
    ("jump" → ``I_JUMP``) must be composed. Which word it is, the predictions file shows.
    """
    kind = error_kind(target, prediction)
    target, prediction = list(target), list(prediction)
    if kind == ERROR_KINDS[2]:
        wrong = {gold for gold, output in zip(target, prediction) if gold != output}
        return WORD_ERROR_KINDS[0] if len(wrong) == 1 else None
    if kind == ERROR_KINDS[3] and len(prediction) < len(target):
        for word in set(target) - set(prediction):
            if [gold for gold in target if gold != word] == prediction:
                return WORD_ERROR_KINDS[1]
    return None


def output_lengths(predicted: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Number of tokens before the first ``<eos>`` (``L`` if none) and whether an ``<eos>`` came."""
    is_eos = predicted == eos_id
    has_eos = is_eos.any(dim=1)
    first_eos = torch.where(
        has_eos, is_eos.int().argmax(dim=1), predicted.new_full(has_eos.shape, predicted.size(1))
    )
    return first_eos, has_eos


def check_outputs_and_targets(
    predicted: torch.Tensor, target: torch.Tensor, *, eos_id: int, pad_id: int
) -> None:
    """Outputs ``[B, T]`` and targets ``[B, T']`` are token ids of one batch, and every target
    holds exactly one ``<eos>``, after its real tokens and before its padding (what
    :func:`target_lengths` reads): a target without one would be scored against a prefix of itself."""
    for name, tokens in (("predicted", predicted), ("target", target)):
        if tokens.dim() != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise ValueError(
                f"{name} must be token ids [batch, steps], got {tokens.dtype} {tuple(tokens.shape)}"
            )
    if predicted.size(0) != target.size(0):
        raise ValueError(f"predicted holds {predicted.size(0)} sequences for {target.size(0)} targets")
    if target.size(1) == 0:
        raise ValueError("target has no steps: each target ends with <eos>")
    end = target_lengths(target, pad_id).clamp(min=0)
    at_end = target.gather(1, end.unsqueeze(1)).squeeze(1) == eos_id
    wrong = ~at_end | ((target == eos_id).sum(dim=1) != 1)
    if bool(wrong.any()):
        rows = wrong.nonzero().flatten().tolist()
        raise ValueError(
            f"target rows {rows[:10]} do not hold exactly one <eos> (id {eos_id}) after their tokens "
            f"and before their padding (id {pad_id})"
        )


def target_lengths(target: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Number of target tokens excluding ``<eos>`` (the target includes exactly one ``<eos>``)."""
    return (target != pad_id).sum(dim=1) - 1


def sequence_correct(
    predicted: torch.Tensor,
    target: torch.Tensor,
    *,
    eos_id: int,
    pad_id: int,
    ignored_ids: Sequence[int] = (),
) -> torch.Tensor:
    """Per-example seqAcc (bool ``[B]``). With ``ignored_ids`` (e.g. SCAN's structure markers,
    ``data.output_markers``), those tokens are removed from both the output before its ``<eos>``
    and the target before the two are compared."""
    check_outputs_and_targets(predicted, target, eos_id=eos_id, pad_id=pad_id)
    if ignored_ids:
        return _sequence_correct_ignoring(predicted, target, ignored_ids, eos_id=eos_id, pad_id=pad_id)
    length, has_eos = output_lengths(predicted, eos_id)
    gold_length = target_lengths(target, pad_id)
    prefix_ok = _prefix_matches(predicted, target, gold_length)
    return has_eos & (length == gold_length) & prefix_ok


def _sequence_correct_ignoring(
    predicted: torch.Tensor, target: torch.Tensor, ignored_ids: Sequence[int], *, eos_id: int, pad_id: int
) -> torch.Tensor:
    """:func:`sequence_correct` with the tokens ``ignored_ids`` removed from both sides."""
    length, has_eos = output_lengths(predicted, eos_id)
    gold_length = target_lengths(target, pad_id)
    ignored = set(ignored_ids)
    verdicts = [
        bool(found)
        and [token for token in output[:n] if token not in ignored]
        == [token for token in gold[:m] if token not in ignored]
        for output, gold, n, m, found in zip(
            predicted.tolist(), target.tolist(), length.tolist(), gold_length.tolist(), has_eos.tolist()
        )
    ]
    return torch.tensor(verdicts, dtype=torch.bool, device=predicted.device)


def sequence_correct_before_eos(
    predicted: torch.Tensor, target: torch.Tensor, *, eos_id: int, pad_id: int
) -> torch.Tensor:
    """Per-example seqAccBE (bool ``[B]``)."""
    check_outputs_and_targets(predicted, target, eos_id=eos_id, pad_id=pad_id)
    length, _ = output_lengths(predicted, eos_id)
    gold_length = target_lengths(target, pad_id)
    return (length <= gold_length) & _prefix_matches(predicted, target, length)


def attention_squared_errors(
    attention: torch.Tensor,
    gold_attention: torch.Tensor,
    predicted: torch.Tensor,
    *,
    eos_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example mean squared position error and whether the example has any scored step.

    ``attention`` ``[B, T, S]``, ``gold_attention`` ``[B, T']`` (the gold source position of each
    output step, negative where a step has none), ``predicted`` ``[B, T]`` tokens."""
    batch = predicted.size(0) if predicted.dim() == 2 else None
    if (
        batch is None
        or attention.dim() != 3
        or attention.size(0) != batch
        or gold_attention.dim() != 2
        or gold_attention.size(0) != batch
    ):
        raise ValueError(
            "attention must be [batch, steps, source_len], gold_attention [batch, steps] and predicted "
            f"[batch, steps], one batch; got {tuple(attention.shape)}, {tuple(gold_attention.shape)}, "
            f"{tuple(predicted.shape)}"
        )
    check_gold_positions(gold_attention, attention.size(2))
    steps = min(attention.size(1), gold_attention.size(1))
    positions = torch.arange(attention.size(2), device=attention.device, dtype=attention.dtype)
    expected = (attention[:, :steps] * positions).sum(dim=-1)
    gold = gold_attention[:, :steps]
    length, _ = output_lengths(predicted, eos_id)
    step_index = torch.arange(steps, device=attention.device).unsqueeze(0)
    scored = (gold >= 0) & (step_index < length.unsqueeze(1))
    squared = ((expected - gold.to(expected.dtype)) ** 2) * scored
    counts = scored.sum(dim=1)
    per_example = squared.sum(dim=1) / counts.clamp(min=1)
    return per_example, counts > 0


def check_gold_positions(gold_attention: torch.Tensor, source_len: int) -> None:
    """Gold attention (source positions, negative where a step has none) within the source."""
    if gold_attention.numel() and int(gold_attention.max()) >= source_len:
        raise ValueError(
            f"gold_attention holds position {int(gold_attention.max())}, past the source's "
            f"{source_len} positions"
        )


def _prefix_matches(predicted: torch.Tensor, target: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """Whether ``predicted[:length] == target[:length]`` for each row (False if either is too short)."""
    width = max(predicted.size(1), target.size(1))
    predicted = _pad_to(predicted, width, -1)
    target = _pad_to(target, width, -2)
    positions = torch.arange(width, device=predicted.device).unsqueeze(0)
    in_prefix = positions < length.unsqueeze(1)
    return ((predicted == target) | ~in_prefix).all(dim=1)


def _pad_to(tokens: torch.Tensor, width: int, value: int) -> torch.Tensor:
    if tokens.size(1) == width:
        return tokens
    padding = tokens.new_full((tokens.size(0), width - tokens.size(1)), value)
    return torch.cat([tokens, padding], dim=1)
