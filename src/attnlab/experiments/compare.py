"""``attnlab compare BASELINE RUN [RUN …]``: is each run better than the baseline on the same test
set, beyond the noise of the test set's sample? A paired bootstrap over the test set's units
(:mod:`attnlab.evaluation.significance`) on the per-unit scores that ``attnlab train`` /
``attnlab evaluate`` write next to a run's metrics:

* language models: ``eval/<test set>.sentences.csv``, the NLL of every sentence → perplexity.
  The units are sentences (``--unit sentence``) or documents (``--unit document``). Sentences of
  one document are not independent (the LSTM state and the memory carry across them), which
  makes the sentence interval somewhat too narrow; documents are independent but fewer.
* sequence-to-sequence runs (Lookup Tables, SCAN, English–French):
  ``eval/<test set>.predictions.tsv``, each example's prediction and whether it is right →
  accuracy (``--metric seq_acc``, ``seq_acc_be`` or ``seq_acc_given_length``); its target and
  prediction → corpus BLEU (``--metric bleu``, English–French). BLEU is not a mean over
  sentences: each resampled test set sums its sentences' n-gram matches and totals (n = 1…4) and
  lengths, and BLEU is computed from those sums, as sacrebleu computes corpus BLEU (the test of
  sacrebleu's ``--paired-bs``). On the whole test set it is the ``bleu`` that evaluation reported
  (``eval/<test set>.json``), which is checked.

See :mod:`attnlab.experiments.unit_scores` for the files.

The runs must have been evaluated on the same data (the same units, in the same order). The
table and ``--out`` name the metric compared in the vocabulary of :mod:`attnlab.metric_names`
(``test/<test set>/<metric>``: ``test/test/perplexity``, ``test/long3/seq_acc``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.config import ConfigError
from attnlab.evaluation.significance import PairedComparison, paired_bootstrap
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import UNIT_READERS, Units
from attnlab.io import atomic_write_json
from attnlab.metric_names import eval_name, split_eval_name
from attnlab.reporting.tables import format_table


def read_units(run_dir: str | Path, test_set: str, unit: str | None, metric: str | None) -> Units:
    """The per-unit scores of ``run_dir`` on ``test_set`` (one of its own test sets, or a file it
    was evaluated on with ``attnlab evaluate --data``)."""
    run = RunDirectory(Path(run_dir))
    for data_file in (False, True):
        for suffix, reader in UNIT_READERS.items():
            path = run.evaluation_file(test_set, suffix, data_file=data_file)
            if path.is_file():
                return reader(path, unit, metric)
    expected = " nor ".join(str(run.evaluation_file(test_set, suffix)) for suffix in UNIT_READERS)
    scored = scored_test_sets(run)
    if scored:
        raise ConfigError(
            f"{run_dir}: no per-unit scores for test set {test_set!r} (found neither {expected}); "
            f"it has them for {', '.join(scored)}: name one with --test-set"
        )
    raise ConfigError(
        f"{run_dir}: no per-unit scores for test set {test_set!r} (found neither {expected}); "
        f"`attnlab evaluate {run_dir}` writes them (language-model and sequence-to-sequence runs)"
    )


def scored_test_sets(run: RunDirectory) -> list[str]:
    """The test sets (and ``attnlab evaluate --data`` files) ``run`` has per-unit scores for, sorted."""
    names: set[str] = set()
    for data_file in (False, True):
        for suffix in UNIT_READERS:
            pattern = run.evaluation_file("*", suffix, data_file=data_file)  # where read_units looks
            names.update(path.name.removesuffix(suffix) for path in pattern.parent.glob(pattern.name))
    return sorted(names)


def compare_runs(
    baseline: Units, other: Units, *, samples: int, confidence: float, seed: int
) -> PairedComparison:
    """:func:`paired_bootstrap` of ``other`` against ``baseline``, after checking that both were
    scored on the same units."""
    if (other.statistic, other.metric) != (baseline.statistic, baseline.metric):
        raise ConfigError(f"{other.path} scores {other.metric}, {baseline.path} {baseline.metric}")
    if other.identity != baseline.identity:
        difference = _first_difference(baseline, other)
        raise ConfigError(f"{other.path} and {baseline.path} were evaluated on different data ({difference})")
    return paired_bootstrap(
        baseline.scores, other.scores, baseline.statistic, samples=samples, confidence=confidence, seed=seed
    )


def _first_difference(a: Units, b: Units) -> str:
    if len(a.identity) != len(b.identity):
        return f"{len(a.identity)} vs {len(b.identity)} units"
    index = next(i for i, (x, y) in enumerate(zip(a.identity, b.identity)) if x != y)
    return f"unit {index}: {a.identity[index]} vs {b.identity[index]}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="the baseline run, then at least one run to compare with it",
    )
    parser.add_argument(
        "--test-set",
        default=None,
        help="a test set the runs were evaluated on (default: test; Lookup Tables runs have "
        "interpolation and long1 ... long5)",
    )
    parser.add_argument(
        "--unit",
        help="what the bootstrap resamples: sentence (default) or document for language models, "
        "example for sequence-to-sequence runs",
    )
    parser.add_argument(
        "--metric",
        help="perplexity for language models; seq_acc (default), seq_acc_be, seq_acc_given_length or "
        "bleu (corpus BLEU) for sequence-to-sequence runs; or a full name test/<test set>/<metric>, "
        "e.g. test/long3/seq_acc",
    )
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap samples (default 1000)")
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="the confidence interval's level (default 0.95)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default 0)")
    parser.add_argument("--out", help="also write the comparisons to this JSON file")


def main(args: argparse.Namespace) -> str:
    """``attnlab compare``: the comparison table (the CLI prints it); with ``--out``, also JSON."""
    if len(args.runs) < 2:
        raise ConfigError("compare needs a baseline run and at least one run to compare with it")
    if args.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {args.samples}")
    if not 0.0 < args.confidence < 1.0:
        raise ConfigError(f"--confidence must be between 0 and 1, got {args.confidence}")
    test_set, metric_name = _test_set_and_metric(args.test_set, args.metric)
    baseline_dir, *others = args.runs
    baseline = read_units(baseline_dir, test_set, args.unit, metric_name)
    comparisons = {
        run_dir: compare_runs(
            baseline,
            read_units(run_dir, test_set, args.unit, metric_name),
            samples=args.samples,
            confidence=args.confidence,
            seed=args.seed,
        )
        for run_dir in others
    }
    metric = eval_name(test_set, baseline.metric)
    text = _comparison_table(baseline_dir, baseline, comparisons, args.confidence, metric)
    if args.out:
        atomic_write_json(
            args.out,
            {
                "baseline": baseline_dir,
                "test_set": test_set,
                "metric": metric,
                "unit": baseline.unit,
                "comparisons": {run_dir: result.as_dict() for run_dir, result in comparisons.items()},
            },
        )
        text += f"\n\ncomparisons: {args.out}"
    return text


def _test_set_and_metric(test_set: str | None, metric: str | None) -> tuple[str, str | None]:
    """``--test-set`` (default ``test``) and ``--metric``, which may also be a full name
    ``test/<test set>/<metric>`` (then a ``--test-set`` given must be the same)."""
    if metric is None or not metric.startswith("test/"):
        return test_set or "test", metric
    parts = split_eval_name(metric)
    if parts is None:
        raise ConfigError(f"--metric {metric}: a full name is test/<test set>/<metric>")
    if test_set is not None and test_set != parts[0]:
        raise ConfigError(f"--metric {metric} names test set {parts[0]!r}, --test-set {test_set!r}")
    return parts


def _comparison_table(
    baseline_dir: str,
    baseline: Units,
    comparisons: dict[str, PairedComparison],
    confidence: float,
    name: str,
) -> str:
    """The baseline's and each run's ``name`` (``test/<test set>/<metric>``), the difference, its
    interval, p-value and verdict."""
    interval = f"{round(100 * confidence)}% CI"
    first = next(iter(comparisons.values()))
    rows: dict[str, dict[str, object]] = {f"{baseline_dir} (baseline)": {name: first.a}}
    for run_dir, result in comparisons.items():
        rows[run_dir] = {name: result.b, **comparison_cells(result, interval)}
    units = f"{first.units} {baseline.unit}s, {first.samples} paired bootstrap samples"
    return format_table(rows, [name, "difference", interval, "p", "verdict"]) + f"\n({units})"


def comparison_cells(result: PairedComparison, interval: str) -> dict[str, object]:
    """A comparison's table cells: ``difference``, the interval (column ``interval``), ``p`` and
    ``verdict``."""
    return {
        "difference": f"{result.difference:+.2f}",
        interval: f"{result.low:+.2f} … {result.high:+.2f}",
        "p": _p_value(result),
        "verdict": _verdict(result),
    }


def _p_value(result: PairedComparison) -> str:
    """The p-value, or its bound when no resample was as extreme as the observed difference."""
    if result.p_value <= 1.0 / (result.samples + 1):
        return f"≤ {result.p_value:.2g}"
    return f"{result.p_value:.3f}"


def _verdict(result: PairedComparison) -> str:
    """Significant when ``p < 1 − confidence``: then the interval leaves out 0, as a rule."""
    if result.p_value >= 1.0 - result.confidence:
        return "no significant difference"
    return "better" if result.b_is_better else "worse"
