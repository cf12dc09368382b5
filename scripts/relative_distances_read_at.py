"""Evaluate a trained Transformer run with every relative distance past ``K`` read as ``K``.

Under ``positional: relative`` each self-attention layer has one embedding row per distance up to
its clip (Shaw et al. 2018); a test output longer than any training output reads rows (or, at the
clip, a row) that training read rarely or never. This copies ``RUN_DIR`` to ``OUT_DIR`` (its config,
history and ``checkpoints/best.pt``; not its evaluation, ``last.pt`` or predictions), sets in the
copy's ``best.pt`` the rows of the distances ``d > K`` to the row of ``K`` and those of ``d < -K``
to the row of ``-K`` (in the decoder's self-attention, with ``--stack`` also or only the encoder's),
and evaluates the copy with ``attnlab evaluate OUT_DIR`` (its ``eval/`` as any run's). The run
itself is not touched. The table of docs/results.md on reading the clip-26 runs at 24 and 25
(issue 28, session 42) comes from this (session 40 read the clip-64 runs at 24 the same way, by
hand).

Usage: ``python scripts/relative_distances_read_at.py RUN_DIR OUT_DIR --at K [--stack decoder]``
(a SCAN length-split evaluation takes about half a minute on one CPU thread).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from attnlab.cli import main as attnlab
from attnlab.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

STACKS = {"decoder": ("decoder.",), "encoder": ("encoder.",), "both": ("decoder.", "encoder.")}
TABLE_SUFFIX = "positions.relative.weight"


def read_at(state: dict, distance: int, prefixes: tuple[str, ...]) -> list[str]:
    """Set, in place, each relative table of ``state`` under ``prefixes`` to read every distance past
    ``distance`` as ``distance`` (both signs); returns the tables' names."""
    changed = []
    for name, table in state.items():
        if name.startswith(prefixes) and name.endswith(TABLE_SUFFIX):
            clip = (table.size(0) - 1) // 2
            if not 0 <= distance <= clip:
                raise ValueError(f"--at {distance}: {name} has the distances 0..{clip}")
            table[clip + distance + 1 :] = table[clip + distance]
            table[: clip - distance] = table[clip - distance]
            changed.append(name)
    return changed


def evaluate_a_changed_copy(
    parser: argparse.ArgumentParser, run_dir: Path, out_dir: Path, change: Callable[[dict], str]
) -> NoReturn:
    """Copy ``run_dir`` to the new folder ``out_dir`` (its config, history and ``best.pt``; not its
    evaluation, ``last.pt``, predictions or plots) with ``change`` applied to the copy's ``best.pt``
    (in place; it returns what it changed, or raises a ``ValueError`` saying why it cannot), then
    exit with the status of ``attnlab evaluate OUT_DIR``. A bad argument is ``parser``'s error."""
    best = run_dir / "checkpoints" / "best.pt"
    if not best.is_file():
        parser.error(f"{best} is missing: not a trained run")
    if out_dir.exists():
        parser.error(f"{out_dir} exists: give a new folder")
    try:
        checkpoint = load_checkpoint(best)
        changed = change(checkpoint)
    except (CheckpointError, ValueError) as error:
        parser.error(str(error))
    ignored = shutil.ignore_patterns("eval", "last.pt", "*.tsv", "plots")
    shutil.copytree(run_dir, out_dir, ignore=ignored)
    checkpoint.pop("format", None)
    save_checkpoint(out_dir / "checkpoints" / "best.pt", checkpoint)
    print(f"{out_dir}: {changed}", flush=True)
    sys.exit(attnlab(["evaluate", str(out_dir)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--at", type=int, required=True, help="the distance K that every longer one reads")
    parser.add_argument("--stack", choices=sorted(STACKS), default="decoder")
    args = parser.parse_args()

    def change(checkpoint: dict) -> str:
        changed = read_at(checkpoint["model"], args.at, STACKS[args.stack])
        if not changed:
            raise ValueError(
                f"{args.run_dir} has no {args.stack} relative-position tables (not positional: relative)"
            )
        return f"{', '.join(changed)} read every distance past {args.at} as {args.at}"

    evaluate_a_changed_copy(parser, args.run_dir, args.out_dir, change)


if __name__ == "__main__":
    main()
