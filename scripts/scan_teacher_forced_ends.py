"""Where a trained SCAN model ends its outputs under teacher forcing, grouped by the command's
sentences: is a wrong output a wrong word, or an ``<eos>`` the model is sure of at a place the
grammar does not end?

Under teacher forcing every step sees the gold prefix, so a command is right (every step's most
likely token the gold one, ``<eos>`` included) exactly when greedy decoding gets it right, and a
wrong one's first wrong step is where greedy decoding first leaves the target; the later steps say
what the model would do past that mistake. For each group of test commands with the same
sentences (their actions in output order: ``A after B`` is B's, then A's) this prints

* how many there are and how many are right under teacher forcing;
* where the first wrong step of the others is, and what it is: an early ``<eos>`` (the output
  would end there), a wrong action, or no ``<eos>`` where the target ends;
* how many have a wrong action at any step, past their first error too (a model that fails only
  by ``<eos>`` has none: it knows every action of the output and not where it ends);
* the mean probability of ``<eos>`` at output positions ``--from``, ``--from + --every``, … up to
  the group's target length (position ``t`` is the step after ``t`` actions; at the target's
  length the right token is ``<eos>``).

At the cut-off 26 (docs/results.md, session 64) it shows that the 48-action outputs
(``U around D thrice`` twice) fail only by ``<eos>``, after a pair of actions, while the same
sentences of 40 actions (one of them ``twice``) keep ``p(<eos>)`` near 0 up to their end.

Usage: ``python scripts/scan_teacher_forced_ends.py RUN_DIR [--checkpoint best|last|trained]
[--min-actions 40] [--from 24] [--every 2] [--test-set test]`` (one forward pass over the test set,
on the CPU, one thread).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from scan_sentence_starts import output_sentences  # scripts/ is on sys.path when run as a script
from scan_stop_rules import load_test_run, target_lengths

from attnlab.config import ConfigError
from attnlab.tasks import batching
from attnlab.tasks.tsv import DataFormatError

EARLY_END, WRONG_ACTION, NO_END = "early <eos>", "wrong action", "no <eos>"


@dataclass
class Group:
    """The teacher-forced outcome of the test commands with the same sentences."""

    commands: int = 0
    right: int = 0
    with_wrong_action: int = 0  # commands with a wrong action at any step, before or after the first error
    first_errors: Counter = field(default_factory=Counter)  # (kind, position) -> commands
    end_probability: defaultdict = field(default_factory=lambda: defaultdict(list))  # position -> p(<eos>)s


def group_name(command: str) -> str:
    """The command's sentences' actions in output order, ``"24 + 16"``."""
    return " + ".join(str(actions) for _, actions in output_sentences(command))


def first_error(predicted: Sequence[int], gold: Sequence[int], eos_id: int) -> tuple[str, int] | None:
    """The kind and output position of the first step whose most likely token is not the gold one
    (``gold`` is the target's actions then ``<eos>``), or ``None`` when every step is right."""
    for position, (token, expected) in enumerate(zip(predicted, gold)):
        if token != expected:
            kind = NO_END if expected == eos_id else EARLY_END if token == eos_id else WRONG_ACTION
            return kind, position
    return None


def teacher_forced_groups(run: Path, checkpoint: str, test_set: str, min_actions: int) -> dict[str, Group]:
    """Every test command of at least ``min_actions`` target actions, by :func:`group_name`."""
    config, model, source, _, test = load_test_run(run, checkpoint, test_set)
    groups: dict[str, Group] = defaultdict(Group)
    with torch.no_grad():
        for batch in batching.batches(test.dataset, config.evaluation.batch_size, shuffle=False):
            output = model(batch.source, batch.source_padding_mask, batch.target_input)
            predicted = output.logits.argmax(dim=-1)
            end_probability = output.logits.softmax(dim=-1)[..., model.eos_id]
            lengths = target_lengths(model, batch)  # actions before <eos>
            for row in range(batch.source.size(0)):
                length = int(lengths[row])
                if length < min_actions:
                    continue
                words = [source.tokens[index] for index in batch.source[row].tolist()]
                command = " ".join(word for word in words if word not in source.specials)
                group = groups[group_name(command)]
                group.commands += 1
                error = first_error(
                    predicted[row, : length + 1].tolist(),
                    batch.target_output[row, : length + 1].tolist(),
                    model.eos_id,
                )
                if error is None:
                    group.right += 1
                else:
                    group.first_errors[error] += 1
                steps = predicted[row, :length]  # the steps whose gold token is an action
                group.with_wrong_action += int(
                    ((steps != batch.target_output[row, :length]) & (steps != model.eos_id)).any()
                )
                for position in range(length + 1):
                    group.end_probability[position].append(float(end_probability[row, position]))
    return dict(groups)


def errors_cell(first_errors: Counter, kind: str) -> str:
    """``count (at p1: n1, p2: n2, …)`` of one kind of first error, empty when none."""
    positions = sorted(
        (position, count) for (error, position), count in first_errors.items() if error == kind
    )
    total = sum(count for _, count in positions)
    if not total:
        return ""
    return f"{total} (at " + ", ".join(f"{position}: {count}" for position, count in positions) + ")"


def tables(groups: dict[str, Group], start: int, every: int) -> list[str]:
    """The outcome table, then the mean ``p(<eos>)`` table, one row per group."""

    def order(name: str) -> tuple[int, list[int]]:
        actions = [int(part) for part in name.split(" + ")]
        return sum(actions), actions

    names = sorted(groups, key=order)
    lines = [
        "| sentences (actions, output order) | commands | right under teacher forcing "
        f"| first error: {EARLY_END} | {WRONG_ACTION} | {NO_END} | a wrong action at any step |",
        "|---|---:|---:|---|---|---|---:|",
    ]
    for name in names:
        group = groups[name]
        cells = [errors_cell(group.first_errors, kind) for kind in (EARLY_END, WRONG_ACTION, NO_END)]
        cells.append(str(group.with_wrong_action))
        lines.append(f"| {name} | {group.commands} | {group.right} | " + " | ".join(cells) + " |")
    last = max((max(group.end_probability) for group in groups.values()), default=start)
    positions = list(range(start, last + 1, every))
    lines += [
        "",
        "| mean p(<eos>) after N actions | " + " | ".join(str(position) for position in positions) + " |",
        "|---|" + "---:|" * len(positions),
    ]
    for name in names:
        probabilities = groups[name].end_probability
        cells = [
            f"{sum(probabilities[position]) / len(probabilities[position]):.2f}"
            if probabilities.get(position)
            else ""
            for position in positions
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a SCAN run directory")
    parser.add_argument(
        "--checkpoint",
        default="best",
        choices=("best", "last", "trained"),
        help="checkpoints/<name>.pt; trained: a weight-averaging run's trained weights (training.ema_decay)",
    )
    parser.add_argument("--test-set", default="test")
    parser.add_argument(
        "--min-actions", type=int, default=0, help="only targets of at least this many actions"
    )
    parser.add_argument("--from", dest="start", type=int, default=0, help="the first position of p(<eos>)")
    parser.add_argument("--every", type=int, default=1, help="the step between positions of p(<eos>)")
    args = parser.parse_args(argv)
    if args.min_actions < 0 or args.start < 0 or args.every < 1:
        parser.error("--min-actions and --from must be at least 0, --every at least 1")
    torch.set_num_threads(1)
    try:
        groups = teacher_forced_groups(args.run, args.checkpoint, args.test_set, args.min_actions)
    except (ConfigError, DataFormatError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not groups:
        print(
            f"error: {args.run}: no {args.test_set} command has {args.min_actions} actions or more",
            file=sys.stderr,
        )
        return 2
    print("\n".join(tables(groups, args.start, args.every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
