"""Whether a SCAN run reads word order, from its ``eval/<test set>.predictions.tsv`` (post hoc).

An encoder with no positions (``positional: none``) is permutation-equivariant, and dot-product
cross-attention reads its memory as a set: such a Transformer gives every command with the same
words, in any order ("jump twice after walk left", "walk left twice after jump"), the same output.
For each run this prints, over the test commands grouped by their bag of words (the sorted words):

* how many bags hold more than one command, and for how many of them the run gave every command
  of the bag one and the same output (an order-blind model: all of them);
* its exact match, and the most an order-blind model can reach on the same commands: in each bag
  the output shared by the most of its commands, right for those only (outputs compared without
  the structure markers of ``data.output_markers``, as exact match compares them).

Usage: ``python scripts/scan_word_order.py RUN_DIR [RUN_DIR ...] [--test-set test]``; a table with
a column per run (markdown). A RUN_DIR may also be the folder of ``attnlab evaluate RUN --out DIR``.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from scan_sentence_starts import (  # scripts/ is on sys.path when run as a script
    count_cell,
    predictions_path,
    print_table,
    runs_parser,
    scored_examples,
    table_head,
)

from attnlab.experiments.unit_scores import read_predictions
from attnlab.tasks.scan import strip_markers

Bag = tuple[str, ...]


def bag_of_words(command: str) -> Bag:
    """The command's words, sorted: what an order-blind model reads of it."""
    return tuple(sorted(command.split()))


def word_order_counts(run: Path, test_set: str) -> dict[str, tuple[int, int]]:
    """``(count, of)`` for each row of the table (see the module docstring)."""
    rows = read_predictions(predictions_path(run, test_set))
    outputs: dict[Bag, set[str]] = defaultdict(set)
    targets: dict[Bag, Counter[str]] = defaultdict(Counter)
    for source, target, prediction in rows:
        outputs[bag_of_words(source)].add(prediction)
        # scored as exact match scores it: without the structure markers of data.output_markers
        targets[bag_of_words(source)][" ".join(strip_markers(target.split()))] += 1
    right = sum(correct for _, correct in scored_examples(run, test_set))
    shared = [bag for bag, seen in targets.items() if sum(seen.values()) > 1]
    one_output = sum(len(outputs[bag]) == 1 for bag in shared)
    ceiling = sum(max(seen.values()) for seen in targets.values())
    return {
        "bags of words with more than one command": (len(shared), len(targets)),
        "... given one output for all their commands": (one_output, len(shared)),
        "exact match": (right, len(rows)),
        "the most an order-blind model gets right": (ceiling, len(rows)),
    }


def table(runs: Sequence[Path], test_set: str) -> list[str]:
    """The markdown table of :func:`word_order_counts`, one column per run."""
    counts = [word_order_counts(run, test_set) for run in runs]
    lines = table_head(runs, f"test commands ({test_set})")
    for label in counts[0]:
        lines.append(f"| {label} | " + " | ".join(count_cell(*count[label]) for count in counts) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = runs_parser(__doc__.split("\n")[0]).parse_args(argv)
    return print_table(lambda: table(args.runs, args.test_set))


if __name__ == "__main__":
    sys.exit(main())
