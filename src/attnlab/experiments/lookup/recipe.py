"""Reproduce Dubois et al. 2020: every attender × the three Lookup Tables tasks × seeds.

Writes, under ``out_dir``:

* ``<task>/<attender>/seed<N>/``: one run directory per run (see :mod:`attnlab.experiments.runs`);
* ``<task>/<attender>/aggregate.{json,csv,md}``: mean ± std over the seeds;
* ``figure6_seqacc_long.png`` / ``figure7_seqaccbe_long.png``: seqAcc / seqAccBE on the Long Lookup
  Tables per test set (the paper shows the Location Attender and the best baseline, Transformer);
* ``figure8_seqaccbe_reversed.png`` / ``figure8_seqaccbe_noisy.png``: seqAccBE on the Reversed and
  Noisy-start tasks (the paper shows the Mix Attender and the best baseline);
* ``table3_attnloss.md``: attnLoss per attender and test set, averaged over the three tasks and
  the seeds (Table 3);
* ``results.md``: every task × attender × test set, seqAcc / seqAccBE / attnLoss, mean ± std.

Runs that finished are skipped and interrupted ones resume, so the recipe can be stopped and
started again. ``report`` rebuilds the figures and tables from the run directories alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab.config import apply_overrides
from attnlab.experiments.aggregate import aggregate_results, summarize, write_aggregate
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import (
    Grid,
    add_out_argument,
    add_parallel_arguments,
    add_seeds_argument,
    parallel_options,
    run_grid,
)
from attnlab.io import atomic_write_text
from attnlab.metric_names import read_summary
from attnlab.plotting import plot_metric_by_test_set
from attnlab.reporting.tables import format_table, stats_text

PAPER = "dubois2020"
"""The recipe's name: ``attnlab reproduce dubois2020``."""

ATTENDERS = ("additive", "multiplicative", "scaled_dot", "transformer", "transformer_xl", "location", "mix")
TASKS = ("long", "reversed", "noisy")
TEST_SETS = ("interpolation", "long1", "long2", "long3", "long4", "long5")

PAPER_TABLE3 = {
    "scaled_dot": (5.3, 6.3, 8.1, 10.2, 12.6, 15.4),
    "multiplicative": (3.1, 4.6, 6.3, 7.9, 9.9, 12.4),
    "additive": (3.1, 8.4, 15.6, 22.2, 28.7, 34.8),
    "transformer": (2.8, 3.5, 6.1, 9.1, 11.7, 13.9),
    "transformer_xl": (3.0, 3.9, 5.3, 7.1, 9.1, 11.4),
    "mix": (2.1, 2.2, 2.9, 4.1, 5.3, 6.7),
}
"""Dubois et al. 2020, Table 3: attnLoss averaged over the three tasks and 5 runs."""

QUICK_OVERRIDES = (
    "training.epochs=1",
    "data.long_size=200",
    "data.interpolation_size=500",
    "data.validation_size=200",
)


EXTRAPOLATING_CONFIG = "lookup_extrapolate"
SHIFT_CONFIG = "lookup_shift"
ABLATIONS = {
    "location_extrapolate-local_encoder": ("model.encoder=gru",),
    "location_extrapolate-stateless_decoder": ("model.decoder_recurrence=true", "model.input_feeding=false"),
    "location_extrapolate-binary_gates": ("model.attender_options.gates=sigmoid",),
    "location_extrapolate-feedforward_weighter": ("model.attender_options.weighter=gru",),
    "location_extrapolate-zero_step_start": ("model.attender_options.initial_rho=[1.0, 1.0, -2.0]",),
}
"""Leave-one-out ablations of ``location_extrapolate``: each undoes one of its choices."""
SHIFT_ABLATIONS = {
    "shift_extrapolate-with_local_encoder": ("model.encoder=local",),
    "shift_extrapolate-stateless_decoder": ("model.decoder_recurrence=true", "model.input_feeding=false"),
    "shift_extrapolate-exploration": ("model.attender_options.choice=straight_through",),
    "shift_extrapolate-hard_choice": ("model.attender_options.choice=softmax",),
    "shift_extrapolate-content_move": ("model.attender_options.moves=[stay, forward, backward, start, end]",),
}
"""Ablations of ``shift_extrapolate``: each undoes one of its choices, or (``with_local_encoder``)
takes the Location model's local encoder instead of the paper's GRU."""
EXTRAPOLATING = (
    "shift_extrapolate",
    *SHIFT_ABLATIONS,
    "location_extrapolate",
    "mix_anchor_extrapolate",
    *ABLATIONS,
)
"""Beyond the paper (issue 6, docs/results.md "Beyond the paper: solving the ``<eos>`` problem"),
built on ``configs/lookup_shift.yaml`` (``shift_extrapolate*``) and ``configs/lookup_extrapolate.yaml``
(the Location Attender's). Not in the default grid, which stays the paper's."""


def extrapolating_config(name: str) -> dict[str, Any]:
    """The config of one :data:`EXTRAPOLATING` model: ``lookup_shift`` or ``lookup_extrapolate``
    itself, one of their leave-one-out ablations, or (``mix_anchor_extrapolate``) the Location
    options inside a Mix Attender whose content attention anchors the location (``combination:
    anchor``)."""
    if name.startswith("shift_extrapolate"):
        return resolve_config(SHIFT_CONFIG, list(SHIFT_ABLATIONS.get(name, ())))
    config = resolve_config(EXTRAPOLATING_CONFIG, list(ABLATIONS.get(name, ())))
    if name == "mix_anchor_extrapolate":
        model = config["model"]
        model["attender_options"] = {"combination": "anchor", "location_options": model["attender_options"]}
        model["attender"] = "mix"
    return config


def base_config() -> dict[str, Any]:
    return resolve_config("lookup", [])


def cell_config(task: str, attender: str, quick: bool, overrides: Sequence[str] = ()) -> dict[str, Any]:
    if attender in EXTRAPOLATING:
        base, cell = extrapolating_config(attender), [f"data.variant={task}"]
    else:
        base, cell = base_config(), [f"data.variant={task}", f"model.attender={attender}"]
    cell.append("training.progress=false")
    return apply_overrides(base, [*cell, *(QUICK_OVERRIDES if quick else ()), *overrides])


def reproduce(
    out_dir: Path,
    seeds: Sequence[int],
    *,
    quick: bool = False,
    attenders: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    overrides: Sequence[str] = (),
) -> str:
    """Train every missing run of the grid, then write the figures and tables; return the report."""
    run_grid(
        grid(out_dir, seeds, quick, attenders, tasks, overrides), jobs=jobs, backend=backend, address=address
    )
    return report(out_dir)


def grid(
    out_dir: Path,
    seeds: Sequence[int],
    quick: bool = False,
    attenders: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
) -> Grid:
    """Tasks × attenders × seeds: ``<task>/<attender>/seed<N>`` (and ``aggregate.*`` per cell)."""
    cells = {
        f"{task}/{attender}": cell_config(task, attender, quick, overrides)
        for task in (tasks or TASKS)
        for attender in (attenders or ATTENDERS)
    }
    return Grid(out_dir, cells, tuple(seeds))


# ---------------------------------------------------------------------------------- report


def collect(out_dir: Path) -> dict[str, dict[str, list[dict[str, dict[str, float]]]]]:
    """task → attender → one test-set summary per finished seed."""
    found: dict[str, dict[str, list[dict[str, dict[str, float]]]]] = {}
    for summary in sorted(out_dir.glob("*/*/seed*/eval/summary.json")):
        task, attender = summary.parts[-5], summary.parts[-4]
        found.setdefault(task, {}).setdefault(attender, []).append(read_summary(summary))
    return found


def report(out_dir: Path) -> str:
    """Write figures 6–8, Table 3 and ``results.md`` from the run directories; return the markdown."""
    runs = collect(out_dir)
    if not runs:
        return f"no finished runs under {out_dir}"
    for task, by_attender in runs.items():
        for attender, results in by_attender.items():
            seeds = sorted(
                int(p.name[4:])
                for p in (out_dir / task / attender).glob("seed*")
                if (p / "eval" / "summary.json").is_file()
            )
            write_aggregate(aggregate_results(results), out_dir / task / attender, seeds=seeds)
    _figures(runs, out_dir)
    table3 = _table3(runs)
    atomic_write_text(out_dir / "table3_attnloss.md", table3 + "\n")
    text = "\n\n".join([_results_table(runs), table3])
    atomic_write_text(out_dir / "results.md", text + "\n")
    return text


def _metric_values(results: list[dict[str, dict[str, float]]], metric: str) -> dict[str, list[float]]:
    return {name: [r[name][metric] for r in results if name in r and metric in r[name]] for name in TEST_SETS}


def _figures(runs: dict[str, dict[str, list[dict[str, dict[str, float]]]]], out_dir: Path) -> None:
    figures = [
        ("long", "seq_acc", "seqAcc (%)", "figure6_seqacc_long.png"),
        ("long", "seq_acc_be", "seqAccBE (%)", "figure7_seqaccbe_long.png"),
        ("reversed", "seq_acc_be", "seqAccBE (%)", "figure8_seqaccbe_reversed.png"),
        ("noisy", "seq_acc_be", "seqAccBE (%)", "figure8_seqaccbe_noisy.png"),
        ("reversed", "seq_acc", "seqAcc (%)", "seqacc_reversed.png"),
        ("noisy", "seq_acc", "seqAcc (%)", "seqacc_noisy.png"),
    ]
    for task, metric, label, name in figures:
        if task not in runs:
            continue
        series = {attender: _metric_values(results, metric) for attender, results in runs[task].items()}
        plot_metric_by_test_set(
            series, out_dir / name, metric_label=label, test_sets=TEST_SETS, title=f"{task} lookup tables"
        )


def _results_table(runs: dict[str, dict[str, list[dict[str, dict[str, float]]]]]) -> str:
    sections = []
    for task, by_attender in runs.items():
        for metric, label in (("seq_acc", "seqAcc"), ("seq_acc_be", "seqAccBE"), ("attn_loss", "attnLoss")):
            rows = {}
            for attender in _ordered(by_attender):
                values = _metric_values(by_attender[attender], metric)
                n = len(by_attender[attender])
                rows[f"{attender} (n={n})"] = {
                    name: _mean_std(values[name]) for name in TEST_SETS if values[name]
                }
            sections.append(f"#### {task}: {label}\n\n" + format_table(rows, TEST_SETS, markdown=True))
    return "\n\n".join(sections)


def _table3(runs: dict[str, dict[str, list[dict[str, dict[str, float]]]]]) -> str:
    """attnLoss averaged over the tasks present (mean over tasks of the mean over seeds)."""
    attenders = _ordered({attender for by_attender in runs.values() for attender in by_attender})
    rows: dict[str, dict[str, object]] = {}
    for attender in attenders:
        cells: dict[str, object] = {}
        for index, name in enumerate(TEST_SETS):
            means = []
            for by_attender in runs.values():
                values = _metric_values(by_attender.get(attender, []), "attn_loss")[name]
                if values:
                    means.append(sum(values) / len(values))
            if means:
                paper = PAPER_TABLE3.get(attender)
                cells[name] = f"{sum(means) / len(means):.1f}" + (f" ({paper[index]})" if paper else "")
        rows[attender] = cells
    tasks = ", ".join(runs)
    header = f"#### Table 3: attnLoss averaged over tasks ({tasks}); paper's value in parentheses\n\n"
    text = header + format_table(rows, TEST_SETS, markdown=True)
    return text


def _mean_std(values: list[float]) -> str:
    return stats_text(summarize(values))


def _ordered(attenders: Any) -> list[str]:
    known = [*ATTENDERS, *EXTRAPOLATING]
    return [name for name in known if name in attenders] + sorted(set(attenders) - set(known))


# ------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    add_out_argument(parser, "dubois2020")
    add_parallel_arguments(parser, "runs")
    parser.add_argument(
        "--report-only", action="store_true", help="rebuild figures and tables from finished runs"
    )
    add_seeds_argument(parser, [0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (minutes)")
    parser.add_argument(
        "--attenders",
        nargs="+",
        default=None,
        choices=[*ATTENDERS, *EXTRAPOLATING],
        help="default: the paper's seven (the first seven); the others extrapolate (issue 6) or ablate those",
    )
    parser.add_argument("--tasks", nargs="+", default=None, choices=list(TASKS))


def main(args: argparse.Namespace) -> str:
    """The recipe's command: train what is missing (unless ``--report-only``); return the report."""
    if args.report_only:
        return report(Path(args.out))
    return reproduce(
        Path(args.out),
        args.seeds,
        quick=args.quick,
        attenders=args.attenders,
        tasks=args.tasks,
        **parallel_options(args),
        overrides=args.overrides,
    )
