"""Aggregation over seeds, in one place: mean ± std (and median, min, max, n) per test set and metric,
and the ``aggregate.{json,csv,md}`` files of a group of seeds (``attnlab multiseed``, each sweep
cell, each recipe cell)."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.reporting.tables import format_table, stats_text

Results = dict[str, dict[str, float]]
"""Test set → metric → value, as written to ``eval/summary.json``."""

STAT_KEYS = ("mean", "std", "median", "min", "max", "n")
"""The statistics of :func:`summarize`, in the order of the CSV columns."""


def aggregate_results(results: Sequence[Results]) -> dict[str, dict[str, dict[str, float]]]:
    """Test set → metric → {mean, std, median, min, max, n} over runs (sample std; 0 for one run)."""
    aggregate: dict[str, dict[str, dict[str, float]]] = {}
    for test_set in _ordered_keys(results):
        metrics = _ordered_keys([result[test_set] for result in results if test_set in result])
        aggregate[test_set] = {}
        for metric in metrics:
            values = [result[test_set][metric] for result in results if metric in result.get(test_set, {})]
            aggregate[test_set][metric] = summarize(values)
    return aggregate


def summarize(values: Sequence[float]) -> dict[str, float]:
    """The :data:`STAT_KEYS` of ``values`` (sample std; 0 for one value)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": float(len(values)),
    }


def write_aggregate(
    aggregate: Mapping[str, Mapping[str, Mapping[str, float]]], out_dir: Path, *, seeds: list[int]
) -> None:
    """``out_dir/aggregate.json`` (seeds and statistics), ``aggregate.csv`` and ``aggregate.md``."""
    atomic_write_json(out_dir / "aggregate.json", {"seeds": seeds, "results": aggregate})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["test_set", "metric", *STAT_KEYS])
    for test_set, metrics in aggregate.items():
        for metric, stats in metrics.items():
            writer.writerow([test_set, metric, *(stats[key] for key in STAT_KEYS)])
    atomic_write_text(out_dir / "aggregate.csv", buffer.getvalue())
    atomic_write_text(out_dir / "aggregate.md", markdown_summary(aggregate) + "\n")


def markdown_summary(
    aggregate: Mapping[str, Mapping[str, Mapping[str, float]]],
    metrics: Sequence[str] | None = None,
) -> str:
    """Rows = test sets, columns = metrics (default: every metric but the example count)."""
    if metrics is None:
        metrics = [m for m in _ordered_keys(list(aggregate.values())) if m != "examples"]
    rows = {
        test_set: {metric: stats_text(values[metric]) for metric in metrics if metric in values}
        for test_set, values in aggregate.items()
    }
    return format_table(rows, list(metrics), markdown=True)


def _ordered_keys(mappings: Sequence[Mapping[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for mapping in mappings:
        keys.update(dict.fromkeys(mapping))
    return list(keys)
