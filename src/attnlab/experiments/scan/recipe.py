"""Reproduce Russin et al. 2019: Table 1 (SCAN splits), Table 2 (add-jump ablations), English–French BLEU.

* **Table 1**: Syntactic Attention and the GRU + attention baselines with and without the decoder's
  dependency on the previous action (Bastings et al. 2018) on the simple, length, add-primitive
  turn left and add-primitive jump splits (the public files).
* **Table 2**: on add-jump, Syntactic Attention, an RNN for the translation encoding
  (``model.translation_encoder=rnn``) and ``c_i`` used for translation
  (``model.translate_from_context=true``).
* **Stop** (attnlab, issue 29; not in the paper): the paper's model against the stop options of
  :data:`STOP_VARIANTS`, each added to the one before, with ``<eos>`` and with the length given —
  first on add-jump (the ablation of docs/results.md at the paper's size), then on the other three
  splits (``--cells`` picks a part, e.g. ``'stop/learned_init*'``).
* **MT**: Syntactic Attention, the ``c_i``-for-translation variant and the GRU + attention baseline
  (``scan_gru_attention``'s model, trained with the same data, budget and BLEU) on Lake & Baroni's
  English–French set; sacrebleu BLEU on ``test.txt`` (and on ``test_no_unk.txt``), and each
  variant against the baseline seed by seed: the paired bootstrap of ``attnlab compare
  mt/gru_attention/seed<N> mt/<variant>/seed<N> --metric bleu`` over the test sentences.

Every cell runs once per seed with early stopping on 20% of the training set. Tables give, per cell,
the test accuracy over seeds as ``mean ± std (median; n)``, both with the model producing ``<eos>``
itself and with the output length given (the authors' evaluation), beside the paper's numbers.

Writes, under ``out_dir``:

* ``table1/<split>/<model>/seed<N>/``, ``table2/<variant>/seed<N>/``, ``stop/<variant>/seed<N>/``
  (add-jump), ``stop/<variant>/<split>/seed<N>/`` (the other splits), ``mt/<variant>/seed<N>/``:
  run directories (the Syntactic Attention rows of Table 2 and of the stop table reuse Table 1's
  runs);
* ``attention/``: attention heatmaps of a few add-jump test commands (first seed of Syntactic
  Attention on add-jump);
* ``results.md``: all tables.

Finished runs are skipped and interrupted ones resume; ``--report-only`` rebuilds the tables and
plots from the run directories. ``--quick`` is a smoke run (one epoch on 200 training examples,
evaluation on 100 examples per set): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError, apply_overrides
from attnlab.experiments.aggregate import summarize
from attnlab.experiments.compare import compare_runs, comparison_cells, read_units
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
from attnlab.reporting.tables import format_table, stats_text
from attnlab.tasks.tsv import DataFormatError

PAPER = "russin2019"
"""The recipe's name: ``attnlab reproduce russin2019``."""

SPLITS = ("simple", "length", "addprim_turn_left", "addprim_jump")
SPLIT_LABELS = {
    "simple": "Simple",
    "length": "Length",
    "addprim_turn_left": "Add turn left",
    "addprim_jump": "Add jump",
}
TABLE1_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gru_attention": ("scan_gru_attention", ()),
    "gru_attention_nodep": ("scan_gru_attention", ("model.previous_output=false",)),
    "syntactic_attention": ("scan", ()),
}
TABLE2_VARIANTS: dict[str, tuple[str, ...]] = {
    "syntactic_attention": (),
    "translation_rnn": ("model.translation_encoder=rnn",),
    "translate_from_context": ("model.translate_from_context=true",),
}
MT_BASELINE = "gru_attention"
STOP_VARIANTS: dict[str, tuple[str, ...]] = {
    "syntactic_attention": (),
    "end_marker": ("model.end_marker=true",),
    "stop_from_attention": ("model.end_marker=true", "model.stop_from_attention=true"),
    "composed_words": (
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_word_dropout=0.1",
    ),
    "peers": ("model.end_marker=true", "model.stop_from_attention=true", "model.alignment_peers=true"),
    "learned_init": (
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_peers=true",
        "model.decoder_init=learned",
    ),
}
"""The stop table's rows (issue 29): the paper's model, then each option added to the one before;
"peers" aligns a word seen only alone as its peers instead of the word dropout's unknown word
(``model.alignment_peers``, docs/results.md: the unknown word reads partly as "turn"), and the last
row also starts the decoder from one learned state (``model.decoder_init=learned``; it fixes
turn-left's "X after turn left", docs/results.md)."""
STOP_SPLITS = ("addprim_jump", "addprim_turn_left", "simple", "length")
"""The stop table's splits: add-jump first (its ablation), then the other splits of Table 1."""
MT_VARIANTS: dict[str, tuple[str, ...]] = {
    **{name: TABLE2_VARIANTS[name] for name in ("syntactic_attention", "translate_from_context")},
    MT_BASELINE: (
        f"model={json.dumps(resolve_config(TABLE1_MODELS[MT_BASELINE][0], [])['model'])}",
        "training.uniform_alignment_epochs=0",  # a Syntactic Attention option
    ),
}
"""English–French runs: overrides of ``mt_eng_fra``. The GRU + attention baseline is Table 1's
model (the ``model`` group of ``scan_gru_attention``, whole) with the same data, training budget
and BLEU as the Syntactic Attention runs."""
MT_COMPARISON_SAMPLES = 1000
PREDICTIONS = "eval/test.predictions.tsv"
"""What an MT run is compared on: its test sentences' predictions (``attnlab compare``)."""
LABELS = {
    "gru_attention": "GRU + attn (Bastings et al.)",
    "gru_attention_nodep": "GRU + attn − dep (Bastings et al.)",
    "syntactic_attention": "Syntactic Attention",
    "translation_rnn": "RNN for translation encoding",
    "translate_from_context": "c_i used for translation",
    "end_marker": "+ end marker",
    "stop_from_attention": "+ stop from the attention on it",
    "composed_words": "+ never-composed words aligned as unknown",
    "peers": "end marker + stop from attention + words seen only alone aligned as their peers",
    "learned_init": "… + the decoder started from one learned state",
}

PAPER_TABLE1: dict[str, dict[str, str]] = {
    "gru_attention": {
        "simple": "100.0 ± 0.0",
        "length": "18.1 ± 1.1",
        "addprim_turn_left": "59.1 ± 16.8",
        "addprim_jump": "12.5 ± 6.6",
    },
    "gru_attention_nodep": {
        "simple": "100.0 ± 0.0",
        "length": "17.8 ± 1.7",
        "addprim_turn_left": "90.8 ± 3.6",
        "addprim_jump": "0.7 ± 0.4",
    },
    "syntactic_attention": {
        "simple": "100.0 ± 0.0",
        "length": "15.2 ± 0.7",
        "addprim_turn_left": "99.9 ± 0.16",
        "addprim_jump": "78.4 ± 27.4 (median 91.0; n=25)",
    },
}
"""Russin et al. 2019, Table 1 and §3 (add-jump: mean 78.4, median 91.0 over 25 seeds; Table 1 prints the
median, 91.0 ± 27.4). 5 seeds unless stated."""
PAPER_NOT_EXTRACTED = "see paper"
"""Table 2 and the BLEU table are not in the extracted text (shared/papers); read them from the PDF."""

ATTENTION_COMMANDS = (
    "jump twice after walk left",
    "jump around right",
    "turn left twice and jump opposite left",
    "look opposite right thrice after jump",
)
QUICK_OVERRIDES = (
    "training.epochs=1",
    "data.train_limit=200",
    "data.test_limit=100",
    "training.progress=false",
)
PAPER_TABLES = ("table1", "table2", "mt")
"""The paper's tables: what ``--tables`` trains by default."""
TABLES = (*PAPER_TABLES, "stop")


def cell_config(
    config: str, cell: Sequence[str], quick: bool, shared_data: Path, overrides: Sequence[str]
) -> dict[str, Any]:
    data_paths = _data_overrides(config, shared_data)
    return apply_overrides(
        resolve_config(config, []), [*data_paths, *cell, *(QUICK_OVERRIDES if quick else ()), *overrides]
    )


def _data_overrides(config: str, shared_data: Path) -> list[str]:
    if config == "mt_eng_fra":
        folder = shared_data / "mt-eng-fra"
        tests = f"{{test: {folder / 'test.txt'}, test_no_unk: {folder / 'test_no_unk.txt'}}}"
        return [f"data.train_file={folder / 'train.txt'}", f"data.test_files={tests}"]
    return [f"data.root={shared_data / 'scan'}"]


def cells(tables: Sequence[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(folder relative to out_dir, config name, overrides) of every cell of ``tables``."""
    found = []
    if "table1" in tables:
        for split in SPLITS:
            found += [_table1_cell(split, model) for model in TABLE1_MODELS]
    elif {"table2", "stop"} & set(tables):  # their Syntactic Attention rows: Table 1's add-jump
        found.append(_table1_cell("addprim_jump", "syntactic_attention"))
    if "table2" in tables:
        for variant, overrides in TABLE2_VARIANTS.items():
            if variant != "syntactic_attention":
                found.append((f"table2/{variant}", "scan", ("data.split=addprim_jump", *overrides)))
    if "stop" in tables:
        for split in STOP_SPLITS:
            if split != "addprim_jump":
                cell = _table1_cell(split, "syntactic_attention")
                if cell not in found:  # with table1, already there
                    found.append(cell)
            for variant, overrides in STOP_VARIANTS.items():
                if variant != "syntactic_attention":
                    found.append((_stop_folder(variant, split), "scan", (f"data.split={split}", *overrides)))
    if "mt" in tables:
        found += [(f"mt/{variant}", "mt_eng_fra", overrides) for variant, overrides in MT_VARIANTS.items()]
    return found


def _table1_cell(split: str, model: str) -> tuple[str, str, tuple[str, ...]]:
    config, overrides = TABLE1_MODELS[model]
    return f"table1/{split}/{model}", config, (f"data.split={split}", *overrides)


def _stop_folder(variant: str, split: str) -> str:
    """A stop-table cell's folder: Table 1's for the paper's model, ``stop/<variant>`` on add-jump
    (the ablation), ``stop/<variant>/<split>`` on the other splits."""
    if variant == "syntactic_attention":
        return f"table1/{split}/syntactic_attention"
    return f"stop/{variant}" if split == "addprim_jump" else f"stop/{variant}/{split}"


def select_cells(
    found: list[tuple[str, str, tuple[str, ...]]], patterns: Sequence[str] | None
) -> list[tuple[str, str, tuple[str, ...]]]:
    """The cells whose folder matches one of the shell-style ``patterns``, in the patterns' order.

    ``None`` keeps every cell; a pattern that matches no cell is a usage error listing the folders.
    """
    if patterns is None:
        return found
    chosen: list[tuple[str, str, tuple[str, ...]]] = []
    for pattern in patterns:
        matches = [cell for cell in found if fnmatch.fnmatchcase(cell[0], pattern)]
        if not matches:
            folders = [folder for folder, _, _ in found]
            raise ConfigError(f"--cells: {pattern!r} matches no cell of these tables; cells: {folders}")
        chosen += [cell for cell in matches if cell not in chosen]
    return chosen


def reproduce(
    out_dir: Path,
    seeds: Sequence[int],
    *,
    quick: bool = False,
    tables: Sequence[str] = PAPER_TABLES,
    shared_data: Path = Path("../shared/data"),
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    overrides: Sequence[str] = (),
    only: Sequence[str] | None = None,
) -> str:
    """Train every missing run of ``tables``, then write the report; returns its markdown.

    ``only`` (shell-style patterns on the cell folders, e.g. ``table1/*/syntactic_attention``) limits
    training to the matching cells, in the patterns' order; the report covers every finished run.
    """
    chosen = select_cells(cells(tables), only)
    run_grid(
        grid(out_dir, seeds, chosen, quick, shared_data, overrides),
        jobs=jobs,
        backend=backend,
        address=address,
    )
    return report(out_dir)


def grid(
    out_dir: Path,
    seeds: Sequence[int],
    chosen: Sequence[tuple[str, str, tuple[str, ...]]],
    quick: bool = False,
    shared_data: Path = Path("../shared/data"),
    overrides: Sequence[str] = (),
) -> Grid:
    """The ``chosen`` cells (as :func:`cells` gives them) × seeds: ``<folder>/seed<N>`` (and
    ``aggregate.*`` per cell)."""
    configs = {
        folder: cell_config(config, cell, quick, shared_data, overrides) for folder, config, cell in chosen
    }
    return Grid(out_dir, configs, tuple(seeds))


# ---------------------------------------------------------------------------------- report


def collect(folder: Path) -> list[dict[str, dict[str, float]]]:
    """One test-set summary per finished seed under ``folder``."""
    return [read_summary(path) for path in sorted(folder.glob("seed*/eval/summary.json"))]


def cell_text(results: list[dict[str, dict[str, float]]], test_set: str, metric: str) -> str:
    """``mean ± std (median m; n=k)`` over the runs that have the metric, ``value (n=1)`` for one
    run (no spread to show), or blank."""
    values = [run[test_set][metric] for run in results if metric in run.get(test_set, {})]
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.1f} (n=1)"
    return stats_text(summarize(values), median=True)


def report(out_dir: Path) -> str:
    """Write ``results.md`` (and attention plots) from the run directories; return the markdown."""
    sections = [_table1(out_dir), _table2(out_dir), _stop_table(out_dir), _mt_table(out_dir)]
    text = "\n\n".join(section for section in sections if section)
    if not text:
        return f"no finished runs under {out_dir}"
    plots = _attention_plots(out_dir)
    if plots:
        text += "\n\nAttention heatmaps (add-jump test commands): " + ", ".join(str(p) for p in plots)
    atomic_write_text(out_dir / "results.md", text + "\n")
    return text


def _table1(out_dir: Path) -> str:
    rows: dict[str, dict[str, str]] = {}
    for model in TABLE1_MODELS:
        runs = {split: collect(out_dir / "table1" / split / model) for split in SPLITS}
        if not any(runs.values()):
            continue
        for metric, what in (("seq_acc", "ours, <eos>"), ("seq_acc_given_length", "ours, length given")):
            rows[f"{LABELS[model]} ({what})"] = {
                SPLIT_LABELS[split]: cell_text(runs[split], "test", metric) for split in SPLITS
            }
        rows[f"{LABELS[model]} (paper)"] = {SPLIT_LABELS[s]: PAPER_TABLE1[model][s] for s in SPLITS}
    if not rows:
        return ""
    header = "#### Table 1: test sequence accuracy (%), mean ± std (median; seeds)\n\n"
    return header + format_table(rows, [SPLIT_LABELS[s] for s in SPLITS], markdown=True)


def _table2(out_dir: Path) -> str:
    paper = {"syntactic_attention": PAPER_TABLE1["syntactic_attention"]["addprim_jump"]}
    return _add_jump_table(out_dir, "table2", TABLE2_VARIANTS, "Table 2: add-jump", paper)


def _stop_table(out_dir: Path) -> str:
    """Every stop variant that has runs × the splits, with ``<eos>`` and with the length given."""
    runs = {
        variant: {split: collect(out_dir / _stop_folder(variant, split)) for split in STOP_SPLITS}
        for variant in STOP_VARIANTS
    }
    if not any(
        any(by_split.values()) for variant, by_split in runs.items() if variant != "syntactic_attention"
    ):
        return ""  # Table 1's rows alone are no stop table
    columns = [SPLIT_LABELS[split] for split in STOP_SPLITS]
    rows: dict[str, dict[str, str]] = {}
    for variant, by_split in runs.items():
        if not any(by_split.values()):
            continue
        for metric, what in (("seq_acc", "<eos>"), ("seq_acc_given_length", "length given")):
            rows[f"{LABELS[variant]} ({what})"] = {
                SPLIT_LABELS[split]: cell_text(by_split[split], "test", metric) for split in STOP_SPLITS
            }
    paper = PAPER_TABLE1["syntactic_attention"]
    rows[f"{LABELS['syntactic_attention']} (paper, length given)"] = {
        SPLIT_LABELS[split]: paper[split] for split in STOP_SPLITS
    }
    header = (
        "#### Stopping by itself (issue 29): test sequence accuracy (%), mean ± std (median; seeds); "
        "each option added to the one before\n\n"
    )
    return header + format_table(rows, columns, markdown=True)


def _add_jump_table(
    out_dir: Path, table: str, variants: dict[str, tuple[str, ...]], title: str, paper: dict[str, str]
) -> str:
    """Add-jump rows of ``variants`` (folder ``<table>/<variant>``; the paper's model is Table 1's
    add-jump cell), with ``<eos>`` and with the length given, beside the paper's value."""
    rows = {}
    for variant in variants:
        folder = (
            "table1/addprim_jump/syntactic_attention"
            if variant == "syntactic_attention"
            else f"{table}/{variant}"
        )
        runs = collect(out_dir / folder)
        if runs:
            rows[LABELS[variant]] = {
                "ours, <eos>": cell_text(runs, "test", "seq_acc"),
                "ours, length given": cell_text(runs, "test", "seq_acc_given_length"),
                "paper": paper.get(variant, PAPER_NOT_EXTRACTED),
            }
    if not rows:
        return ""
    header = f"#### {title} test sequence accuracy (%), mean ± std (median; seeds)\n\n"
    return header + format_table(rows, ["ours, <eos>", "ours, length given", "paper"], markdown=True)


def _mt_table(out_dir: Path) -> str:
    rows = {}
    for variant in MT_VARIANTS:
        runs = collect(out_dir / "mt" / variant)
        if runs:
            rows[LABELS[variant]] = {
                "BLEU test": cell_text(runs, "test", "bleu"),
                "BLEU test_no_unk": cell_text(runs, "test_no_unk", "bleu"),
                "paper": PAPER_NOT_EXTRACTED,
            }
    if not rows:
        return ""
    header = "#### English–French: sacrebleu corpus BLEU, mean ± std (median; seeds)\n\n"
    table = format_table(rows, ["BLEU test", "BLEU test_no_unk", "paper"], markdown=True)
    comparisons = _mt_comparisons(out_dir)
    return header + table + (f"\n\n{comparisons}" if comparisons else "")


def _mt_comparisons(out_dir: Path) -> str:
    """Each MT variant against the GRU + attention baseline of the same seed: BLEU on ``test``, the
    difference and the paired bootstrap over its sentences (``attnlab compare --metric bleu``)."""
    interval = "95% CI"
    found = (out_dir / "mt" / MT_BASELINE).glob(f"seed*/{PREDICTIONS}")
    baselines = sorted(path.parents[1] for path in found)
    rows: dict[str, dict[str, object]] = {}
    for variant in MT_VARIANTS:
        for baseline in baselines:
            run = out_dir / "mt" / variant / baseline.name
            if variant == MT_BASELINE or not (run / PREDICTIONS).is_file():
                continue
            label = f"{LABELS[variant]}, {baseline.name}"
            try:
                result = compare_runs(
                    read_units(baseline, "test", None, "bleu"),
                    read_units(run, "test", None, "bleu"),
                    samples=MT_COMPARISON_SAMPLES,
                    confidence=0.95,
                    seed=0,
                )
            except (ConfigError, DataFormatError) as error:  # e.g. predictions of an older version
                rows[label] = {"verdict": f"not compared: {error}"}
                continue
            rows[label] = {"baseline BLEU": result.a, "BLEU": result.b, **comparison_cells(result, interval)}
    if not rows:
        return ""
    header = (
        f"#### English–French against {LABELS[MT_BASELINE]}, seed by seed: test BLEU, paired bootstrap "
        f"over test sentences ({MT_COMPARISON_SAMPLES} samples)\n\n"
    )
    columns = ["baseline BLEU", "BLEU", "difference", interval, "p", "verdict"]
    return header + format_table(rows, columns, markdown=True)


def _attention_plots(out_dir: Path) -> list[Path]:
    from attnlab.experiments.scan.plots import plot_attention

    folder = out_dir / "table1" / "addprim_jump" / "syntactic_attention"
    runs = [path.parents[1] for path in sorted(folder.glob("seed*/eval/summary.json"))]
    runs = [run for run in runs if (run / "checkpoints" / "best.pt").is_file()]
    if not runs:
        return []
    return plot_attention(runs[0], ATTENTION_COMMANDS, device_name="cpu", out_dir=out_dir / "attention")


# ------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    add_out_argument(parser, "russin2019")
    add_seeds_argument(parser, [0, 1, 2, 3, 4])
    parser.add_argument(
        "--tables",
        nargs="+",
        default=list(PAPER_TABLES),
        choices=TABLES,
        help="default: the paper's (table1 table2 mt); stop: the stop options of issue 29 on every split",
    )
    parser.add_argument(
        "--shared-data", default="../shared/data", help="folder holding scan/ and mt-eng-fra/"
    )
    parser.add_argument(
        "--cells",
        nargs="+",
        metavar="PATTERN",
        help="train only the cells whose folder matches, in this order (e.g. 'table1/*/syntactic_attention')",
    )
    add_parallel_arguments(parser, "runs")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (minutes; numbers mean nothing)")
    parser.add_argument(
        "--report-only", action="store_true", help="rebuild tables and plots from finished runs"
    )


def main(args: argparse.Namespace) -> str:
    """The recipe's command: train what is missing (unless ``--report-only``); return the report."""
    if args.report_only:
        return report(Path(args.out))
    return reproduce(
        Path(args.out),
        args.seeds,
        quick=args.quick,
        tables=args.tables,
        shared_data=Path(args.shared_data),
        **parallel_options(args),
        overrides=args.overrides,
        only=args.cells,
    )


if __name__ == "__main__":  # the same as `attnlab reproduce russin2019 ...`
    from attnlab.cli import main as cli_main

    sys.exit(cli_main(["reproduce", "russin2019", *sys.argv[1:]]))
