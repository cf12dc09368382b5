"""Reproduce Raffel & Ellis 2015: Table 1 (fixed lengths) and the variable-length experiment (§2.3).

For every problem × T0 × pooling (feed-forward attention, eq. 1, or the unweighted mean, eq. 2), the
paper reports the best result over the learning rates {3e-4, 1e-3, 3e-3, 1e-2}: the number of
epochs (of 1,000 updates) until the held-out test accuracy reaches 100%, or the accuracy after 100
epochs when it never does. The variable-length experiment trains one model on lengths uniform in
[50, 10000] for 100 epochs (paper: 99.9% / 99.4% with attention, 77.4% / 55.5% with the mean); here
a variable-length run stops early once it passes the paper's accuracy (:attr:`Cell.goal`), which is
then the result, and runs its 100 epochs otherwise.

Learning rates are raced in rounds, which gives the same table for less compute. In each round
every rate still in the race trains (resuming exactly where it stopped) up to the round's budget of
epochs, :data:`RACE_ROUNDS` and then the cap; once one reaches 100% in ``k`` epochs, ``k`` becomes
the cap of the others (they can only tie or beat it within ``k``). Every rate is thus trained to
``min(its own epochs to 100%, the best rate's)``, exactly as if each ran alone, but a fast rate that
never reaches 100% no longer makes the slower ones wait for its 100 epochs. ``max_epochs`` (paper:
100) caps every run; a cell that never reaches 100% shows its best accuracy and the cap, so that a
lower cap is never mistaken for the paper's setting.

That exact race (``race="exact"``, ``--race exact``, the default) still trains every rate for the
full 100 epochs in a cell that no rate solves (the cells the paper greys out, and most
variable-length mean cells): 400 epochs, hours of CPU. ``race="halving"`` (``--race halving``)
races by successive halving instead: after each round but the last in which no rate has reached
the goal, only the better half (``ceil(n / 2)``) of the rates still racing goes on, ranked by their
best test accuracy within the round's budget of epochs (ties keep the rate earlier in
:data:`LEARNING_RATES`); the others are not trained further (their runs stay, and count in the
report). Once a rate reaches the goal the race goes on exactly as the exact one, for the rates
still in it. With four rates a cell that nobody solves then costs 4·5 + 2·5 + 1·90 = 120 epochs
instead of 400. This deviates from the paper's exhaustive grid (§2.2: "the best result achieved
using any learning rate"): it can in principle drop a rate that starts slow and wins late. That is
why it is an option, stated in each cell's race record (mode, and which rate was dropped after
which round) and marked "†" in the report's tables, with the dropped rates in a footnote. The
decisions are read from the runs' logs of epochs (the first ``budget`` epochs of each), so a race
resumed after an interruption decides as the first one did; a cell whose race was finished in the
other mode is left as it is (logged), not raced again.

Writes, under ``out_dir``:

* ``<problem>/<t0_N | variable>/<pooling>/lr<LR>/seed<S>/``: one run directory per run;
* ``table1.md`` (Table 1 beside the paper's values), ``variable_length.md``;
* ``accuracy_<problem>.png``: test accuracy against epochs, one panel per T0, attention and mean at
  their best learning rate;
* ``results.md``: the two tables together.

Finished runs are skipped, so the recipe can be stopped and started again; ``report`` rebuilds the
tables and figures from the run directories alone.
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

from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.experiments.registry import resolve_config, train_or_resume
from attnlab.experiments.runner import add_parallel_arguments, parallel_options, run_parallel
from attnlab.io import atomic_write_text
from attnlab.metric_names import read_metrics, valid_name
from attnlab.reporting.tables import format_table
from attnlab.tasks.memory_problems import MIN_LENGTH, PADDINGS

log = logging.getLogger(__name__)

PAPER = "raffel2015"
"""The recipe's name: ``attnlab reproduce raffel2015``."""

PROBLEMS = ("addition", "multiplication")
PAPER_TEXT_ADDITION = "addition_paper_text"
"""The addition problem as Raffel & Ellis's §2 text states it (values U(0, 1), target x1 + x2), beside
Hochreiter & Schmidhuber's definition that ``addition`` uses (``data.addition``); not in the default
grid, reported against the paper's addition row."""
T0S = (50, 100, 500, 1000, 5000, 10_000)
POOLINGS = ("attention", "mean")
LEARNING_RATES = (1e-2, 3e-3, 1e-3, 3e-4)
"""The paper's grid, in the order they are raced (fast rates first: they usually win)."""
EXACT, HALVING = "exact", "halving"
RACES = (EXACT, HALVING)
"""How a cell's learning rates are raced (``--race``; the module docstring): ``exact``, every rate
until the best one's epochs to the goal (the paper's grid, for less compute); ``halving``,
successive halving (only the better half goes on after each round nobody reached the goal)."""
HALVING_MARK = "†"
"""The report's mark on a cell whose learning rates were raced by successive halving."""
VARIABLE = "variable"

PAPER_TABLE1: dict[tuple[str, str], tuple[str, ...]] = {
    ("addition", "attention"): ("1", "1", "1", "1", "2", "3"),
    ("addition", "mean"): ("1", "1", "1", "2", "8", "17"),
    ("multiplication", "attention"): ("1", "2", "4", "2", "15", "6"),
    ("multiplication", "mean"): ("2", "2", "8", "33", "89.8%", "80.8%"),
}
"""Raffel & Ellis 2015, Table 1: epochs to 100% test accuracy, or accuracy after 100 epochs."""

PAPER_VARIABLE: dict[tuple[str, str], float] = {
    ("addition", "attention"): 99.9,
    ("multiplication", "attention"): 99.4,
    ("addition", "mean"): 77.4,
    ("multiplication", "mean"): 55.5,
}
"""§2.3: test accuracy (%) after 100 epochs on lengths uniform in [50, 10000]."""

QUICK_OVERRIDES = ("training.updates_per_epoch=20", "data.test_size=200")


@dataclass(frozen=True)
class Cell:
    problem: str
    t0: int | None  # None: the variable-length setting
    pooling: str

    @property
    def folder(self) -> str:
        return VARIABLE if self.t0 is None else f"t0_{self.t0}"

    def path(self, out_dir: Path) -> Path:
        return out_dir / self.problem / self.folder / self.pooling

    @property
    def label(self) -> str:
        """The cell in log messages: problem, setting and pooling."""
        return f"{self.problem} {self.folder} {self.pooling}"

    @property
    def goal(self) -> float:
        """The test accuracy (%) that ends a run: 100% in Table 1; in the variable-length setting,
        which the paper ran for 100 epochs, the paper's accuracy (passing it is the result)."""
        if self.t0 is not None:
            return 100.0
        return PAPER_VARIABLE[(_paper_key(self.problem), self.pooling)]


def cell_config(cell: Cell, learning_rate: float, epochs: int, quick: bool, overrides: Sequence[str]) -> dict:
    setting = ["data.setting=variable", "data.t0=null"] if cell.t0 is None else [f"data.t0={cell.t0}"]
    if cell.problem == PAPER_TEXT_ADDITION:
        problem = ["data.problem=addition", "data.addition=paper_text"]
    else:
        problem = [f"data.problem={cell.problem}"]
    chosen = [
        *problem,
        *setting,
        f"model.pooling={cell.pooling}",
        f"training.learning_rate={learning_rate}",
        f"training.epochs={epochs}",
        f"training.stop_at_accuracy={cell.goal}",
        "training.progress=false",
    ]
    return apply_overrides(
        resolve_config("memory_addition", []), [*chosen, *(QUICK_OVERRIDES if quick else ()), *overrides]
    )


def reproduce(
    out_dir: Path,
    *,
    problems: Sequence[str] = PROBLEMS,
    t0s: Sequence[int] = T0S,
    poolings: Sequence[str] = POOLINGS,
    learning_rates: Sequence[float] = LEARNING_RATES,
    variable: bool = True,
    max_epochs: int = 100,
    variable_epochs: int = 100,
    seed: int = 0,
    quick: bool = False,
    race: str = EXACT,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    overrides: Sequence[str] = (),
) -> str:
    """Train every missing run (learning rates raced within a cell, as ``race`` says: one of
    :data:`RACES`), then write the report."""
    cells = [(Cell(p, t0, pool), max_epochs) for p in problems for t0 in t0s for pool in poolings]
    if variable:
        cells += [(Cell(p, None, pool), variable_epochs) for p in problems for pool in poolings]
    arguments = [
        (out_dir, cell, epochs, list(learning_rates), seed, quick, list(overrides), race)
        for cell, epochs in cells
    ]
    run_parallel(_race_learning_rates, arguments, jobs, backend=backend, address=address)
    return report(out_dir, seed)


def _race_learning_rates(
    out_dir: Path,
    cell: Cell,
    max_epochs: int,
    learning_rates: list[float],
    seed: int,
    quick: bool,
    overrides: list[str],
    race: str = EXACT,
) -> None:
    """Race the cell's learning rates round by round (:func:`race_budgets`), exactly or by
    successive halving (``race``, one of :data:`RACES`), and write its :func:`race_record`; a cell
    whose race ended in the other mode is left as it is."""
    previous = read_race(cell.path(out_dir), seed)
    if previous is not None and race_mode(previous) != race:
        log.warning(
            "== %s: its race ended in %s mode (%s), which stands; not raced again in %s mode",
            cell.label,
            race_mode(previous),
            race_record(cell.path(out_dir), seed),
            race,
        )
        return
    run_dirs = {rate: cell.path(out_dir) / _lr_folder(rate) / f"seed{seed}" for rate in learning_rates}
    reached = {rate: epochs_to_goal(_history(run_dir), cell.goal) for rate, run_dir in run_dirs.items()}
    dropped: list[dict[str, Any]] = []  # halving: the race record's entries, one per dropped rate

    def limit(learning_rate: float) -> int:
        """The epochs a rate may train: the round it was dropped after, else ``max_epochs``."""
        return next((d["after_round"] for d in dropped if d["learning_rate"] == learning_rate), max_epochs)

    def cap() -> int:
        """The cap so far: the fewest epochs any rate took to the goal, or ``max_epochs``."""
        return min([max_epochs, *(epochs for epochs in reached.values() if epochs is not None)])

    for budget in race_budgets(max_epochs):
        last_round = budget == max_epochs
        for learning_rate, run_dir in run_dirs.items():
            target = min(budget, cap(), limit(learning_rate))
            if reached[learning_rate] is not None or _trained_enough(run_dir, target, last_round):
                continue
            log.info("== %s lr=%g: to epoch %d (cap %d)", cell.label, learning_rate, target, cap())
            config = cell_config(cell, learning_rate, target, quick, [*overrides, f"training.seed={seed}"])
            train_or_resume(config, run_dir)
            reached[learning_rate] = epochs_to_goal(_history(run_dir), cell.goal)
        if race == HALVING and not last_round:
            gone = {entry["learning_rate"] for entry in dropped}
            racing = [rate for rate in learning_rates if rate not in gone]
            dropped += _worse_half(cell, run_dirs, racing, budget)
    record: dict[str, Any] = {"race": race, "learning_rates": learning_rates, "max_epochs": max_epochs}
    record["cap"] = cap()
    if race == HALVING:
        record["dropped"] = dropped
    atomic_write_text(race_record(cell.path(out_dir), seed), json.dumps(record, indent=2) + "\n")


def _worse_half(
    cell: Cell, run_dirs: dict[float, Path], racing: list[float], budget: int
) -> list[dict[str, Any]]:
    """After a round of ``budget`` epochs of a halving race, the rates of ``racing`` it drops, as
    entries of the race record's ``dropped``: all but :func:`halving_survivors`, or none when a
    rate has reached the cell's goal within the round."""
    best = {rate: best_accuracy_within(run_dir, budget) for rate, run_dir in run_dirs.items()}
    if max(best.values()) >= cell.goal:
        return []
    survivors = halving_survivors({rate: best[rate] for rate in racing})
    entries: list[dict[str, Any]] = []
    for rate in racing:
        if rate not in survivors:
            log.info(
                "== %s lr=%g: dropped after %d epochs (best %.2f%%)", cell.label, rate, budget, best[rate]
            )
            entries.append({"learning_rate": rate, "after_round": budget, "best_accuracy": best[rate]})
    return entries


def best_accuracy_within(run_dir: Path, epochs: int) -> float:
    """The run's best test accuracy (%) in its first ``epochs`` epochs (``-inf``: none logged), read
    from its log of epochs: also when it has trained past them or was stopped before its evaluation,
    so that a resumed halving race decides as the first one did."""
    history = read_metrics(run_dir / "metrics.jsonl")
    return max((record[VALID_ACCURACY] for record in history if record["epoch"] <= epochs), default=-math.inf)


def halving_survivors(best: dict[float, float]) -> list[float]:
    """The better half (``ceil(n / 2)``) of the rates still racing, by their best test accuracy
    (``best``: rate → accuracy); ties keep the rate earlier in :data:`LEARNING_RATES`. In the order
    of ``best``."""
    ranked = sorted(best, key=lambda rate: (-best[rate], _grid_position(rate)))
    kept = set(ranked[: math.ceil(len(ranked) / 2)])
    return [rate for rate in best if rate in kept]


def _grid_position(learning_rate: float) -> int:
    """The rate's place in :data:`LEARNING_RATES` (after them all when it is not one of them)."""
    return LEARNING_RATES.index(learning_rate) if learning_rate in LEARNING_RATES else len(LEARNING_RATES)


def race_record(cell_dir: Path, seed: int) -> Path:
    """The file a finished race writes; until it exists the cell's result is provisional (a later
    round can still lower the epochs, or raise the accuracy)."""
    return cell_dir / f"race_seed{seed}.json"


def read_race(cell_dir: Path, seed: int) -> dict[str, Any] | None:
    """The cell's :func:`race_record` (``None``: the race has not ended): the learning rates, the
    epoch cap, the race's mode (:func:`race_mode`) and, raced by halving, which rate was dropped
    after which round (``dropped``: ``learning_rate``, ``after_round``, ``best_accuracy``)."""
    path = race_record(cell_dir, seed)
    return json.loads(path.read_text()) if path.is_file() else None


def race_mode(record: dict[str, Any]) -> str:
    """How the recorded race was run (one of :data:`RACES`); records older than the option say
    nothing and were exact."""
    return str(record.get("race", EXACT))


RACE_ROUNDS = (5, 10, 20, 40)
"""Epoch budgets of the race's rounds before the last one, whose budget is the cap."""


def race_budgets(max_epochs: int) -> list[int]:
    """The rounds' epoch budgets: :data:`RACE_ROUNDS` below ``max_epochs``, then ``max_epochs``."""
    return [budget for budget in RACE_ROUNDS if budget < max_epochs] + [max_epochs]


def _trained_enough(run_dir: Path, epochs: int, last_round: bool) -> bool:
    """Whether the run needs no training call for a target of ``epochs``: it has trained at least that
    many (by its log of epochs, so that a round never shortens a run) and, in the last round, also
    been evaluated (an interrupted run past the cap is then evaluated as it stands)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return False
    done = sum(1 for line in metrics.read_text().splitlines() if line.strip())
    evaluated = (run_dir / "eval" / "summary.json").is_file()
    return done >= epochs and (evaluated or not last_round)


def _lr_folder(learning_rate: float) -> str:
    return f"lr{learning_rate:g}"


# ---------------------------------------------------------------------------------- report


def _history(run_dir: Path) -> list[dict[str, Any]]:
    """A finished run's epochs (``metrics.jsonl``, in current names also when an earlier version
    wrote it); ``[]`` for a run not finished."""
    if not (run_dir / "eval" / "summary.json").is_file():
        return []  # not finished
    return read_metrics(run_dir / "metrics.jsonl")


VALID_ACCURACY = valid_name("accuracy")
"""The accuracy on the validation set, which is the test set here (fresh problems of the same
generator): what the race and Table 1 go by."""


def epochs_to_goal(history: Sequence[dict[str, Any]], goal: float = 100.0) -> int | None:
    """The first epoch whose test accuracy reached ``goal`` (%), or ``None``."""
    for record in history:
        if record[VALID_ACCURACY] >= goal:
            return int(record["epoch"])
    return None


@dataclass
class CellResult:
    """The best run of a cell over learning rates: fewest epochs to the goal, else highest accuracy."""

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

    @property
    def mark(self) -> str:
        """:data:`HALVING_MARK` when the learning rates were raced by successive halving, else ``""``."""
        return HALVING_MARK if self.race == HALVING else ""

    def table_cell(self) -> str:
        reached = self.epochs is not None
        text = str(self.epochs) if reached else f"{self.accuracy:.1f}% ({self.epochs_run} ep.)"
        return text + self.mark if self.finished else f"{text}, unfinished"


def best_result(cell_dir: Path, seed: int = 0, goal: float = 100.0) -> CellResult | None:
    """The cell's :class:`CellResult` over its finished learning-rate runs (``None``: none finished);
    ``epochs`` counts the epochs to ``goal`` (%)."""
    candidates = []
    for lr_dir in sorted(cell_dir.glob("lr*")):
        history = _history(lr_dir / f"seed{seed}")
        if history:
            epochs = epochs_to_goal(history, goal)
            accuracy = history[-1][VALID_ACCURACY]
            candidates.append(CellResult(epochs, accuracy, len(history), float(lr_dir.name[2:]), history))
    if not candidates:
        return None
    best = min(candidates, key=lambda c: (c.epochs is None, c.epochs or 0, -c.accuracy, -c.epochs_run))
    record = read_race(cell_dir, seed)
    best.finished = record is not None
    if record is not None:
        best.race, best.dropped = race_mode(record), record.get("dropped", [])
    return best


def report(out_dir: Path, seed: int = 0) -> str:
    """Write ``table1.md``, ``variable_length.md``, the accuracy plots and ``results.md``."""
    table1, variable = _table1(out_dir, seed), _variable_table(out_dir, seed)
    atomic_write_text(out_dir / "table1.md", table1 + "\n")
    atomic_write_text(out_dir / "variable_length.md", variable + "\n")
    for problem in _reported_problems(out_dir):
        _plot_accuracy(out_dir, problem, seed)
    text = table1 + "\n\n" + variable
    longer = _longer_table(out_dir, seed)
    if longer:
        atomic_write_text(out_dir / "longer_t0.md", longer + "\n")
        text += "\n\n" + longer
    atomic_write_text(out_dir / "results.md", text + "\n")
    return text


def _longer_t0s(out_dir: Path) -> list[int]:
    """T0s run beyond the paper's (``--t0 100000``), from the run tree."""
    found = {int(path.name[3:]) for path in out_dir.glob("*/t0_*") if path.name[3:].isdigit()}
    return sorted(t0 for t0 in found if t0 > max(T0S))


def _longer_table(out_dir: Path, seed: int) -> str:
    """Cells at T0s past the paper's largest (issue 22, part 4): epochs, accuracy, seconds per epoch."""
    rows: dict[str, dict[str, object]] = {}
    results: dict[str, CellResult] = {}
    for t0 in _longer_t0s(out_dir):
        for problem in _reported_problems(out_dir):
            for pooling in POOLINGS:
                result = best_result(Cell(problem, t0, pooling).path(out_dir), seed)
                if result is None:
                    continue
                seconds = sorted(record["seconds"] for record in result.history)
                label = f"{problem} / {_pooling_name(pooling)}, T0={t0}"
                results[label] = result
                rows[label] = {
                    "result": result.table_cell(),
                    "best accuracy (%)": f"{max(r[VALID_ACCURACY] for r in result.history):.1f}",
                    "learning rate": f"{result.learning_rate:g}",
                    "s / epoch (median)": f"{seconds[len(seconds) // 2]:.0f}",
                }
    if not rows:
        return ""
    header = "#### Past the paper's lengths: epochs to 100% test accuracy (or accuracy at the cap)"
    columns = ["result", "best accuracy (%)", "learning rate", "s / epoch (median)"]
    table = format_table(rows, columns, markdown=True)
    return _titled_table(header, table, results)


def _reported_problems(out_dir: Path) -> list[str]:
    """The two problems, and the paper-text addition where it has runs."""
    return [*PROBLEMS, *([PAPER_TEXT_ADDITION] if (out_dir / PAPER_TEXT_ADDITION).is_dir() else [])]


def _paper_key(problem: str) -> str:
    return "addition" if problem == PAPER_TEXT_ADDITION else problem


def _table1(out_dir: Path, seed: int) -> str:
    rows: dict[str, dict[str, object]] = {}
    results: dict[str, CellResult] = {}
    for problem in _reported_problems(out_dir):
        for pooling in POOLINGS:
            cells: dict[str, object] = {}
            for index, t0 in enumerate(T0S):
                result = best_result(Cell(problem, t0, pooling).path(out_dir), seed)
                paper = PAPER_TABLE1[(_paper_key(problem), pooling)][index]
                cells[f"T0={t0}"] = f"{result.table_cell() if result else '–'} ({paper})"
                if result is not None:
                    results[f"{problem} / {_pooling_name(pooling)}, T0={t0}"] = result
            rows[f"{problem} / {_pooling_name(pooling)}"] = cells
    header = (
        "#### Table 1: epochs to 100% test accuracy, or accuracy when the epoch cap ended the run "
        f"(best over learning rates); the paper's value in parentheses. Padding: {_padding(out_dir)}"
    )
    table = format_table(rows, [f"T0={t0}" for t0 in T0S], markdown=True)
    return _titled_table(header, table, results)


def _padding(out_dir: Path) -> str:
    """How the runs under ``out_dir`` treat padding, read from their configs (``data.padding``)."""
    found = {
        load_yaml(path).get("data", {}).get("padding", "masked")
        for path in out_dir.glob("*/t0_*/*/lr*/seed*/config.yaml")
    }
    described = {
        "masked": "masked (each sequence pooled over its own steps, eqs. 1-2)",
        "pooled": "pooled (zero padding to ceil(1.1 T0) pooled too, as in the authors' code)",
    }
    return " and ".join(described.get(name, name) for name in sorted(found)) or "none run yet"


def _variable_table(out_dir: Path, seed: int) -> str:
    rows: dict[str, dict[str, object]] = {}
    results: dict[str, CellResult] = {}
    for problem in _reported_problems(out_dir):
        for pooling in POOLINGS:
            cell = Cell(problem, None, pooling)
            result = best_result(cell.path(out_dir), seed, cell.goal)
            label = f"{problem} / {_pooling_name(pooling)}"
            rows[label] = {
                "accuracy (%)": "–" if result is None else f"{result.accuracy:.1f}{result.mark}",
                "epochs": "–" if result is None else _epochs_run(result),
                "learning rate": "–" if result is None else f"{result.learning_rate:g}",
                "paper (100 epochs)": f"{PAPER_VARIABLE[(_paper_key(problem), pooling)]:.1f}",
            }
            if result is not None:
                results[label] = result
    header = "#### Variable length (§2.3): test accuracy on lengths uniform in [50, 10000]"
    columns = ["accuracy (%)", "epochs", "learning rate", "paper (100 epochs)"]
    table = format_table(rows, columns, markdown=True)
    return _titled_table(header, table, results)


def _titled_table(header: str, table: str, results: dict[str, CellResult]) -> str:
    """A report table: its ``header`` with :func:`_race_sentence`, then the table and
    :func:`_halving_footnote` (``results``: row/column label → the cell's result)."""
    return f"{header}{_race_sentence(results)}\n\n{table}{_halving_footnote(results)}"


def _race_sentence(results: dict[str, CellResult]) -> str:
    """How the table's learning rates were raced, for its header: nothing when every ended race was
    exact (the paper's grid; so the reports of exact campaigns read as before ``--race``)."""
    modes = {result.race for result in results.values() if result.finished}
    if HALVING not in modes:
        return ""
    if modes == {HALVING}:
        return f". Learning rates raced by successive halving (every ended race; cells marked {HALVING_MARK})"
    return (
        ". Learning rates raced over the whole grid (unmarked cells) and by successive halving "
        f"(cells marked {HALVING_MARK})"
    )


def _halving_footnote(results: dict[str, CellResult]) -> str:
    """The footnote of the cells marked :data:`HALVING_MARK` (table row/column → result): which
    rate was dropped after which round; ``""`` when there are none."""
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
    return text or "no rate dropped (as the exact race)"


def _epochs_run(result: CellResult) -> str:
    return str(result.epochs_run) if result.finished else f"{result.epochs_run}, unfinished"


def _pooling_name(pooling: str) -> str:
    return "attention" if pooling == "attention" else "unweighted mean"


def _plot_accuracy(out_dir: Path, problem: str, seed: int) -> Path | None:
    panels = []
    for t0 in [*T0S, None]:
        curves = {}
        for pooling in POOLINGS:
            result = best_result(Cell(problem, t0, pooling).path(out_dir), seed)
            if result is not None:
                label = f"{_pooling_name(pooling)} (lr {result.learning_rate:g})"
                curves[label] = [record[VALID_ACCURACY] for record in result.history]
        if curves:
            panels.append(("variable [50, 10000]" if t0 is None else f"T0 = {t0}", curves))
    if not panels:
        return None
    from attnlab.plotting.curves import plot_accuracy_panels

    return plot_accuracy_panels(panels, out_dir / f"accuracy_{problem}.png", title=f"{problem} problem")


# ------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    parser.add_argument("--out", default="runs/raffel2015")
    parser.add_argument(
        "--problems",
        nargs="+",
        choices=[*PROBLEMS, PAPER_TEXT_ADDITION],
        default=list(PROBLEMS),
        help=f"{PAPER_TEXT_ADDITION}: addition as the paper's text states it (U(0, 1), target x1 + x2)",
    )
    parser.add_argument("--t0", type=int, nargs="*", default=list(T0S), help="fixed-length T0s (none: skip)")
    parser.add_argument("--poolings", nargs="+", choices=POOLINGS, default=list(POOLINGS))
    parser.add_argument("--learning-rates", type=float, nargs="+", default=list(LEARNING_RATES))
    parser.add_argument("--max-epochs", type=int, default=100, help="epoch cap of a fixed-length run")
    parser.add_argument("--no-variable", action="store_true", help="skip the variable-length runs")
    parser.add_argument("--variable-epochs", type=int, default=100)
    parser.add_argument(
        "--padding",
        choices=PADDINGS,
        default="masked",
        help="pooled: pool over the zero padding to ceil(1.1 T0), as the authors' code does (fixed-length "
        "cells only; use its own --out)",
    )
    parser.add_argument("--seed", type=int, default=0, help="training seed of every run (one run per cell)")
    parser.add_argument(
        "--race",
        choices=RACES,
        default=EXACT,
        help="how a cell's learning rates are raced: exact (default; every rate until the best one's "
        "epochs to the goal, or the cap: the paper's grid) or halving (after each round nobody reached "
        "the goal only the better half goes on; far cheaper where no rate solves the cell, but can miss "
        "a rate that starts slow and wins late; such cells are marked in the report)",
    )
    add_parallel_arguments(parser, "cells")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (20 updates per epoch)")
    parser.add_argument("--report-only", action="store_true", help="rebuild tables and figures only")


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what the paper's protocol does not allow, as a user error (one line, exit 2)."""
    if args.max_epochs < 1 or args.variable_epochs < 1:
        raise ConfigError(
            "--max-epochs and --variable-epochs must be >= 1, "
            f"got {args.max_epochs} and {args.variable_epochs}"
        )
    outside = [rate for rate in args.learning_rates if rate not in LEARNING_RATES]
    if outside:
        raise ConfigError(
            f"--learning-rates: {', '.join(f'{rate:g}' for rate in outside)} not in the paper's grid "
            f"{', '.join(f'{rate:g}' for rate in LEARNING_RATES)}"
        )
    if args.padding == "pooled" and not args.no_variable:
        raise ConfigError(
            "--padding pooled: the authors' variable-length batches have one length each, which the "
            "masked default computes the same; add --no-variable"
        )
    short = [t0 for t0 in args.t0 if t0 < MIN_LENGTH]
    if short:
        raise ConfigError(f"--t0: {short} too short; T0 must be >= {MIN_LENGTH} (markers need room)")


def main(args: argparse.Namespace) -> str:
    """The recipe's command: train what is missing (unless ``--report-only``); return the report."""
    out = Path(args.out)
    if args.report_only:
        return report(out, args.seed)
    check_arguments(args)
    return reproduce(
        out,
        problems=args.problems,
        t0s=args.t0,
        poolings=args.poolings,
        learning_rates=args.learning_rates,
        variable=not args.no_variable,
        max_epochs=args.max_epochs,
        variable_epochs=args.variable_epochs,
        seed=args.seed,
        quick=args.quick,
        race=args.race,
        **parallel_options(args),
        overrides=[*(["data.padding=pooled"] if args.padding == "pooled" else []), *args.overrides],
    )
