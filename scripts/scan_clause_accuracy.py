"""How a SCAN run's exact match depends on the clause that holds a word (add-jump: "jump"); post
hoc, from the runs' ``eval/<test set>.predictions.tsv`` (nothing is decoded again).

A SCAN command is one clause or two joined by "and" / "after". Every test command of add-jump
holds "jump", a word seen only alone in training, so where a run fails says what it cannot do
with the word: count it ("X thrice"), turn around it ("X around left twice"), or go on after it.
For each run this prints the exact match of the test commands grouped by

* the form of each clause that holds ``--word``, the word written ``X`` ("X around left thrice");
  a command with the word in both clauses counts once under each form it holds, and
* where the word is: the whole command one clause, one of two clauses, or both.

Usage: ``python scripts/scan_clause_accuracy.py RUN_DIR [RUN_DIR ...] [--word jump]
[--test-set test] [--metric seq_acc]``; a table with a column per run (markdown), counts as
``right/all``. ``--metric`` names another 0/1 column of the predictions file (e.g.
``seq_acc_given_length``). A RUN_DIR may also be the folder of ``attnlab evaluate RUN --out DIR``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from scan_sentence_starts import (  # scripts/ is on sys.path when run as a script
    count_cell,
    print_table,
    runs_parser,
    scored_examples,
    table_head,
)

CONJUNCTIONS = ("and", "after")
PLACES = ("the whole command", "one of two clauses", "both clauses")


def clauses(command: str) -> list[list[str]]:
    """The command's clauses: its words split at its conjunction (SCAN has at most one)."""
    words = command.split()
    for conjunction in CONJUNCTIONS:
        if conjunction in words:
            cut = words.index(conjunction)
            return [words[:cut], words[cut + 1 :]]
    return [words]


def clause_keys(command: str, word: str) -> set[tuple[str, str]]:
    """``("form", clause with the word as X)`` for each clause that holds ``word``, and
    ``("place", where)``; empty for a command without the word."""
    parts = clauses(command)
    holding = [part for part in parts if word in part]
    if not holding:
        return set()
    keys = {("form", " ".join("X" if w == word else w for w in part)) for part in holding}
    place = PLACES[0] if len(parts) == 1 else PLACES[len(holding)]
    return keys | {("place", place)}


def grouped(run: Path, test_set: str, word: str, metric: str) -> tuple[Counter, Counter]:
    """``(right, all)`` counts keyed by :func:`clause_keys`."""
    right: Counter = Counter()
    total: Counter = Counter()
    for (source, _), correct in scored_examples(run, test_set, metric):
        for key in clause_keys(source, word):
            total[key] += 1
            right[key] += correct
    return right, total


def table(runs: Sequence[Path], test_set: str, word: str, metric: str) -> list[str]:
    """The markdown table of :func:`grouped` for every run, one column per run: the clause forms
    (shortest first), then the places."""
    counts = [grouped(run, test_set, word, metric) for run in runs]
    keys = set().union(*(total for _, total in counts))
    if not keys:
        raise ValueError(f"no {test_set} command of these runs holds {word!r}")
    forms = sorted(
        (value for kind, value in keys if kind == "form"), key=lambda form: (len(form.split()), form)
    )
    places = [place for place in PLACES if ("place", place) in keys]
    lines = table_head(runs, f"{metric} by the clause with {word!r} ({test_set})")
    for kind, values in (("form", forms), ("place", places)):
        for value in values:
            label = f"clause {value!r}" if kind == "form" else f"{word!r} in {value}"
            cells = [count_cell(right[(kind, value)], total[(kind, value)]) for right, total in counts]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = runs_parser(__doc__.split("\n")[0])
    parser.add_argument("--word", default="jump", help="the word whose clauses are counted")
    parser.add_argument("--metric", default="seq_acc", help="the predictions file's 0/1 column")
    args = parser.parse_args(argv)
    if not args.word or len(args.word.split()) != 1:
        parser.error("--word must be one word")
    return print_table(lambda: table(args.runs, args.test_set, args.word, args.metric))


if __name__ == "__main__":
    sys.exit(main())
