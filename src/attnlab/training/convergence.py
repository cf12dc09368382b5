"""How a run's training ended: by its stopping rules, or at the epoch cap while still improving.

A run's epoch cap (``training.epochs``) is a budget, not a result: a run that reaches it with its
lowest validation loss among its last epochs has not converged by its own rule, and its test numbers
are those of a model still learning (on SCAN's simple split, the 50-epoch cap cost one cell 1.9
points of exact match: docs/results.md, session 69). :func:`training_end` reads that from a run's
metric history and training config alone, so finished and archived runs are judged the same way;
the trainer warns of it when it stops at the cap, and sweeps and reports list such runs.

Choice where there is no rule to judge by: a run without ``training.patience`` (a fixed-epoch
protocol) counts as still improving at the cap only if its last epoch has its lowest validation loss.
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
    never for no targets."""
    return bool(targets) and all(record.get(metric, -math.inf) >= value for metric, value in targets.items())


def _best_index(history: Sequence[Mapping[str, Any]]) -> int:
    """The index of the first epoch with the lowest validation loss (the one ``best.pt`` holds)."""
    return min(range(len(history)), key=lambda i: history[i][VALID_LOSS])


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
    def still_improving(self) -> bool:
        """Ended at the cap with its lowest validation loss within the last ``patience`` epochs (so
        its patience rule would have trained on), or, without patience, at its last epoch."""
        if self.ended_by != "epoch cap":
            return False
        window = self.patience if self.patience is not None else 1
        return self.epochs - self.best_epoch < window

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "still_improving": self.still_improving}

    def describe(self) -> str:
        """e.g. ``"epoch cap 50, best epoch 49"`` or ``"patience after epoch 97, best epoch 87"``."""
        if self.ended_by == "epoch cap":
            return f"epoch cap {self.cap}, best epoch {self.best_epoch}"
        if self.ended_by == "unfinished":
            return f"unfinished after epoch {self.epochs} of {self.cap}, best epoch {self.best_epoch}"
        return f"{self.ended_by} after epoch {self.epochs}, best epoch {self.best_epoch}"


def training_end(
    history: Sequence[Mapping[str, Any]],
    epochs: int,
    patience: int | None,
    stop_targets: Mapping[str, float],
) -> TrainingEnd | None:
    """How the run whose epoch records are ``history`` (``metrics.jsonl``, each with ``epoch`` and
    ``valid/loss``) ended under its ``training.epochs``, ``training.patience`` and stop targets
    (:meth:`~attnlab.training.trainer.TrainingConfig.stop_targets`); None for no epoch. The rules are
    checked in the trainer's order: a stop target, then patience, then the cap."""
    if not history:
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
    best_epoch = int(history[_best_index(history)]["epoch"])
    return TrainingEnd(trained, epochs, best_epoch, ended_by, patience)
