"""The SCAN length split's hard part in miniature: can a model make a sentence longer than any it
was trained on?

3,144 of the 3,920 test commands of Lake & Baroni's length split contain the sentence "U around D
thrice" (24 actions), longer than every training output (at most 22); no other sentence is
(``attnlab.tasks.scan.sentence_actions``). This probe trains on SCAN's single sentences of at most
``--max-actions`` actions (94 of the grammar's 102 at 22, each ``--copies`` times; the same 94 once
as the validation set) and tests on the longer ones (the 8 "U around D thrice"), so a variant
takes about a minute on one CPU thread with the default Transformer.

Each ``--variant "NAME: CONFIG key=value ..."`` is trained by ``attnlab train`` into ``OUT/NAME/``
(a finished one is read back, not retrained) with the files as its data
(``data.split=files``); the table gives each variant's exact match stopping by itself and with the
length given, and the length of every output.

Usage::

    python scripts/scan_long_sentence_probe.py OUT \\
        --variant "relative: scan_transformer model.transformer.positional=relative" \\
        --variant "none: scan_transformer model.transformer.positional=none" [key=value ...]

Overrides after the options apply to every variant.
"""

from __future__ import annotations

import argparse
import csv
import shlex
from pathlib import Path

from attnlab.cli import main as attnlab
from attnlab.tasks import scan


def write_data(folder: Path, max_actions: int, copies: int) -> dict[str, Path]:
    """The probe's train (each short sentence ``copies`` times), validation (each once) and test
    (the longer sentences) files in ``folder``."""
    sentences = [ex for ex in scan.generate_scan() if len(scan.sentence_actions(ex.source)) == 1]
    short = [ex for ex in sentences if len(ex.target) <= max_actions]
    longer = [ex for ex in sentences if len(ex.target) > max_actions]
    if not longer:
        raise SystemExit(f"--max-actions {max_actions}: no sentence is longer (the longest has 24 actions)")
    paths = {name: folder / f"{name}.txt" for name in ("train", "validation", "test")}
    folder.mkdir(parents=True, exist_ok=True)
    scan.write_scan_file(paths["train"], short * copies)
    scan.write_scan_file(paths["validation"], short)
    scan.write_scan_file(paths["test"], longer)
    return paths


def outcome(run_dir: Path) -> dict[str, str]:
    """A finished variant's exact match (stopping by itself, length given) and output lengths."""
    with open(run_dir / "eval" / "test.predictions.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    right = sum(row["seq_acc"] == "1" for row in rows)
    given = sum(row["seq_acc_given_length"] == "1" for row in rows)
    lengths = " ".join(str(len(row["prediction"].split())) for row in rows)
    target = len(rows[0]["target"].split())
    return {
        "exact match": f"{right}/{len(rows)}",
        "length given": f"{given}/{len(rows)}",
        f"output lengths (target {target})": lengths,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--variant", action="append", required=True, help="'NAME: CONFIG key=value ...'")
    parser.add_argument("--max-actions", type=int, default=scan.LENGTH_SPLIT_MAX_TRAIN_ACTIONS)
    parser.add_argument("--copies", type=int, default=20, help="copies of each training sentence")
    parser.add_argument("overrides", nargs="*", help="key=value for every variant")
    args = parser.parse_intermixed_args()
    paths = write_data(args.out / "data", args.max_actions, args.copies)
    # the probe's files replace a config's generated split (scan_transformer_csordas2021 generates
    # its own at a cut-off, which the files split would ignore)
    data = [
        "data.split=files",
        "data.generate=false",
        f"data.max_train_actions={scan.LENGTH_SPLIT_MAX_TRAIN_ACTIONS}",
        f"data.train_file={paths['train']}",
        f"data.validation_file={paths['validation']}",
        f"data.test_files={{test: {paths['test']}}}",
    ]
    table = {}
    for spec in args.variant:
        name, _, rest = spec.partition(":")
        config, *overrides = shlex.split(rest)
        run_dir = args.out / name.strip()
        if not (run_dir / "eval" / "summary.json").is_file():
            command = ["train", config, *data, *args.overrides, *overrides, "--run-dir", str(run_dir)]
            if attnlab(command) != 0:
                raise SystemExit(f"variant {name.strip()!r} failed; see {run_dir}")
        table[name.strip()] = outcome(run_dir)
    columns = list(next(iter(table.values())))
    print("| variant | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(row[column] for column in columns) + " |")


if __name__ == "__main__":
    main()
