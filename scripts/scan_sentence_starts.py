"""Where in the output a SCAN run's long sentence starts, and the exact match there; post hoc,
from the runs' ``eval/<test set>.predictions.tsv`` (nothing is decoded again).

At a length cut-off every test command joins sentences seen in training, but not always at the
output positions training put them: at the cut-off 26, the 24-action sentence ("U around D
thrice") starts only at output positions 0–2 in training and at 3–24 in test (docs/results.md,
session 39). A decoder that counts a sentence from its own start gets the late ones right; one
that counts output positions does not. So for each run this prints the exact match of the test
commands grouped by

* the output position where their last sentence of at least ``--min-actions`` actions starts (in
  output order: "A after B" is B then A; ``-`` for commands without such a sentence), and
* the target's length, in bins of ``--bin`` actions (a decoder that meets distances it never
  trained on fails on the longest outputs whatever their sentences).

Usage: ``python scripts/scan_sentence_starts.py RUN_DIR [RUN_DIR ...] [--test-set test]
[--min-actions 24] [--bin 8]``; a table with a column per run (markdown), counts as ``right/all``.
A RUN_DIR may also be the folder of ``attnlab evaluate RUN --out DIR`` (its predictions file at the top).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from attnlab.config import ConfigError
from attnlab.experiments.unit_scores import PREDICTIONS_SUFFIX, read_prediction_units
from attnlab.tasks.scan import sentence_actions
from attnlab.tasks.tsv import DataFormatError

NO_LONG_SENTENCE = "-"


def predictions_path(run: Path, test_set: str) -> Path:
    """A run's ``eval/<test set>.predictions.tsv``, or that file at the top of ``run`` (an
    ``attnlab evaluate --out`` folder)."""
    name = f"{test_set}{PREDICTIONS_SUFFIX}"
    return run / name if (run / name).is_file() else run / "eval" / name


def scored_examples(run: Path, test_set: str, metric: str = "seq_acc") -> list[tuple[tuple[str, str], int]]:
    """``((source, target), right)`` for every example of a run's ``eval/<test set>.predictions.tsv``
    (or of that file at the top of ``run``, an ``attnlab evaluate --out`` folder), ``right`` the 0/1
    of its ``metric`` column."""
    units = read_prediction_units(predictions_path(run, test_set), metric=metric)
    return [(pair, int(right)) for pair, right in zip(units.identity, np.asarray(units.scores.values[:, 0]))]


def table_head(runs: Sequence[Path], label: str) -> list[str]:
    """A markdown table's head: ``label`` over the rows' names, then a column per run, each named by
    its path below what the runs share (by its folder's name when alone)."""
    names = [run.name for run in runs]
    if len(runs) > 1:
        common = os.path.commonpath([run.resolve() for run in runs])
        names = [os.path.relpath(run.resolve(), common) for run in runs]
    return [f"| {label} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(runs)]


def count_cell(hits: int, examples: int) -> str:
    """``right/all (percent)``, empty where a run has no such example."""
    return f"{hits}/{examples} ({100 * hits / examples:.0f}%)" if examples else ""


def output_sentences(command: str) -> list[tuple[int, int]]:
    """``(start, actions)`` of each sentence of the command in output order (``A after B`` is B's
    actions, then A's): the output position where it starts and its number of actions."""
    lengths = list(sentence_actions(command))
    if " after " in f" {command} ":
        lengths.reverse()
    starts = [sum(lengths[:place]) for place in range(len(lengths))]
    return list(zip(starts, lengths))


def long_sentence_start(command: str, min_actions: int) -> int | None:
    """The output position where the command's last sentence of at least ``min_actions`` actions
    starts (:func:`output_sentences`), else ``None``."""
    starts = [start for start, actions in output_sentences(command) if actions >= min_actions]
    return starts[-1] if starts else None


def grouped(run: Path, test_set: str, min_actions: int, bin_width: int) -> tuple[Counter, Counter]:
    """``(right, all)`` counts keyed by ``("start", position or "-")`` and ``("length", bin)``."""
    right: Counter = Counter()
    total: Counter = Counter()
    for (source, target), correct in scored_examples(run, test_set):
        start = long_sentence_start(source, min_actions)
        length = len(target.split())
        for key in (("start", NO_LONG_SENTENCE if start is None else start), ("length", length // bin_width)):
            total[key] += 1
            right[key] += int(correct)
    return right, total


def table(runs: Sequence[Path], test_set: str, min_actions: int, bin_width: int) -> list[str]:
    """The markdown table of :func:`grouped` for every run, one column per run."""
    counts = [grouped(run, test_set, min_actions, bin_width) for run in runs]

    def order(key: tuple[str, int | str]) -> tuple[bool, bool, int]:
        kind, value = key  # the starts in order, commands without a long sentence, the lengths
        return kind != "start", value == NO_LONG_SENTENCE, value if isinstance(value, int) else 0

    keys = sorted(set().union(*(total for _, total in counts)), key=order)
    lines = table_head(runs, f"test commands ({test_set})")
    for kind, value in keys:
        if kind == "start":
            label = (
                f"no sentence of ≥ {min_actions} actions"
                if value == NO_LONG_SENTENCE
                else f"a sentence of ≥ {min_actions} actions starts at output position {value}"
            )
        else:
            label = f"target of {value * bin_width}–{value * bin_width + bin_width - 1} actions"
        cells = [count_cell(right[(kind, value)], total[(kind, value)]) for right, total in counts]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def runs_parser(description: str) -> argparse.ArgumentParser:
    """The command line of a post-hoc predictions table: run directories and ``--test-set``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "runs", nargs="+", type=Path, help="run directories (or evaluate --out folders) with predictions"
    )
    parser.add_argument("--test-set", default="test")
    return parser


def print_table(lines: Callable[[], list[str]]) -> int:
    """Print the table ``lines()`` makes (exit status 0), or the reason it cannot be made on
    stderr (exit status 2): a missing or malformed predictions file, a metric it lacks."""
    try:
        table = lines()
    except (ConfigError, DataFormatError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(table))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = runs_parser(__doc__.split("\n")[0])
    parser.add_argument("--min-actions", type=int, default=24, help="what counts as a long sentence")
    parser.add_argument("--bin", type=int, default=8, help="width of the target-length bins, in actions")
    args = parser.parse_args(argv)
    if args.min_actions < 1 or args.bin < 1:
        parser.error("--min-actions and --bin must be at least 1")
    return print_table(lambda: table(args.runs, args.test_set, args.min_actions, args.bin))


if __name__ == "__main__":
    sys.exit(main())
