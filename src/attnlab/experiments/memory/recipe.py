"""Reproduce Raffel & Ellis 2015: Table 1 (fixed lengths) and the variable-length experiment (§2.3).

For every problem × T0 × pooling (feed-forward attention, eq. 1, or the unweighted mean, eq. 2), the
paper reports the best result over the learning rates {3e-4, 1e-3, 3e-3, 1e-2}: the number of
epochs (of 1,000 updates) until the held-out test accuracy reaches 100%, or the accuracy after 100
epochs when it never does. The variable-length experiment trains one model on lengths uniform in
[50, 10000] for 100 epochs (paper: 99.9% / 99.4% with attention, 77.4% / 55.5% with the mean).

Learning rates are raced, which gives the same table for less compute: they run one after the
other, and once one reaches 100% in ``k`` epochs the next ones are capped at ``k`` epochs (they can
only tie or beat it within ``k``). ``max_epochs`` (paper: 100) caps every run; a cell that never
reaches 100% shows its best accuracy and the cap, so that a lower cap is never mistaken for the
paper's setting.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError, apply_overrides
from attnlab.experiments.multiseed import add_parallel_arguments, parallel_options, run_parallel, run_seeds
from attnlab.experiments.registry import resolve_config, train_or_resume
from attnlab.io import atomic_write_text
from attnlab.reporting.tables import format_table
from attnlab.tasks.memory_problems import MIN_LENGTH

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
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    overrides: Sequence[str] = (),
) -> str:
    """Train every missing run (learning rates raced within a cell), then write the report."""
    cells = [(Cell(p, t0, pool), max_epochs) for p in problems for t0 in t0s for pool in poolings]
    if variable:
        cells += [(Cell(p, None, pool), variable_epochs) for p in problems for pool in poolings]
    arguments = [
        (out_dir, cell, epochs, list(learning_rates), seed, quick, list(overrides)) for cell, epochs in cells
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
) -> None:
    cap = max_epochs
    for learning_rate in learning_rates:
        log.info("== %s %s %s lr=%g (cap %s)", cell.problem, cell.folder, cell.pooling, learning_rate, cap)
        lr_dir = cell.path(out_dir) / _lr_folder(learning_rate)
        run_seeds(cell_config(cell, learning_rate, cap, quick, overrides), [seed], lr_dir, train_or_resume)
        epochs = epochs_to_perfect(_history(lr_dir / f"seed{seed}"))
        if epochs is not None:
            cap = min(cap, epochs)


def _lr_folder(learning_rate: float) -> str:
    return f"lr{learning_rate:g}"


# ---------------------------------------------------------------------------------- report


def _history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not (run_dir / "eval" / "summary.json").is_file():
        return []  # not finished
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def epochs_to_perfect(history: Sequence[dict[str, Any]]) -> int | None:
    """The first epoch whose test accuracy is 100%, or ``None``."""
    for record in history:
        if record["validation_accuracy"] >= 100.0:
            return int(record["epoch"])
    return None


@dataclass
class CellResult:
    """The best run of a cell over learning rates: fewest epochs to 100%, else highest accuracy."""

    epochs: int | None
    accuracy: float
    epochs_run: int
    learning_rate: float
    history: list[dict[str, Any]]

    def table_cell(self) -> str:
        if self.epochs is not None:
            return str(self.epochs)
        return f"{self.accuracy:.1f}% ({self.epochs_run} ep.)"


def best_result(cell_dir: Path, seed: int = 0) -> CellResult | None:
    """The cell's :class:`CellResult` over its finished learning-rate runs (``None``: none finished)."""
    candidates = []
    for lr_dir in sorted(cell_dir.glob("lr*")):
        history = _history(lr_dir / f"seed{seed}")
        if history:
            epochs = epochs_to_perfect(history)
            accuracy = history[-1]["validation_accuracy"]
            candidates.append(CellResult(epochs, accuracy, len(history), float(lr_dir.name[2:]), history))
    if not candidates:
        return None
    return min(candidates, key=lambda c: (c.epochs is None, c.epochs or 0, -c.accuracy, -c.epochs_run))


def report(out_dir: Path, seed: int = 0) -> str:
    """Write ``table1.md``, ``variable_length.md``, the accuracy plots and ``results.md``."""
    table1, variable = _table1(out_dir, seed), _variable_table(out_dir, seed)
    atomic_write_text(out_dir / "table1.md", table1 + "\n")
    atomic_write_text(out_dir / "variable_length.md", variable + "\n")
    for problem in _reported_problems(out_dir):
        _plot_accuracy(out_dir, problem, seed)
    text = table1 + "\n\n" + variable
    atomic_write_text(out_dir / "results.md", text + "\n")
    return text


def _reported_problems(out_dir: Path) -> list[str]:
    """The two problems, and the paper-text addition where it has runs."""
    return [*PROBLEMS, *([PAPER_TEXT_ADDITION] if (out_dir / PAPER_TEXT_ADDITION).is_dir() else [])]


def _paper_key(problem: str) -> str:
    return "addition" if problem == PAPER_TEXT_ADDITION else problem


def _table1(out_dir: Path, seed: int) -> str:
    rows: dict[str, dict[str, object]] = {}
    for problem in _reported_problems(out_dir):
        for pooling in POOLINGS:
            cells: dict[str, object] = {}
            for index, t0 in enumerate(T0S):
                result = best_result(Cell(problem, t0, pooling).path(out_dir), seed)
                paper = PAPER_TABLE1[(_paper_key(problem), pooling)][index]
                cells[f"T0={t0}"] = f"{result.table_cell() if result else '–'} ({paper})"
            rows[f"{problem} / {_pooling_name(pooling)}"] = cells
    header = (
        "#### Table 1: epochs to 100% test accuracy, or accuracy when the epoch cap ended the run "
        "(best over learning rates); the paper's value in parentheses\n\n"
    )
    return header + format_table(rows, [f"T0={t0}" for t0 in T0S], markdown=True)


def _variable_table(out_dir: Path, seed: int) -> str:
    rows: dict[str, dict[str, object]] = {}
    for problem in _reported_problems(out_dir):
        for pooling in POOLINGS:
            result = best_result(Cell(problem, None, pooling).path(out_dir), seed)
            rows[f"{problem} / {_pooling_name(pooling)}"] = {
                "accuracy (%)": "–" if result is None else f"{result.accuracy:.1f}",
                "epochs": "–" if result is None else str(result.epochs_run),
                "learning rate": "–" if result is None else f"{result.learning_rate:g}",
                "paper (100 epochs)": f"{PAPER_VARIABLE[(_paper_key(problem), pooling)]:.1f}",
            }
    header = "#### Variable length (§2.3): test accuracy on lengths uniform in [50, 10000]\n\n"
    return header + format_table(
        rows, ["accuracy (%)", "epochs", "learning rate", "paper (100 epochs)"], markdown=True
    )


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
                curves[label] = [record["validation_accuracy"] for record in result.history]
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
    parser.add_argument("--seed", type=int, default=0, help="training seed of every run (one run per cell)")
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
        **parallel_options(args),
        overrides=args.overrides,
    )
