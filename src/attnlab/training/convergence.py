"""How a run's training ended: by its stopping rules, or by the epoch cap before it converged.

A run's epoch cap (``training.epochs``) is a budget, not a result: a run that reaches it before its
own stopping rule would have ended it (its lowest validation loss fewer than ``training.patience``
epochs old) has not converged by that rule, and its test numbers may be those of a model still
learning (on SCAN's simple split, the 50-epoch cap cost one cell 1.9 points of exact match:
docs/results.md, session 69). :func:`training_end` reads that from a run's metric history and
training config alone, so finished and archived runs are judged the same way; the trainer warns of
it when it stops at the cap, and sweeps and reports list such runs.

Choice where there is no rule to judge by: a run without ``training.patience`` (a fixed-epoch
protocol) counts as unconverged at the cap only if its last epoch has its lowest validation loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from attnlab.metric_names import VALID_LOSS

EndedBy = Literal["stop target", "patience", "epoch cap", "unfinished"]
"""``stop target``: the last epoch reached ``training.stop_at``; ``patience``: ``training.patience``
epochs without a lower validation loss; ``epoch cap``: ``training.epochs`` epochs, neither rule met;
``unfinished``: fewer epochs than the cap and no rule met (an interrupted or budget-staged run)."""


def patience_exhausted(history: Sequence[Mapping[str, Any]], patience: int | None) -> bool:
    """Whether the lowest validation loss of ``history`` is at least ``patience`` epochs old."""
    if patience is None or not history:
        return False
    return len(history) - 1 - _best_index(history) >= patience


def targets_reached(record: Mapping[str, Any], targets: Mapping[str, float]) -> bool:
    """Whether an epoch's metrics ``record`` reaches every target (metric → threshold, ``>=``);
    never for no targets, nor for a metric that is missing or not a number."""
    return bool(targets) and all(
        _is_number(record.get(metric)) and record[metric] >= value for metric, value in targets.items()
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _judgeable(record: Mapping[str, Any]) -> bool:
    epoch = record.get("epoch")
    return isinstance(epoch, int) and not isinstance(epoch, bool) and _is_number(record.get(VALID_LOSS))


def _best_index(history: Sequence[Mapping[str, Any]]) -> int:
    """The index of the first epoch with the lowest validation loss (the one ``best.pt`` holds: the
    trainer never counts a NaN loss as lower, so neither does this)."""
    return min(range(len(history)), key=lambda i: _loss_key(history[i][VALID_LOSS]))


def best_epoch(history: Sequence[Mapping[str, Any]]) -> int:
    """The ``epoch`` of ``history``'s record with the lowest validation loss (:func:`_best_index`)."""
    return int(history[_best_index(history)]["epoch"])


def _loss_key(loss: float) -> float:
    return math.inf if math.isnan(loss) else loss


@dataclass(frozen=True)
class TrainingEnd:
    """How a run's training ended (:func:`training_end`)."""

    epochs: int
    """Epochs trained."""
    cap: int
    """``training.epochs``."""
    best_epoch: int
    """The epoch of the lowest validation loss (the best checkpoint's)."""
    ended_by: EndedBy
    patience: int | None

    @property
    def unconverged(self) -> bool:
        """Ended by the cap before its patience rule would have ended it (its lowest validation loss
        fewer than ``patience`` epochs old), or, without patience, with its lowest validation loss
        at its last epoch."""
        if self.ended_by != "epoch cap":
            return False
        window = self.patience if self.patience is not None else 1
        return self.epochs - self.best_epoch < window

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unconverged": self.unconverged}


def training_end(
    history: Sequence[Mapping[str, Any]],
    epochs: int,
    patience: int | None,
    stop_targets: Mapping[str, float],
) -> TrainingEnd | None:
    """How the run whose epoch records are ``history`` (``metrics.jsonl``, each with ``epoch`` and
    ``valid/loss``) ended under its ``training.epochs``, ``training.patience`` and stop targets
    (:meth:`~attnlab.training.trainer.TrainingConfig.stop_targets`); None for no epoch, or for a
    record without a whole ``epoch`` and a numeric ``valid/loss`` (a history this version cannot
    judge). The rules are checked in the trainer's order: a stop target, then patience, then the cap."""
    if not history or not all(_judgeable(record) for record in history):
        return None
    trained = int(history[-1]["epoch"])
    ended_by: EndedBy
    if targets_reached(history[-1], stop_targets):
        ended_by = "stop target"
    elif patience_exhausted(history, patience):
        ended_by = "patience"
    elif trained >= epochs:
        ended_by = "epoch cap"
    else:
        ended_by = "unfinished"
    return TrainingEnd(trained, epochs, best_epoch(history), ended_by, patience)
