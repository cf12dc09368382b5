"""Learning-rate races: a recipe's cell trains several learning rates in rounds, not each to the end.

A *cell* (:class:`Race`, plain data) is one configuration, a set of candidate learning rates, a
goal (a value of a validation metric where higher is better, such as ``valid/accuracy`` = 100,
which the configuration's ``training.stop_at…`` also stops at) and a cap of epochs. A recipe
builds its cells and hands them to :func:`run_races`, which races each cell as one job of
``runner.run_parallel`` (:func:`run_race`: every run through ``registry.train_or_resume``, so
finished runs are skipped and interrupted ones resume); the cell's result is the best rate's
(:func:`best_result`): the fewest epochs to the goal, else the highest value of the metric.

In each round every rate still in the race trains (resuming exactly where it stopped) up to the
round's budget of epochs, :data:`RACE_ROUNDS` and then the cap; once one reaches the goal in ``k``
epochs, ``k`` becomes the cap of the others (they can only tie or beat it within ``k``). Every
rate is thus trained to ``min(its own epochs to the goal, the best rate's)``, exactly as if each
ran alone, but a fast rate that never reaches the goal no longer makes the slower ones wait for
the cap.

That exact race (:data:`EXACT`, the default) still trains every rate to the cap in a cell that no
rate solves. :data:`HALVING` races by successive halving instead: after each round but the last
in which no rate has reached the goal, only the better half (``ceil(n / 2)``) of the rates still
racing goes on, ranked by their best value of the metric within the round's budget of epochs (ties
keep the rate earlier in :attr:`Race.preference`); the others are not trained further (their runs
stay, and count in the result). Once a rate reaches the goal the race goes on exactly as the exact
one, for the rates still in it. With four rates and a cap of 100 a cell that nobody solves then
costs 4·5 + 2·5 + 1·90 = 120 epochs instead of 400. Unlike an exhaustive grid it can drop a rate
that starts slow and wins late, so it is an option, stated in the cell's race record (mode, and
which rate was dropped after which round) and marked :data:`HALVING_MARK` in reports
(:func:`titled_table`). The decisions are read from the runs' logs of epochs (the first ``budget``
epochs of each), so a race resumed after an interruption decides as the first one did, however it
is scheduled; a cell whose race was finished in the other mode is left as it is (logged), not
raced again.

Layout, under the cell's folder: ``lr<LR>/seed<S>/``, one run directory per rate
(:func:`run_dir`), and ``race_seed<S>.json`` once the race has ended (:func:`race_record`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.config import apply_overrides
from attnlab.experiments.registry import train_or_resume
from attnlab.experiments.runner import SUMMARY_FILE, run_parallel
from attnlab.io import atomic_write_text
from attnlab.metric_names import read_metrics

log = logging.getLogger(__name__)

EXACT, HALVING = "exact", "halving"
RACES = (EXACT, HALVING)
"""How a cell's learning rates are raced (the module docstring): ``exact``, every rate until the
best one's epochs to the goal; ``halving``, successive halving (only the better half goes on after
each round nobody reached the goal)."""
HALVING_MARK = "†"
"""A report's mark on a cell whose learning rates were raced by successive halving."""
RACE_ROUNDS = (5, 10, 20, 40)
"""Epoch budgets of the race's rounds before the last one, whose budget is the cap."""


@dataclass(frozen=True)
class Race:
    """One cell's race: its learning rates, trained in ``cell_dir`` (:func:`run_dir`) until one
    reaches ``goal`` (of ``metric``, higher is better) or ``max_epochs``; each run's config is
    :meth:`run_config`."""

    cell_dir: Path
    base_config: dict[str, Any]
    """The cell's config data, which should stop a run at the goal (``training.stop_at…``)."""
    overrides: Sequence[str]
    """Applied after the race's learning rate and epochs (``key=value``), then ``training.seed``."""
    learning_rates: Sequence[float]
    goal: float
    max_epochs: int
    metric: str
    seed: int = 0
    mode: str = EXACT
    """One of :data:`RACES`."""
    preference: Sequence[float] = ()
    """Halving ties keep the rate earlier here (after them all when it is not one of them)."""
    label: str = ""
    """The cell in log messages."""

    def run_config(self, learning_rate: float, epochs: int) -> dict[str, Any]:
        """The config data of the cell's run of ``learning_rate``, trained up to ``epochs``."""
        chosen = [f"training.learning_rate={learning_rate}", f"training.epochs={epochs}"]
        return apply_overrides(self.base_config, [*chosen, *self.overrides, f"training.seed={self.seed}"])


def run_dir(cell_dir: Path, learning_rate: float, seed: int = 0) -> Path:
    """The run directory of one learning rate of a cell."""
    return cell_dir / f"lr{learning_rate:g}" / f"seed{seed}"


def race_budgets(max_epochs: int) -> list[int]:
    """The rounds' epoch budgets: :data:`RACE_ROUNDS` below ``max_epochs``, then ``max_epochs``."""
    return [budget for budget in RACE_ROUNDS if budget < max_epochs] + [max_epochs]


def add_race_argument(parser: argparse.ArgumentParser) -> None:
    """A recipe's ``--race``: the :data:`RACES` mode of its cells (``args.race``)."""
    parser.add_argument(
        "--race",
        choices=RACES,
        default=EXACT,
        help="how a cell's learning rates are raced: exact (default; every rate until the best one's "
        "epochs to the goal, or the cap: the paper's grid) or halving (after each round nobody reached "
        "the goal only the better half goes on; far cheaper where no rate solves the cell, but can miss "
        "a rate that starts slow and wins late; such cells are marked in the report)",
    )


def run_races(
    races: Sequence[Race], jobs: int = 1, backend: str = "local", address: str | None = None
) -> None:
    """Race every cell, one job a cell (``runner.run_parallel``), then raise the first failure."""
    run_parallel(run_race, [(race,) for race in races], jobs, backend=backend, address=address)


def run_race(race: Race) -> None:
    """Race the cell's learning rates round by round (:func:`race_budgets`), exactly or by
    successive halving (``race.mode``), and write its :func:`race_record`; a cell whose race ended
    in the other mode is left as it is."""
    previous = read_race(race.cell_dir, race.seed)
    if previous is not None and race_mode(previous) != race.mode:
        log.warning(
            "== %s: its race ended in %s mode (%s), which stands; not raced again in %s mode",
            race.label,
            race_mode(previous),
            race_record(race.cell_dir, race.seed),
            race.mode,
        )
        return
    run_dirs = {rate: run_dir(race.cell_dir, rate, race.seed) for rate in race.learning_rates}
    reached = {rate: _epochs_to_goal(race, path) for rate, path in run_dirs.items()}
    dropped: list[dict[str, Any]] = []  # halving: the race record's entries, one per dropped rate

    def limit(learning_rate: float) -> int:
        """The epochs a rate may train: the round it was dropped after, else the cap."""
        return next(
            (d["after_round"] for d in dropped if d["learning_rate"] == learning_rate), race.max_epochs
        )

    def cap() -> int:
        """The cap so far: the fewest epochs any rate took to the goal, or ``max_epochs``."""
        return min([race.max_epochs, *(epochs for epochs in reached.values() if epochs is not None)])

    for budget in race_budgets(race.max_epochs):
        last_round = budget == race.max_epochs
        for learning_rate, path in run_dirs.items():
            target = min(budget, cap(), limit(learning_rate))
            if reached[learning_rate] is not None or _trained_enough(path, target, last_round):
                continue
            log.info("== %s lr=%g: to epoch %d (cap %d)", race.label, learning_rate, target, cap())
            train_or_resume(race.run_config(learning_rate, target), path)
            reached[learning_rate] = _epochs_to_goal(race, path)
        if race.mode == HALVING and not last_round:
            gone = {entry["learning_rate"] for entry in dropped}
            racing = [rate for rate in race.learning_rates if rate not in gone]
            dropped += _worse_half(race, run_dirs, racing, budget)
    record: dict[str, Any] = {"race": race.mode, "learning_rates": list(race.learning_rates)}
    record |= {"max_epochs": race.max_epochs, "cap": cap()}
    if race.mode == HALVING:
        record["dropped"] = dropped
    atomic_write_text(race_record(race.cell_dir, race.seed), json.dumps(record, indent=2) + "\n")


def _worse_half(
    race: Race, run_dirs: dict[float, Path], racing: list[float], budget: int
) -> list[dict[str, Any]]:
    """After a round of ``budget`` epochs of a halving race, the rates of ``racing`` it drops, as
    entries of the race record's ``dropped``: all but :func:`halving_survivors`, or none when a
    rate has reached the goal within the round."""
    best = {rate: best_within(path, budget, race.metric) for rate, path in run_dirs.items()}
    if max(best.values()) >= race.goal:
        return []
    survivors = halving_survivors({rate: best[rate] for rate in racing}, race.preference)
    entries: list[dict[str, Any]] = []
    for rate in racing:
        if rate not in survivors:
            log.info(
                "== %s lr=%g: dropped after %d epochs (best %.2f%%)", race.label, rate, budget, best[rate]
            )
            entries.append({"learning_rate": rate, "after_round": budget, "best_accuracy": best[rate]})
    return entries


def best_within(run: Path, epochs: int, metric: str) -> float:
    """The run's best ``metric`` in its first ``epochs`` epochs (``-inf``: none logged), read from
    its log of epochs: also when it has trained past them or was stopped before its evaluation, so
    that a resumed halving race decides as the first one did."""
    history = read_metrics(run / "metrics.jsonl")
    return max((record[metric] for record in history if record["epoch"] <= epochs), default=-math.inf)


def halving_survivors(best: dict[float, float], preference: Sequence[float] = ()) -> list[float]:
    """The better half (``ceil(n / 2)``) of the rates still racing, by their best value of the
    metric (``best``: rate → value); ties keep the rate earlier in ``preference``. In the order of
    ``best``."""

    def position(rate: float) -> int:
        return list(preference).index(rate) if rate in preference else len(preference)

    ranked = sorted(best, key=lambda rate: (-best[rate], position(rate)))
    kept = set(ranked[: math.ceil(len(ranked) / 2)])
    return [rate for rate in best if rate in kept]


def _trained_enough(run: Path, epochs: int, last_round: bool) -> bool:
    """Whether the run needs no training call for a target of ``epochs``: it has trained at least that
    many (by its log of epochs, so that a round never shortens a run) and, in the last round, also
    been evaluated (an interrupted run past the cap is then evaluated as it stands)."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        return False
    done = sum(1 for line in metrics.read_text().splitlines() if line.strip())
    return done >= epochs and ((run / SUMMARY_FILE).is_file() or not last_round)


def race_record(cell_dir: Path, seed: int) -> Path:
    """The file a finished race writes; until it exists the cell's result is provisional (a later
    round can still lower the epochs, or raise the metric)."""
    return cell_dir / f"race_seed{seed}.json"


def read_race(cell_dir: Path, seed: int) -> dict[str, Any] | None:
    """The cell's :func:`race_record` (``None``: the race has not ended): the learning rates, the
    epoch cap, the race's mode (:func:`race_mode`) and, raced by halving, which rate was dropped
    after which round (``dropped``: ``learning_rate``, ``after_round``, ``best_accuracy``, the best
    value of the goal's metric)."""
    path = race_record(cell_dir, seed)
    return json.loads(path.read_text()) if path.is_file() else None


def race_mode(record: dict[str, Any]) -> str:
    """How the recorded race was run (one of :data:`RACES`); records older than the option say
    nothing and were exact."""
    return str(record.get("race", EXACT))


# ---------------------------------------------------------------------------------- results


def finished_history(run: Path) -> list[dict[str, Any]]:
    """A finished run's epochs (``metrics.jsonl``, in current names also when an earlier version
    wrote it); ``[]`` for a run not finished."""
    if not (run / SUMMARY_FILE).is_file():
        return []  # not finished
    return read_metrics(run / "metrics.jsonl")


def epochs_to_goal(history: Sequence[dict[str, Any]], goal: float, metric: str) -> int | None:
    """The first epoch whose ``metric`` reached ``goal``, or ``None``."""
    for record in history:
        if record[metric] >= goal:
            return int(record["epoch"])
    return None


def _epochs_to_goal(race: Race, run: Path) -> int | None:
    return epochs_to_goal(finished_history(run), race.goal, race.metric)


@dataclass
class RaceResult:
    """The best run of a cell over learning rates: fewest epochs to the goal, else the highest
    value of the metric (``accuracy``, in %)."""

    epochs: int | None
    accuracy: float
    epochs_run: int
    learning_rate: float
    history: list[dict[str, Any]]
    finished: bool = True
    """Whether the cell's race has ended (:func:`race_record`); otherwise the result is provisional."""
    race: str = EXACT
    """How the ended race was run (:func:`race_mode`)."""
    dropped: list[dict[str, Any]] = field(default_factory=list)
    """Raced by halving: the rates dropped, and after which round (the race record's ``dropped``)."""
    metric: str = "valid/accuracy"
    """The key of ``history`` the race compared (for :attr:`best_accuracy`)."""

    @property
    def mark(self) -> str:
        """:data:`HALVING_MARK` when successive halving dropped a learning rate, else ``""`` (a
        halving race that dropped none trained every rate as the exact race does)."""
        return HALVING_MARK if self.race == HALVING and self.dropped else ""

    @property
    def best_accuracy(self) -> float:
        """The highest value of the metric over the run's epochs (``accuracy`` is the last one's)."""
        return max((float(record[self.metric]) for record in self.history), default=self.accuracy)

    def table_cell(self) -> str:
        """Epochs to the goal, else the last epoch's accuracy (the paper's "accuracy after 100
        epochs") with the epochs run, and the best epoch's accuracy when the last one fell below it:
        ``"0.0% (100 ep.; best 63.9%)"``."""
        if self.epochs is not None:
            text = str(self.epochs)
        else:
            best = f"; best {self.best_accuracy:.1f}%" if self.best_accuracy > self.accuracy else ""
            text = f"{self.accuracy:.1f}% ({self.epochs_run} ep.{best})"
        return text + self.mark if self.finished else f"{text}, unfinished"

    def epochs_text(self) -> str:
        """The epochs run, ``", unfinished"`` while the race goes on."""
        return str(self.epochs_run) if self.finished else f"{self.epochs_run}, unfinished"


def best_result(cell_dir: Path, seed: int, goal: float, metric: str) -> RaceResult | None:
    """The cell's :class:`RaceResult` over its finished learning-rate runs (``None``: none
    finished); ``epochs`` counts the epochs to ``goal`` of ``metric``. Once a halving race has
    ended, the rates it dropped are out of it: their accuracy is that of a shorter run, so it is not
    compared with the accuracy after the cap of the rate that went on (their epochs did not reach
    the goal, or they would not have been dropped)."""
    record = read_race(cell_dir, seed)
    dropped = {float(entry["learning_rate"]) for entry in (record or {}).get("dropped", [])}
    candidates = []
    for lr_dir in sorted(cell_dir.glob("lr*")):
        learning_rate = float(lr_dir.name[2:])
        history = finished_history(lr_dir / f"seed{seed}")
        if history and learning_rate not in dropped:
            epochs = epochs_to_goal(history, goal, metric)
            accuracy = history[-1][metric]
            candidates.append(
                RaceResult(epochs, accuracy, len(history), learning_rate, history, metric=metric)
            )
    if not candidates:
        return None
    best = min(candidates, key=lambda c: (c.epochs is None, c.epochs or 0, -c.accuracy, -c.epochs_run))
    best.finished = record is not None
    if record is not None:
        best.race, best.dropped = race_mode(record), record.get("dropped", [])
    return best


def titled_table(header: str, table: str, results: dict[str, RaceResult]) -> str:
    """A report table of race results: its ``header`` with how the rates were raced (nothing when
    no ended race dropped a rate), then the table and the footnote of the cells marked
    :data:`HALVING_MARK` (``results``: row/column label → the cell's result)."""
    return f"{header}{_race_sentence(results)}\n\n{table}{_halving_footnote(results)}"


def _race_sentence(results: dict[str, RaceResult]) -> str:
    marked = {bool(result.mark) for result in results.values() if result.finished}
    if True not in marked:
        return ""
    if marked == {True}:
        return f". Learning rates raced by successive halving (every ended race; cells marked {HALVING_MARK})"
    return (
        ". Learning rates raced over the whole grid (unmarked cells) and by successive halving "
        f"(cells marked {HALVING_MARK})"
    )


def _halving_footnote(results: dict[str, RaceResult]) -> str:
    """Which rate was dropped after which round, a line per marked cell; ``""`` when none is."""
    lines = [
        f"- {label}: {_dropped_text(result.dropped)}" for label, result in results.items() if result.mark
    ]
    if not lines:
        return ""
    return (
        f"\n\n{HALVING_MARK} learning rates raced by successive halving (`--race halving`: after each "
        "round in which no rate reached the goal, only the better half went on; unlike the paper's "
        "full grid, this can miss a rate that starts slow and wins late); rates dropped after rounds:\n"
        + "\n".join(lines)
    )


def _dropped_text(dropped: list[dict[str, Any]]) -> str:
    """``"lr 0.001, 0.0003 after 5 epochs; lr 0.003 after 10 epochs"``, from a race record's ``dropped``."""
    rounds: dict[int, list[str]] = {}
    for entry in dropped:
        rounds.setdefault(entry["after_round"], []).append(f"{entry['learning_rate']:g}")
    text = "; ".join(
        f"lr {', '.join(rates)} after {budget} epochs" for budget, rates in sorted(rounds.items())
    )
    return text
