"""Reproduce Raffel & Ellis 2015: Table 1 (fixed lengths) and the variable-length experiment (§2.3).

For every problem × T0 × pooling (feed-forward attention, eq. 1, or the unweighted mean, eq. 2), the
paper reports the best result over the learning rates {3e-4, 1e-3, 3e-3, 1e-2}: the number of
epochs (of 1,000 updates) until the held-out test accuracy reaches 100%, or the accuracy after 100
epochs when it never does. The variable-length experiment trains one model on lengths uniform in
[50, 10000] for 100 epochs (paper: 99.9% / 99.4% with attention, 77.4% / 55.5% with the mean); here
a variable-length run stops early once it passes the paper's accuracy (:attr:`Cell.goal`), which is
then the result, and runs its 100 epochs otherwise.

A cell's learning rates are raced in rounds (``experiments/race.py``), which gives the same table
for less compute: ``--race exact`` (the default) trains every rate to ``min(its own epochs to
100%, the best rate's)``, exactly as if each ran alone; ``--race halving`` races by successive
halving, which deviates from the paper's exhaustive grid (§2.2: "the best result achieved using
any learning rate") and is marked "†" in the report's tables, with the dropped rates in a
footnote. ``max_epochs`` (paper: 100) caps every run; a cell that never reaches 100% shows its best
accuracy and the cap, so that a lower cap is never mistaken for the paper's setting.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.experiments import race as races
from attnlab.experiments.race import EXACT, Race, RaceResult
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import add_out_argument, add_parallel_arguments, parallel_options
from attnlab.io import atomic_write_text
from attnlab.metric_names import valid_name
from attnlab.reporting.tables import format_table
from attnlab.tasks.memory_problems import MIN_LENGTH, PADDINGS

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
"""The paper's grid, in the order they are raced (fast rates first: they usually win); halving
ties keep the rate earlier here."""
VARIABLE = "variable"
VALID_ACCURACY = valid_name("accuracy")
"""The accuracy on the validation set, which is the test set here (fresh problems of the same
generator): what the race and Table 1 go by."""

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


def cell_race(
    cell: Cell,
    out_dir: Path,
    max_epochs: int,
    learning_rates: Sequence[float] = LEARNING_RATES,
    *,
    seed: int = 0,
    quick: bool = False,
    overrides: Sequence[str] = (),
    race: str = EXACT,
) -> Race:
    """The cell's learning-rate race (``race``: one of :data:`~attnlab.experiments.race.RACES`) in
    ``cell.path(out_dir)``: the ``memory_addition`` config set to the cell, stopping at its goal."""
    setting = ["data.setting=variable", "data.t0=null"] if cell.t0 is None else [f"data.t0={cell.t0}"]
    if cell.problem == PAPER_TEXT_ADDITION:
        problem = ["data.problem=addition", "data.addition=paper_text"]
    else:
        problem = [f"data.problem={cell.problem}"]
    chosen = [*problem, *setting, f"model.pooling={cell.pooling}"]
    config = apply_overrides(resolve_config("memory_addition", []), chosen)
    rest = [f"training.stop_at_accuracy={cell.goal}", "training.progress=false"]
    rest += [*(QUICK_OVERRIDES if quick else ()), *overrides]
    return Race(
        cell_dir=cell.path(out_dir),
        base_config=config,
        overrides=rest,
        learning_rates=list(learning_rates),
        goal=cell.goal,
        max_epochs=max_epochs,
        metric=VALID_ACCURACY,
        seed=seed,
        mode=race,
        preference=LEARNING_RATES,
        label=cell.label,
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
    :data:`~attnlab.experiments.race.RACES`), then write the report."""
    cells = [(Cell(p, t0, pool), max_epochs) for p in problems for t0 in t0s for pool in poolings]
    if variable:
        cells += [(Cell(p, None, pool), variable_epochs) for p in problems for pool in poolings]
    cell_races = [
        cell_race(
            cell, out_dir, epochs, learning_rates, seed=seed, quick=quick, overrides=overrides, race=race
        )
        for cell, epochs in cells
    ]
    races.run_races(cell_races, jobs, backend, address)
    return report(out_dir, seed)


# ---------------------------------------------------------------------------------- report


def best_result(cell_dir: Path, seed: int = 0, goal: float = 100.0) -> RaceResult | None:
    """The cell's best run over its finished learning-rate runs (``None``: none finished);
    ``epochs`` counts the epochs to ``goal`` (% test accuracy)."""
    return races.best_result(cell_dir, seed, goal, VALID_ACCURACY)


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
    results: dict[str, RaceResult] = {}
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
    return races.titled_table(header, table, results)


def _reported_problems(out_dir: Path) -> list[str]:
    """The two problems, and the paper-text addition where it has runs."""
    return [*PROBLEMS, *([PAPER_TEXT_ADDITION] if (out_dir / PAPER_TEXT_ADDITION).is_dir() else [])]


def _paper_key(problem: str) -> str:
    return "addition" if problem == PAPER_TEXT_ADDITION else problem


def _table1(out_dir: Path, seed: int) -> str:
    rows: dict[str, dict[str, object]] = {}
    results: dict[str, RaceResult] = {}
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
    return races.titled_table(header, table, results)


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
    results: dict[str, RaceResult] = {}
    for problem in _reported_problems(out_dir):
        for pooling in POOLINGS:
            cell = Cell(problem, None, pooling)
            result = best_result(cell.path(out_dir), seed, cell.goal)
            label = f"{problem} / {_pooling_name(pooling)}"
            rows[label] = {
                "accuracy (%)": "–" if result is None else f"{result.accuracy:.1f}{result.mark}",
                "epochs": "–" if result is None else result.epochs_text(),
                "learning rate": "–" if result is None else f"{result.learning_rate:g}",
                "paper (100 epochs)": f"{PAPER_VARIABLE[(_paper_key(problem), pooling)]:.1f}",
            }
            if result is not None:
                results[label] = result
    header = "#### Variable length (§2.3): test accuracy on lengths uniform in [50, 10000]"
    columns = ["accuracy (%)", "epochs", "learning rate", "paper (100 epochs)"]
    table = format_table(rows, columns, markdown=True)
    return races.titled_table(header, table, results)


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
    add_out_argument(parser, "raffel2015")
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
    races.add_race_argument(parser)
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
