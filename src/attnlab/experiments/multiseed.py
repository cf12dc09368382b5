"""Run one config over several seeds and report mean ± std per test set and metric."""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError, apply_overrides
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.logs import show_logs_in_worker
from attnlab.metric_names import read_summary
from attnlab.reporting.tables import format_table, stats_text

Results = dict[str, dict[str, float]]
"""Test set → metric → value, as written to ``eval/summary.json``."""


def run_seeds(
    config_data: dict[str, Any],
    seeds: Sequence[int],
    out_dir: str | Path,
    train: Callable[[dict[str, Any], Path], Results],
) -> dict[str, dict[str, dict[str, float]]]:
    """Train ``config_data`` once per seed into ``out_dir/seed<N>`` and aggregate the results.

    Seeds whose run already finished (``eval/summary.json`` exists) are not trained again, so an
    interrupted multi-seed run continues where it stopped.
    """
    out_dir = Path(out_dir)
    per_seed: dict[int, Results] = {}
    for seed in seeds:
        run_dir = out_dir / f"seed{seed}"
        summary = run_dir / "eval" / "summary.json"
        if summary.is_file():
            per_seed[seed] = read_summary(summary)
            continue
        seeded = apply_overrides(config_data, [f"training.seed={seed}"])
        per_seed[seed] = train(seeded, run_dir)
    aggregate = aggregate_results(list(per_seed.values()))
    write_aggregate(aggregate, out_dir, seeds=list(seeds))
    return aggregate


def run_parallel(
    function: Callable[..., Any],
    arguments: Sequence[tuple],
    jobs: int = 1,
    *,
    backend: str = "local",
    address: str | None = None,
) -> None:
    """Call ``function(*argument)`` for each argument tuple (``function`` must be a module-level
    function, so that worker processes can import it).

    ``backend="local"``: in this process (``jobs == 1``) or in ``jobs`` single-threaded worker
    processes (runs are small; one thread each uses the cores best). ``backend="ray"``: one
    single-threaded Ray task per call, on a local Ray instance with ``jobs`` CPUs or on the running
    cluster at ``address`` (see :class:`attnlab.experiments.sweep.RayBackend`). Every call runs to
    its end; then the first failure, if any, is raised.
    """
    if backend == "ray":
        from attnlab.experiments.sweep import RayBackend

        RayBackend(address=address, num_cpus=jobs if jobs > 1 else None).call_all(function, arguments)
        return
    if backend != "local":
        raise ConfigError(f"unknown backend {backend!r}; choose 'local' or 'ray'")
    if address:
        raise ConfigError("--address applies to --backend ray only")
    if jobs <= 1:
        for argument in arguments:
            function(*argument)
        return
    with ProcessPoolExecutor(max_workers=jobs, initializer=single_thread) as pool:
        futures = [pool.submit(function, *argument) for argument in arguments]
        wait(futures)
        for future in futures:
            future.result()


def single_thread() -> None:
    """Set this worker process up: one CPU thread, freed memory kept and log records shown on
    stderr, as the CLI does."""
    os.environ["OMP_NUM_THREADS"] = "1"
    show_logs_in_worker()
    import torch

    from attnlab.training.allocator import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()


def add_parallel_arguments(parser: argparse.ArgumentParser, what: str = "runs") -> None:
    """``--jobs``, ``--backend`` and ``--address`` of a recipe (see :func:`run_parallel`)."""
    parser.add_argument("--jobs", type=int, default=1, help=f"{what} trained in parallel (one thread each)")
    parser.add_argument("--backend", choices=["local", "ray"], default="local", help="local processes or Ray")
    parser.add_argument(
        "--address", default=None, help="ray: host:port of a running cluster (default: start one)"
    )


def parallel_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`run_parallel` from :func:`add_parallel_arguments`' options."""
    return {"jobs": args.jobs, "backend": args.backend, "address": args.address}


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
    atomic_write_json(out_dir / "aggregate.json", {"seeds": seeds, "results": aggregate})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["test_set", "metric", "mean", "std", "median", "min", "max", "n"])
    for test_set, metrics in aggregate.items():
        for metric, stats in metrics.items():
            writer.writerow(
                [test_set, metric, *(stats[key] for key in ("mean", "std", "median", "min", "max", "n"))]
            )
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
