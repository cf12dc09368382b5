"""Reproduce Daniluk et al. 2017, Figures 2a–2c and 3, on WikiText-2 and PTB.

The paper's Wikipedia corpus (7,500 articles) is not public; WikiText-2 (Wikipedia articles with
article boundaries) and PTB stand in for it. Every model of a corpus has the parameter count
(without word embeddings) of that corpus's LSTM baseline with hidden size ``--lstm-hidden``
(300 in the paper; Figure 2c), and the same training (``lm_wikitext2`` / ``lm_ptb``, §4.1).

Writes, under ``out_dir``:

* ``<corpus>/<model>/seed<S>/``: one run directory per model and training seed (see
  :mod:`attnlab.experiments.runs`; a run directory ``<corpus>/<model>/`` of an earlier layout is
  read as seed 0);
* ``<corpus>/figure3b_attention_by_position.png``: the average attention weight per window
  position over the test set for Attention, Key-Value and Key-Value-Predict (largest window; mean
  and spread over its seeds);
* ``<corpus>/validation_curves.png``: the validation perplexity per epoch of Figure 2c's five
  models, every seed (the evidence that the runs converged, and how: plateau or overfitting);
* ``<corpus>/figure3a_heatmap.png``: Key-Value-Predict's attention on the start of one test document;
* ``results.md``: Figure 2a (test perplexity by window size), 2b (N-gram RNNs), 2c (best window
  per model, validation and test perplexity, hidden size, parameters, and the test perplexity's
  difference from the LSTM with a 95% paired-bootstrap interval, :mod:`attnlab.experiments.compare`)
  beside the paper's numbers. With several seeds a cell shows mean ± std over its seeds (and n);
  Figure 2c picks each model's window by the validation perplexity of seed 0 (the paper's "best
  configuration on the validation set", decided once, before the other seeds are trained), and its
  bootstrap compares the seeds' mean NLL per unit of the model with the LSTM's.

Finished runs are skipped and interrupted ones resume. ``--quick`` trains tiny models on the first
tokens of each corpus for one epoch (a smoke test of the whole pipeline, minutes on a CPU).

Usage: ``python -m attnlab.experiments.language_model.recipe [--quick] [--out runs/daniluk2017]``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.checks import did_you_mean_each
from attnlab.config import ConfigError, apply_overrides
from attnlab.evaluation.significance import UnitScores
from attnlab.experiments.aggregate import summarize
from attnlab.experiments.compare import compare_runs, read_units
from attnlab.experiments.language_model import experiment as lm
from attnlab.experiments.language_model.plots import plot_document_attention
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import Grid, add_out_argument, add_seeds_argument, run_grid
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import Units
from attnlab.io import atomic_write_text
from attnlab.metric_names import read_metrics, read_summary
from attnlab.plotting import plot_curves_by_group, plot_metric_by_test_set
from attnlab.reporting.tables import markdown_table, stats_text
from attnlab.tasks.corpus_data import load_split

logger = logging.getLogger(__name__)

PAPER = "daniluk2017"
"""The recipe's name: ``attnlab reproduce daniluk2017``."""

CORPORA = {"wikitext-2": "lm_wikitext2", "ptb": "lm_ptb"}
WINDOWS = (1, 5, 10, 15)
NGRAMS = (2, 3, 4, 5)
ATTENTIVE = ("attention", "key_value", "key_value_predict")
QUICK_OVERRIDES = (
    "data.max_tokens={train: 20000, valid: 4000, test: 4000}",
    "data.max_vocab_size=2000",
    "model.embedding_dim=32",
    "model.init_range=0.3",
    "training.epochs=1",
    "training.batch_size=16",
    "evaluation.batch_size=16",
)
QUICK_WINDOWS = (5,)
QUICK_NGRAMS = (4,)

PAPER_FIGURE_2A = {  # test perplexity on the paper's Wikipedia corpus, windows 1, 5, 10, 15
    "attention": (82.2, 82.2, 82.0, 82.8),
    "key_value": (78.7, 79.0, 78.2, 78.9),
    "key_value_predict": (76.1, 75.8, 76.0, 75.8),
}
PAPER_FIGURE_2B = {2: (76.0, 77.1), 3: (74.9, 75.9), 4: (74.8, 75.9), 5: (76.0, 77.3)}  # dev, test
PAPER_FIGURE_2C = {  # dev, test
    "lstm": (83.2, 85.2),
    "attention": (80.6, 82.0),
    "key_value": (77.1, 78.2),
    "key_value_predict": (74.2, 75.8),
    "4-gram": (74.8, 75.9),
}


def cells(quick: bool) -> dict[str, list[str]]:
    """Model name → overrides, for one corpus."""
    grid: dict[str, list[str]] = {"lstm": ["model.variant=lstm"]}
    for variant in ATTENTIVE:
        for window in QUICK_WINDOWS if quick else WINDOWS:
            grid[f"{variant}_L{window}"] = [f"model.variant={variant}", f"model.window={window}"]
    for n in QUICK_NGRAMS if quick else NGRAMS:
        grid[f"{n}-gram"] = ["model.variant=ngram", f"model.ngram={n}"]
    return grid


def cell_config(
    corpus: str, model: list[str], quick: bool, lstm_hidden: int, overrides: Sequence[str]
) -> dict:
    size = [f"model.match_lstm_hidden={32 if quick else lstm_hidden}", "training.progress=false"]
    return apply_overrides(
        resolve_config(CORPORA[corpus], []), [*size, *model, *(QUICK_OVERRIDES if quick else ()), *overrides]
    )


def reproduce(
    out_dir: Path,
    *,
    quick: bool = False,
    corpora: Sequence[str] = tuple(CORPORA),
    data_root: Path | None = None,
    lstm_hidden: int = 300,
    overrides: Sequence[str] = (),
    models: Sequence[str] | None = None,
    seeds: Sequence[int] = (0,),
) -> str:
    """Train every missing run, then write the figures and ``results.md``; returns the report.

    ``models`` (names as in :func:`cells`, e.g. ``lstm``, ``key_value_L5``, ``4-gram``) limits
    training to those cells, in that order; each is trained with every seed of ``seeds``. The
    report covers every finished run.
    """
    grid = cells(quick)
    unknown = sorted(set(models or ()) - set(grid))
    if unknown:
        raise ConfigError(
            f"--models: unknown model(s) {unknown}; choose from {list(grid)}"
            f"{did_you_mean_each(unknown, grid)}"
        )
    chosen = {name: grid[name] for name in models} if models else grid
    configs: dict[str, dict[str, Any]] = {}
    for corpus in corpora:
        extra = [*overrides, *([f"data.corpus={data_root / corpus}"] if data_root else [])]
        for name, model in chosen.items():
            configs[f"{corpus}/{name}"] = cell_config(corpus, model, quick, lstm_hidden, extra)
    run_grid(Grid(out_dir, configs, tuple(seeds), aggregate=False, run_dir=seed_run_dir))
    return report(out_dir, corpora)


def seed_run_dir(model_dir: Path, seed: int) -> Path:
    """``<model>/seed<S>``; seed 0 of an earlier layout is the model folder itself."""
    if seed == 0 and (model_dir / "config.yaml").is_file():
        return model_dir
    return model_dir / f"seed{seed}"


# ------------------------------------------------------------------------------------ report


def _load(run_dir: Path) -> dict[str, Any] | None:
    summary = run_dir / "eval" / "summary.json"
    if not summary.is_file():
        return None
    result = {"summary": read_summary(summary), "dir": run_dir}
    for name in ("attention", "model"):
        path = run_dir / "eval" / f"{name}.json"
        result[name] = json.loads(path.read_text()) if path.is_file() else {}
    return result


def _load_seeds(model_dir: Path) -> list[dict[str, Any]]:
    """The finished runs of one model, seed 0 first (then by seed)."""
    candidates = [(0, model_dir)] if (model_dir / "config.yaml").is_file() else []
    candidates += [
        (int(p.name[4:]), p) for p in model_dir.glob("seed*") if p.name[4:].isdigit() and p.is_dir()
    ]
    loaded = [(seed, run) for seed, path in sorted(candidates) if (run := _load(path)) is not None]
    return [{**run, "seed": seed} for seed, run in loaded]


def report(out_dir: Path, corpora: Sequence[str] = tuple(CORPORA)) -> str:
    """Rebuild the tables and figures from the run directories alone."""
    sections = ["# Daniluk et al. 2017 reproduction\n"]
    for corpus in corpora:
        model_dirs = sorted(p for p in (out_dir / corpus).glob("*") if p.is_dir())
        seeds = {p.name: found for p in model_dirs if (found := _load_seeds(p))}
        runs = {name: found[0] for name, found in seeds.items()}  # the window-choosing seed
        if not runs:
            continue
        sections.append(f"## {corpus}\n")
        sections.append(_figure_2a(seeds))
        sections.append(_figure_2b(seeds))
        sections.append(_figure_2c(runs, seeds))
        _dev_curves(runs, seeds, out_dir / corpus / "validation_curves.png")
        _figure_3b(seeds, out_dir / corpus / "figure3b_attention_by_position.png")
        _figure_3a(out_dir / corpus, runs)
    text = "\n".join(sections)
    atomic_write_text(out_dir / "results.md", text)
    return text


def _ppl(run: dict[str, Any], split: str) -> float:
    return float(run["summary"][split]["perplexity"])


def _ppl_over_seeds(runs: Sequence[dict[str, Any]], split: str) -> str:
    """One run's perplexity, or mean ± std over the seeds' runs with their count."""
    values = [_ppl(run, split) for run in runs]
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return stats_text(summarize(values), count=True)


def _markdown_table(heading: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """``heading``, then a markdown table with ``columns`` and ``rows`` (cells already formatted)."""
    return f"{heading}\n{markdown_table(columns, list(rows))}\n"


def _figure_2a(seeds: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for variant in ATTENTIVE:
        cells_ = [
            (_ppl_over_seeds(seeds[f"{variant}_L{w}"], "test") if f"{variant}_L{w}" in seeds else "–")
            + f" ({PAPER_FIGURE_2A[variant][i]})"
            for i, w in enumerate(WINDOWS)
        ]
        rows.append([variant, *cells_])
    return _markdown_table(
        "### Figure 2a: test perplexity by attention window size (in brackets: the paper's value, on its "
        "own Wikipedia corpus)\n",
        ["model", *(f"L={w}" for w in WINDOWS)],
        rows,
    )


def _figure_2b(seeds: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for n in NGRAMS:
        runs = seeds.get(f"{n}-gram")
        if runs:
            paper = "{} / {}".format(*PAPER_FIGURE_2B[n])
            hidden = runs[0]["model"].get("hidden_dim")
            dev, test = _ppl_over_seeds(runs, "valid"), _ppl_over_seeds(runs, "test")
            rows.append([f"{n}-gram", hidden, dev, test, paper])
    return _markdown_table(
        "### Figure 2b: N-gram RNNs (paper: dev / test on its own Wikipedia corpus)\n",
        ["model", "hidden", "dev", "test", "paper"],
        rows,
    )


def _chosen_cells(runs: dict[str, Any]) -> dict[str, str]:
    """Figure 2c's five models → the cell that stands for each: the LSTM, the 4-gram RNN, and each
    memory model at its window of lowest validation perplexity (by the window-choosing seed's
    run in ``runs``); models without a finished run are left out."""
    chosen = {}
    for model in ("lstm", *ATTENTIVE, "4-gram"):
        candidates = [name for name in runs if name == model or name.startswith(f"{model}_L")]
        if candidates:
            chosen[model] = min(candidates, key=lambda name: _ppl(runs[name], "valid"))
    return chosen


def _dev_curves(runs: dict[str, Any], seeds: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """The validation perplexity per epoch of Figure 2c's models, every seed (not a figure of the
    paper: the evidence of convergence behind Figure 2c)."""
    groups = {
        name: [read_metrics(run["dir"] / "metrics.jsonl", skip_bad_lines=True) for run in seeds[name]]
        for name in _chosen_cells(runs).values()
    }
    values = [
        r["valid/perplexity"] for runs in groups.values() for h in runs for r in h if "valid/perplexity" in r
    ]
    lowest = min(values, default=None)
    if lowest is None:
        logger.warning("validation curves skipped: no run has per-epoch validation perplexity")
        return
    plot_curves_by_group(
        groups,
        path,
        key="valid/perplexity",
        ylim=(0.97 * lowest, 1.4 * lowest),  # the converged range: the first epochs are far above it
        title="Figure 2c's models: validation perplexity per epoch",
    )


def _figure_2c(runs: dict[str, Any], seeds: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    baseline = _mean_units(seeds.get("lstm", []))
    for model, name in _chosen_cells(runs).items():
        run, chosen = runs[name], seeds[name]
        window = name.split("_L")[-1] if "_L" in name else "–"
        params = run["model"].get("parameters_without_embeddings", 0)
        paper = "{} / {}".format(*PAPER_FIGURE_2C[model])
        hidden = run["model"].get("hidden_dim")
        rows.append(
            [
                model,
                hidden,
                window,
                f"{params / 1e6:.2f}M",
                _ppl_over_seeds(chosen, "valid"),
                _ppl_over_seeds(chosen, "test"),
                "–" if model == "lstm" else _versus_lstm(baseline, chosen),
                paper,
            ]
        )
    columns = [
        "model",
        "hidden",
        "window",
        "params (no embeddings)",
        "dev",
        "test",
        "test − LSTM",
        "paper dev / test (its Wikipedia corpus)",
    ]
    table = _markdown_table(
        "### Figure 2c: models at equal parameter count, best window by validation perplexity\n",
        columns,
        rows,
    )
    if baseline is None:
        return table
    return table + (
        "\ntest − LSTM: the difference in test perplexity and its 95% interval, from a paired bootstrap over "
        f"the test set's {len(baseline.identity)} {baseline.unit}s (1,000 samples, `attnlab compare`; "
        "with several seeds, each unit's NLL is the mean over the model's seeds); * where p < 0.05.\n"
    )


def _mean_units(runs: Sequence[dict[str, Any]], unit: str | None = None) -> Units | None:
    """The per-unit test results of a model, each unit's NLL averaged over its seeds' runs: by
    ``unit``, or by document where the test set has enough documents, else by sentence; ``None``
    for runs evaluated before per-sentence results were written."""
    for candidate in [unit] if unit else ["document", "sentence"]:
        try:
            per_seed = [read_units(run["dir"], "test", candidate, None) for run in runs]
        except ConfigError:
            continue
        if not per_seed:
            return None
        first = per_seed[0]
        scores = UnitScores(np.mean([units.scores.values for units in per_seed], axis=0))
        return Units(scores, first.identity, first.unit, first.statistic, first.path, first.metric)
    return None


def _versus_lstm(baseline: Units | None, runs: Sequence[dict[str, Any]]) -> str:
    """The model's test perplexity minus the LSTM's, with its 95% bootstrap interval."""
    if baseline is None:
        return "–"
    other = _mean_units(runs, baseline.unit)
    if other is None:  # evaluated before per-sentence results were written
        return "–"
    try:
        result = compare_runs(baseline, other, samples=1000, confidence=0.95, seed=0)
    except ConfigError:
        return "–"
    star = "*" if result.p_value < 0.05 else ""
    return f"{result.difference:+.1f}{star} [{result.low:+.1f}, {result.high:+.1f}]"


def _figure_3b(seeds: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Figure 3b: the mean attention weight per window position of each memory model at its
    largest window trained, one point per seed (the plot shows their mean and spread)."""
    curves: dict[str, dict[str, list[float]]] = {}
    labels: list[str] = []
    for variant in ATTENTIVE:
        windows = {
            int(name.split("_L")[1]): [run for run in runs if run["attention"].get("test")]
            for name, runs in seeds.items()
            if name.startswith(f"{variant}_L")
        }
        windows = {w: runs for w, runs in windows.items() if w > 1 and runs}  # L = 1: always 1.0
        if not windows:
            continue
        window = max(windows)
        positions = [f"t-{window - j}" for j in range(window)]
        labels = positions if len(positions) > len(labels) else labels
        by_seed = [run["attention"]["test"]["attention_by_position"] for run in windows[window]]
        curves[f"{variant} (L={window})"] = {p: [w[j] for w in by_seed] for j, p in enumerate(positions)}
    if curves:
        plot_metric_by_test_set(
            curves,
            path,
            metric_label="mean attention weight",
            test_sets=labels,
            percent=False,
            title="Figure 3b: average attention per window position (test set)",
            x_label="window position",
        )


def _figure_3a(corpus_dir: Path, runs: dict[str, Any], steps: int = 40) -> None:
    names = sorted(
        (n for n in runs if n.startswith("key_value_predict_L")), key=lambda n: int(n.split("_L")[1])
    )
    if not names:
        return
    run = RunDirectory(runs[names[-1]]["dir"])
    best = run.checkpoint("best")
    if not best.is_file():  # e.g. a run copied without its checkpoints
        logger.warning("figure 3a skipped: %s does not exist", best)
        return
    config = run.load_config(lm.EXPERIMENT.parse_config)
    model, vocabulary = lm.model_from_checkpoint(best, torch.device("cpu"), config.model)
    document = load_split(config.data, "test", vocabulary).documents()[0][:steps]
    title = f"Figure 3a: Key-Value-Predict (L={model.window}) on a test document"
    plot_document_attention(model, vocabulary, document, corpus_dir / "figure3a_heatmap.png", title)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    add_out_argument(parser, "daniluk2017")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (minutes on a CPU)")
    parser.add_argument("--corpora", nargs="+", choices=sorted(CORPORA), default=list(CORPORA))
    parser.add_argument(
        "--data-root", help="folder holding wikitext-2/ and ptb/ (default: the configs' paths)"
    )
    parser.add_argument(
        "--lstm-hidden", type=int, default=300, help="hidden size of the LSTM that sets the budget"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        help="train only these cells, in this order (e.g. lstm key_value_predict_L5 4-gram)",
    )
    add_seeds_argument(parser, [0], help="training seeds of every chosen model (default: 0)")
    parser.add_argument("--report-only", action="store_true", help="rebuild results.md and figures from runs")


def main(args: argparse.Namespace) -> str:
    """The recipe's command: train what is missing (unless ``--report-only``); return the report."""
    out = Path(args.out)
    if args.report_only:
        return report(out, args.corpora)
    data_root = Path(args.data_root) if args.data_root else None
    return reproduce(
        out,
        quick=args.quick,
        corpora=args.corpora,
        data_root=data_root,
        lstm_hidden=args.lstm_hidden,
        overrides=args.overrides,
        models=args.models,
        seeds=args.seeds,
    )


if __name__ == "__main__":  # the same as `attnlab reproduce daniluk2017 ...`
    from attnlab.cli import main as cli_main

    sys.exit(cli_main(["reproduce", "daniluk2017", *sys.argv[1:]]))
