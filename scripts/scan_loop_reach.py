"""How far into a sentence longer than any trained a SCAN run's outputs stay right; post hoc, from
the runs' ``eval/<test set>.predictions.tsv`` (nothing is decoded again).

On Lake & Baroni's length split 3,144 of the 3,920 test commands hold the sentence "U around D
thrice" (24 actions, 12 loops of "around"), longer than every training output (22 actions at most);
training's longest loop of "around" is "U around D twice" (16 actions). A model that counts its
loops by what training showed ends the sentence early, at 16; one that counts on gets to 24. So for
each run this prints, for the test commands with a sentence of at least ``--min-actions`` actions,
grouped by where that sentence is in the output (first or second sentence, in output order: "A
after B" is B then A),

* how many of its actions the prediction has right before its first wrong token (bins at
  ``--bins``, e.g. "16–17"; "all" when the whole sentence is right, whatever follows), and
* "wrong before it": the prediction is already wrong in the sentence before the long one.

With ``--from-output-start`` the bins count the output's actions instead (the sentence's start
plus the actions right in it: where in the whole output the first wrong token is), which tells a
decoder that ends a loop at the loop's trained length from one that ends the output near the
longest training output (22 actions on the length split).

The output markers of ``data.output_markers`` (``<rep>``, ``<sep>``) are stripped from the target
and the prediction first, so the bins count actions with or without them.

Usage: ``python scripts/scan_loop_reach.py RUN_DIR [RUN_DIR ...] [--test-set test]
[--min-actions 24] [--bins 16,18,20,22] [--from-output-start]``; a table with a column per run
(markdown), counts as ``commands/all (percent)`` of the commands with the long sentence at that
place. A RUN_DIR may also be the folder of ``attnlab evaluate RUN --out DIR``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from scan_sentence_starts import (  # scripts/ is on sys.path when run as a script
    count_cell,
    output_sentences,
    predictions_path,
    print_table,
    runs_parser,
    table_head,
)

from attnlab.experiments.unit_scores import read_predictions
from attnlab.tasks.scan import strip_markers

PLACES = ("first", "second")
WRONG_BEFORE = (0, 0)
WHOLE = (2, 0)
"""Bin keys (:func:`reach_bin`) that sort before and after every count of actions right."""


def long_sentence(command: str, min_actions: int) -> tuple[int, int, int] | None:
    """``(place, start, actions)`` of the command's first sentence (in output order) of at least
    ``min_actions`` actions: its place (0 first, 1 second), the output position where it starts
    and its number of actions; ``None`` when it has none."""
    for place, (start, actions) in enumerate(output_sentences(command)):
        if actions >= min_actions:
            return place, start, actions
    return None


def reach(target: list[str], prediction: list[str], start: int, actions: int) -> int | None:
    """How many of the actions ``target[start:start + actions]`` the prediction has right before its
    first wrong token; ``None`` when it is wrong before ``start``."""
    if prediction[:start] != target[:start]:
        return None
    right = 0
    for position in range(start, start + actions):
        if position >= len(prediction) or prediction[position] != target[position]:
            break
        right += 1
    return right


def reach_bin(right: int | None, actions: int, bins: Sequence[int], offset: int = 0) -> tuple[int, int]:
    """The sort key of a :func:`reach`'s bin: :data:`WRONG_BEFORE`, ``(1, edge)`` for the bin from
    that lower edge of ``bins`` (``(1, -1)`` below the first), or :data:`WHOLE` when all ``actions``
    are right; with ``offset`` (the sentence's start) the bins count ``offset + right``."""
    if right is None:
        return WRONG_BEFORE
    if right == actions:
        return WHOLE
    return (1, max((edge for edge in bins if edge <= right + offset), default=-1))


def bin_label(key: tuple[int, int], bins: Sequence[int]) -> str:
    """The row label of a :func:`reach_bin` key: ``"< 16"``, ``"16–17"``, ``"18–19"``,
    ``"20–21"``, ``"≥ 22"`` for ``bins`` ``16, 18, 20, 22``, ``"all"`` or "wrong before it"."""
    if key == WRONG_BEFORE:
        return "wrong before it"
    if key == WHOLE:
        return "all"
    low = key[1]
    if low < 0:
        return f"< {bins[0]}"
    higher = [edge for edge in bins if edge > low]
    if not higher:
        return f"≥ {low}"
    return f"{low}" if higher[0] == low + 1 else f"{low}–{higher[0] - 1}"


def counted(
    run: Path, test_set: str, min_actions: int, bins: Sequence[int], from_output_start: bool = False
) -> tuple[Counter, Counter]:
    """``(commands, all)`` counts: by ``(place, reach bin)``, and by place; ``from_output_start``:
    the bins count from the output's start, not the sentence's."""
    by_bin: Counter = Counter()
    by_place: Counter = Counter()
    for source, target, prediction in read_predictions(predictions_path(run, test_set)):
        found = long_sentence(source, min_actions)
        if found is None:
            continue
        place, start, actions = found
        right = reach(
            list(strip_markers(target.split())), list(strip_markers(prediction.split())), start, actions
        )
        by_bin[(place, reach_bin(right, actions, bins, start if from_output_start else 0))] += 1
        by_place[place] += 1
    return by_bin, by_place


def table(
    runs: Sequence[Path],
    test_set: str,
    min_actions: int,
    bins: Sequence[int],
    from_output_start: bool = False,
) -> list[str]:
    """The markdown table of :func:`counted` for every run, one column per run."""
    counts = [counted(run, test_set, min_actions, bins, from_output_start) for run in runs]
    if not any(by_place for _, by_place in counts):
        raise ValueError(f"no {test_set} command of these runs has a sentence of ≥ {min_actions} actions")

    keys = sorted({key for by_bin, _ in counts for _, key in by_bin})
    right = "the output's actions right" if from_output_start else "actions right"
    lines = table_head(runs, f"a sentence of ≥ {min_actions} actions ({test_set}): its place, {right}")
    for place, name in enumerate(PLACES):
        for key in keys:
            if not any(by_bin[(place, key)] for by_bin, _ in counts):
                continue
            cells = [count_cell(by_bin[(place, key)], by_place[place]) for by_bin, by_place in counts]
            lines.append(f"| {name} sentence: {bin_label(key, bins)} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = runs_parser(__doc__.split("\n")[0])
    parser.add_argument("--min-actions", type=int, default=24, help="what counts as a long sentence")
    parser.add_argument(
        "--bins", default="16,18,20,22", help="the lower edges of the bins of actions right, comma-separated"
    )
    parser.add_argument(
        "--from-output-start",
        action="store_true",
        help="count the actions right from the output's start, not the long sentence's",
    )
    args = parser.parse_args(argv)
    try:
        bins = sorted({int(edge) for edge in args.bins.split(",")})
    except ValueError:
        parser.error(f"--bins {args.bins}: expected whole numbers separated by commas, e.g. 16,18,20,22")
    if args.min_actions < 1 or min(bins) < 1:
        parser.error("--min-actions and the --bins edges must be at least 1")
    return print_table(
        lambda: table(args.runs, args.test_set, args.min_actions, bins, args.from_output_start)
    )


if __name__ == "__main__":
    sys.exit(main())
