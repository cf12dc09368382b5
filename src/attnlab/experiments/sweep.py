"""Sweeps: a grid of config values × seeds, expanded into runs and executed on a backend.

A sweep spec is a YAML file::

    config: memory_addition            # built-in config name, or a path (relative to the spec file)
    overrides:                         # optional: key=value applied to every run
      - training.epochs=5
    grid:                              # optional: key → list of values; every combination is a cell
      training.learning_rate: [1.0e-3, 1.0e-2]
      model.pooling: [attention, mean]
    seeds: [0, 1, 2]                   # optional (default [0]): training.seed of each run

Every cell × seed is one run, trained through ``registry.train_or_resume`` into its own run
directory ``OUT/<key1>=<v1>,<key2>=<v2>/seed<N>/`` (``OUT/base/seed<N>/`` for an empty grid).
Each grid point is validated by the experiment's ``parse_config`` before anything is launched.

A run's status is read from its directory alone: *done* (``eval/summary.json`` exists), *failed*
(``error.txt`` holds the traceback of its last attempt) or *missing* (never started, or
interrupted: it resumes from its last checkpoint). Runs start seed by seed: every cell's first
seed before any cell's second (:func:`execution_order`). Starting a sweep again runs only what is
missing, so killing a sweep loses no finished run; failed runs are rerun with ``retry_failed`` or
by naming them with ``only``. :func:`sweep_progress` (``attnlab sweep SPEC --status``) tells the
states apart further — training now, interrupted, not started — with each run's epochs and training
time, and :func:`progress_totals` estimates the time left. The results are aggregated per cell
(mean, std, median, min, max over seeds) into ``OUT/<cell>/aggregate.{json,csv,md}`` and over the
whole grid into ``OUT/aggregate.{json,csv,md}``; failures are listed in ``OUT/failures.json``.

The runs are executed by :mod:`attnlab.experiments.runner` (local processes or Ray); this module
holds what is a sweep's own: the spec, its expansion into runs, the selection of what to run, and
the files of the whole grid.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from attnlab.checks import did_you_mean, did_you_mean_each
from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.experiments.aggregate import STAT_KEYS, Results, aggregate_results, write_aggregate
from attnlab.experiments.registry import experiment_for, resolve_config
from attnlab.experiments.runner import (
    DEFAULT_CONNECT_TIMEOUT_S,
    ERROR_FILE,
    SUMMARY_FILE,
    Backend,
    RunnerError,
    RunTask,
    Status,
    is_being_trained,
    run_status,
    run_tasks,
)
from attnlab.experiments.runs import RunDirectory, epochs_when_evaluated
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.metric_names import read_metrics, read_summary
from attnlab.reporting.tables import format_table, markdown_table, stats_text
from attnlab.training.convergence import TrainingEnd, training_end

logger = logging.getLogger(__name__)

SPEC_KEYS = ("config", "overrides", "grid", "seeds")
BASE_CELL = "base"
"""Cell name of a sweep with an empty grid."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._+\-]")
_MAX_PART = 120


SweepError = RunnerError
"""Bad sweep input (spec, run name, unreachable cluster): reported by the CLI as one line."""


# --------------------------------------------------------------------------------------------------
# The spec and its expansion into runs


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep spec: base config, overrides, grid (ordered as written) and seeds."""

    config: str
    overrides: tuple[str, ...] = ()
    grid: dict[str, list[Any]] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    source: str = "sweep spec"
    """Where the spec came from (a file name), used in error messages."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "overrides": list(self.overrides),
            "grid": {key: list(values) for key, values in self.grid.items()},
            "seeds": list(self.seeds),
        }


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: a grid cell and a seed, with its full config data."""

    cell: str
    seed: int
    params: dict[str, Any]
    config: dict[str, Any]

    @property
    def name(self) -> str:
        """``<cell>/seed<N>``: the run's directory relative to the sweep's output directory."""
        return f"{self.cell}/seed{self.seed}"

    def run_dir(self, out_dir: Path) -> Path:
        return Path(out_dir) / self.cell / f"seed{self.seed}"


def builtin_sweeps() -> dict[str, Path]:
    """Name → path of the example sweep specs shipped in ``attnlab/experiments/sweeps``."""
    folder = resources.files("attnlab.experiments") / "sweeps"
    if not folder.is_dir():
        return {}
    return {
        Path(entry.name).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".yaml")
    }


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec YAML file (or a built-in spec by name); a relative ``config:`` path is
    taken relative to the spec file when such a file exists there."""
    path = Path(path)
    if not path.is_file():
        sweeps = builtin_sweeps()
        if str(path) not in sweeps:
            raise SweepError(
                f"sweep spec {path} is neither a file nor a built-in sweep; built-in: {sorted(sweeps)}"
                f"{did_you_mean(str(path), sweeps)}"
            )
        path = sweeps[str(path)]
    spec = spec_from_dict(load_yaml(path), source=str(path))
    config_path = Path(spec.config)
    if not config_path.is_absolute() and (path.parent / config_path).is_file():
        spec = SweepSpec(
            str(path.parent / config_path), spec.overrides, spec.grid, spec.seeds, source=spec.source
        )
    return spec


def spec_from_dict(data: Mapping[str, Any], source: str = "sweep spec") -> SweepSpec:
    """Check the shape of a sweep spec mapping (keys, types) and build a :class:`SweepSpec`."""
    if not isinstance(data, Mapping):
        raise SweepError(f"{source}: expected a mapping with keys {list(SPEC_KEYS)}")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise SweepError(
            f"{source}: unknown key(s) {unknown}; valid keys: {list(SPEC_KEYS)}"
            f"{did_you_mean_each(unknown, SPEC_KEYS)}"
        )
    config = data.get("config")
    if not isinstance(config, str) or not config:
        raise SweepError(f"{source}: 'config' must be a built-in config name or a YAML path, got {config!r}")
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(item, str) for item in overrides):
        raise SweepError(f"{source}: 'overrides' must be a list of key=value strings, got {overrides!r}")
    grid = data.get("grid") or {}
    if not isinstance(grid, Mapping):
        raise SweepError(f"{source}: 'grid' must map config keys to lists of values, got {grid!r}")
    for key, values in grid.items():
        if not isinstance(key, str) or not key:
            raise SweepError(f"{source}: grid key {key!r} is not a dotted config key")
        if key == "training.seed":
            raise SweepError(f"{source}: grid key 'training.seed': list the seeds under 'seeds:' instead")
        if not isinstance(values, list) or not values:
            raise SweepError(
                f"{source}: grid key {key!r} must have a non-empty list of values, got {values!r}"
            )
        if len({_value_text(value) for value in values}) != len(values):
            raise SweepError(f"{source}: grid key {key!r} lists a value twice: {values!r}")
    seeds = data.get("seeds", [0])
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds)
    ):
        raise SweepError(f"{source}: 'seeds' must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise SweepError(f"{source}: 'seeds' lists a seed twice: {seeds!r}")
    return SweepSpec(
        config=config,
        overrides=tuple(overrides),
        grid={key: list(values) for key, values in grid.items()},
        seeds=tuple(seeds),
        source=source,
    )


def expand(spec: SweepSpec) -> list[SweepRun]:
    """Every grid cell × seed as a run, each validated by its experiment's ``parse_config``.

    Raises :class:`SweepError` naming the grid key when a key is not a key of the config (or a
    value does not fit it), before any run starts.
    """
    try:
        base = resolve_config(spec.config, list(spec.overrides))
        experiment_for(base).parse_config(base)
    except ConfigError as error:
        raise SweepError(f"{spec.source}: config {spec.config!r} with its overrides: {error}") from None
    experiment = experiment_for(base)
    for key, values in spec.grid.items():  # one key at a time, so that the error names the bad key
        try:
            experiment.parse_config(apply_overrides(base, [_override(key, values[0])]))
        except ConfigError as error:
            raise SweepError(
                f"{spec.source}: grid key {key!r} is not a valid key of config {spec.config!r}: {error}"
            ) from None
    runs: list[SweepRun] = []
    cells: dict[str, dict[str, Any]] = {}
    for combination in itertools.product(*spec.grid.values()):
        params = dict(zip(spec.grid, combination))
        cell = cell_name(params)
        if cell in cells:
            raise SweepError(
                f"{spec.source}: grid points {cells[cell]} and {params} get the same directory name {cell!r}"
            )
        cells[cell] = params
        data = apply_overrides(base, [_override(key, value) for key, value in params.items()])
        try:
            experiment.parse_config(data)
        except ConfigError as error:
            raise SweepError(f"{spec.source}: grid point {params}: {error}") from None
        for seed in spec.seeds:
            seeded = apply_overrides(data, [f"training.seed={seed}"])
            runs.append(SweepRun(cell=cell, seed=seed, params=params, config=seeded))
    return runs


def cell_name(params: Mapping[str, Any]) -> str:
    """``key1=v1,key2=v2`` (a stable, file-system-safe directory name); ``base`` for no params."""
    if not params:
        return BASE_CELL
    return ",".join(f"{_safe(key)}={_safe(_value_text(value))}" for key, value in params.items())


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)) or value is None:
        return yaml.safe_dump(value).strip().removesuffix("...").strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _safe(text: str) -> str:
    cleaned = _UNSAFE.sub("_", text)
    if len(cleaned) > _MAX_PART:
        import hashlib

        cleaned = cleaned[: _MAX_PART - 9] + "~" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return cleaned


def _override(key: str, value: Any) -> str:
    """``key=<value as JSON>``: JSON is YAML, so strings stay strings ("true" is not a bool)."""
    return f"{key}={json.dumps(value)}"


# --------------------------------------------------------------------------------------------------
# The sweep


@dataclass
class SweepReport:
    """Status of every run after a sweep, and the failures with their error line. ``selected``
    holds the runs this sweep was asked for (all of them, or those of ``only``): ``ok`` is about
    them, so a sweep run a block at a time succeeds when its block is done. ``busy`` holds the runs
    left missing because another process was training them (two sweeps on one ``--out``)."""

    out_dir: Path
    statuses: dict[str, Status]
    executed: list[str]
    failures: dict[str, str]
    selected: list[str]
    busy: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(self.statuses[name] == "done" for name in self.selected)

    def counts(self, selected_only: bool = False) -> dict[str, int]:
        names = self.selected if selected_only else list(self.statuses)
        return {
            key: sum(self.statuses[name] == key for name in names) for key in ("done", "failed", "missing")
        }


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    backend: Backend,
    *,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    seeds: Iterable[int] | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepReport:
    """Run what is missing of ``spec`` (and failed runs if ``retry_failed``; ``only``: just those
    runs, failed or not yet done; ``seeds``: just the runs of those seeds, every cell's), then
    aggregate everything that is done. Progress lines go to ``log`` (default: this module's logger)."""
    log = log or logger.info
    out_dir = Path(out_dir)
    runs = expand(spec)
    by_name = {run.name: run for run in runs}
    selected = _select(by_name, only, seeds, spec.seeds)
    for run in runs:
        _check_same_config(run, run.run_dir(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "sweep.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))

    statuses = {name: run_status(run.run_dir(out_dir)) for name, run in by_name.items()}
    wanted = {"missing", "failed"} if (retry_failed or only) else {"missing"}
    todo = execution_order([by_name[name] for name in selected if statuses[name] in wanted], spec.seeds)
    skipped_failed = [name for name in selected if statuses[name] == "failed" and name not in todo]
    counts = {key: sum(statuses[name] == key for name in selected) for key in ("done", "failed", "missing")}
    log(
        f"sweep {spec.source}: {len(selected)} runs ({counts['done']} done, {counts['failed']} failed, "
        f"{counts['missing']} missing); running {len(todo)} on the {backend.name} backend"
    )
    for name in skipped_failed:
        log(f"  skipping failed run {name} (rerun it with --retry-failed or --only {name})")

    tasks = [RunTask(name, by_name[name].config, str(by_name[name].run_dir(out_dir))) for name in todo]
    outcomes = run_tasks(tasks, backend, log)
    executed = [outcome.name for outcome in outcomes]

    statuses = {name: run_status(run.run_dir(out_dir)) for name, run in by_name.items()}
    busy = [
        outcome.name
        for outcome in outcomes
        if outcome.status == "busy" and statuses[outcome.name] == "missing"
    ]
    failures = {
        name: _error_line(by_name[name].run_dir(out_dir))
        for name, status in statuses.items()
        if status == "failed"
    }
    _write_failures(out_dir, failures, by_name)
    write_sweep_aggregate(spec, runs, out_dir)
    return SweepReport(out_dir, statuses, executed, failures, selected, busy)


def execution_order(runs: Sequence[SweepRun], seeds: Sequence[int]) -> list[str]:
    """The names of ``runs`` in the order a sweep starts them: seed by seed in the order of the
    sweep's ``seeds`` (every cell's first seed, in grid order, before any cell's second), so that a
    campaign stopped halfway leaves every row of its table measured once rather than some rows at
    every seed and others at none. The rank is the seed's place in ``seeds``, not in ``runs``: a
    sweep started again, whose first cells have their first seeds done, still trains the other
    cells' first seeds before anything else."""
    seed_rank = {seed: rank for rank, seed in enumerate(seeds)}
    return [run.name for run in sorted(runs, key=lambda run: seed_rank[run.seed])]


def _select(
    by_name: Mapping[str, SweepRun],
    only: Iterable[str] | None,
    seeds: Iterable[int] | None,
    spec_seeds: Sequence[int],
) -> list[str]:
    """The runs asked for: those of ``only`` (runs or cells; all without it), of ``seeds`` only if
    given (each one of the sweep's ``spec_seeds``)."""
    selected = list(by_name) if only is None else _named(by_name, only)
    if seeds is None:
        return selected
    wanted = list(seeds)
    for seed in wanted:
        if seed not in spec_seeds:
            raise SweepError(
                f"--seeds {seed}: not a seed of the sweep; its seeds: {', '.join(map(str, spec_seeds))}"
            )
    chosen = [name for name in selected if by_name[name].seed in wanted]
    if not chosen:  # --only CELL/seed0 --seeds 1
        raise SweepError(
            f"--only {' '.join(only or [])} --seeds {' '.join(map(str, wanted))}: no run of the sweep is both"
        )
    return chosen


def _named(by_name: Mapping[str, SweepRun], only: Iterable[str]) -> list[str]:
    selected: list[str] = []
    for name in only:
        name = name.strip("/")
        matches = [run for run in by_name if run == name or run.startswith(name + "/")]
        if not matches:
            raise SweepError(
                f"--only {name!r}: no such run or cell in the sweep; runs: {', '.join(list(by_name)[:8])}"
                + (", ..." if len(by_name) > 8 else "")
            )
        selected.extend(match for match in matches if match not in selected)
    return selected


DISPLAY_KEYS = ("training.progress", "training.tensorboard")
"""Config keys that change only what training shows, not what it computes: a run may differ from
its sweep in them (e.g. a pilot trained with ``training.progress=false`` moved into its sweep)."""


def _check_same_config(run: SweepRun, run_dir: Path) -> None:
    """Refuse to mix results: an existing run directory must hold the same resolved config, but for
    :data:`DISPLAY_KEYS`."""
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        return
    experiment = experiment_for(run.config)
    from attnlab.config import to_dict

    def resolved(config: dict[str, Any]) -> Any:
        return yaml.safe_load(yaml.safe_dump(to_dict(experiment.parse_config(config)), sort_keys=False))

    expected = resolved(run.config)
    found = load_yaml(config_file)
    try:  # a run written before a key was added holds that key's default
        found = resolved(found)
    except ConfigError:
        pass  # keys since removed or renamed: compared as written, so the difference is named
    for key in DISPLAY_KEYS:
        for config in (expected, found):
            section, _, name = key.partition(".")
            if isinstance(config, dict) and isinstance(config.get(section), dict):
                config[section].pop(name, None)
    difference = _first_difference(expected, found)
    if difference is not None:
        key, new, old = difference
        raise SweepError(
            f"{run_dir} holds a run with another config ({key}: {old!r} there, {new!r} in this sweep); "
            "choose another --out or remove that run"
        )


def _first_difference(new: Any, old: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(new, dict) and isinstance(old, dict):
        for key in list(dict.fromkeys([*new, *old])):
            found = _first_difference(new.get(key), old.get(key), f"{prefix}.{key}" if prefix else str(key))
            if found is not None:
                return found
        return None
    if new == old or (isinstance(new, str) and isinstance(old, str) and _same_path(new, old)):
        return None
    return (prefix or "config", new, old)


def _same_path(new: str, old: str) -> bool:
    """A relative path in the sweep and the absolute path a run stored for it (runs store data
    paths resolved, so that they evaluate from any directory)."""
    return os.path.isabs(old) and not os.path.isabs(new) and Path(new).resolve() == Path(old).resolve()


def _error_line(run_dir: Path) -> str:
    lines = [line for line in (run_dir / ERROR_FILE).read_text().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(empty error.txt)"


def _write_failures(out_dir: Path, failures: Mapping[str, str], by_name: Mapping[str, SweepRun]) -> None:
    path = out_dir / "failures.json"
    if not failures:
        path.unlink(missing_ok=True)
        return
    atomic_write_json(
        path,
        [
            {"run": name, "error": error, "traceback": str(by_name[name].run_dir(out_dir) / ERROR_FILE)}
            for name, error in failures.items()
        ],
    )


# --------------------------------------------------------------------------------------------------
# Aggregation


def collect_results(runs: Sequence[SweepRun], out_dir: Path) -> dict[str, dict[int, Results]]:
    """Cell → seed → results, for the finished runs only."""
    collected: dict[str, dict[int, Results]] = {}
    for run in runs:
        summary = run.run_dir(out_dir) / SUMMARY_FILE
        if summary.is_file():
            collected.setdefault(run.cell, {})[run.seed] = read_summary(summary)
    return collected


def write_sweep_aggregate(spec: SweepSpec, runs: Sequence[SweepRun], out_dir: Path) -> dict[str, Any]:
    """Per cell ``OUT/<cell>/aggregate.*`` and for the grid ``OUT/aggregate.{json,csv,md}``."""
    out_dir = Path(out_dir)
    collected = collect_results(runs, out_dir)
    params = {run.cell: run.params for run in runs}
    run_dirs = {(run.cell, run.seed): run.run_dir(out_dir) for run in runs}
    cells: dict[str, Any] = {}
    for cell in dict.fromkeys(run.cell for run in runs):
        if cell not in collected:
            continue
        seeds = sorted(collected[cell])
        aggregate = aggregate_results([collected[cell][seed] for seed in seeds])
        write_aggregate(aggregate, out_dir / cell, seeds=seeds)
        ends = [run_training_end(run_dirs[cell, seed]) for seed in seeds]
        cells[cell] = {
            "params": params[cell],
            "seeds": seeds,
            "results": aggregate,
            "training": [None if end is None else end.to_dict() for end in ends],
        }
    summary = {"sweep": spec.to_dict(), "cells": cells}
    atomic_write_json(out_dir / "aggregate.json", summary)
    atomic_write_text(out_dir / "aggregate.csv", _aggregate_csv(spec, cells))
    atomic_write_text(out_dir / "aggregate.md", with_unconverged(sweep_markdown(cells), cells) + "\n")
    return summary


def run_training_end(run_dir: Path) -> TrainingEnd | None:
    """How the run in ``run_dir`` ended the training its evaluation measured
    (:func:`~attnlab.training.convergence.training_end` from its ``config.yaml`` and
    ``metrics.jsonl``): a run trained on since it was evaluated (resumed with a larger
    ``training.epochs``, or between budget stages) is judged at the epoch its evaluation records,
    which then was its cap. None when they cannot say (no epoch, or a config or history this version
    cannot read)."""
    run = RunDirectory(run_dir)
    if not run.config_file.is_file():
        return None
    try:
        config = load_yaml(run.config_file)
        training = experiment_for(config).parse_config(config).training
        history = read_metrics(run.metrics_file)
    except (ConfigError, ValueError, TypeError, KeyError, OSError):
        return None
    epochs = training.epochs
    evaluated = epochs_when_evaluated(run)
    if evaluated is not None and evaluated < len(history):
        history, epochs = history[:evaluated], evaluated
    return training_end(history, epochs, training.patience, training.stop_targets())


def unconverged_runs(cells: Mapping[str, Any]) -> list[str]:
    """``CELL/seedN (epoch cap E, best epoch B)`` for each run of ``cells`` (an aggregate's) that the
    epoch cap ended before it converged by its own rule
    (:attr:`~attnlab.training.convergence.TrainingEnd.unconverged`)."""
    found = []
    for cell, entry in cells.items():
        for seed, end in zip(entry["seeds"], entry.get("training", [])):
            if end is not None and end.get("unconverged"):
                found.append(f"{cell}/seed{seed} (epoch cap {end['cap']}, best epoch {end['best_epoch']})")
    return found


TRAINING_END_COLUMNS = ("runs", "stop target", "patience", "epoch cap", "unconverged", "unfinished", "unread")
"""The columns of :func:`training_end_counts`: the finished runs, how many each rule ended (the
:data:`~attnlab.training.convergence.EndedBy` values), how many of the cap's had not converged by
their own rule, and those whose end could not be read."""


def training_end_counts(cells: Mapping[str, Any]) -> dict[str, int]:
    """How the finished runs of ``cells`` (an aggregate's) ended, counted by
    :data:`TRAINING_END_COLUMNS` (an aggregate written before runs said how they ended: unread)."""
    counts = dict.fromkeys(TRAINING_END_COLUMNS, 0)
    for entry in cells.values():
        ends = entry.get("training") or [None] * len(entry["seeds"])
        for end in ends:
            counts["runs"] += 1
            if end is None or end.get("ended_by") not in counts:
                counts["unread"] += 1
                continue
            counts[end["ended_by"]] += 1
            counts["unconverged"] += bool(end.get("unconverged"))
    return counts


def with_unconverged(text: str, cells: Mapping[str, Any]) -> str:
    """``text`` (a table of ``cells``, an aggregate's) and below it a paragraph naming
    :func:`unconverged_runs`, where there are any."""
    runs = unconverged_runs(cells)
    if not runs:
        return text
    return (
        f"{text}\n\nEnded by the epoch cap before converging (lowest validation loss fewer than "
        "training.patience epochs old, or without patience at the last epoch; their numbers may be of "
        f"models still learning: resume them with a larger training.epochs): {'; '.join(runs)}"
    )


def _aggregate_csv(spec: SweepSpec, cells: Mapping[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    keys = list(spec.grid)
    writer.writerow(["cell", *keys, "test_set", "metric", *STAT_KEYS])
    for cell, entry in cells.items():
        values = [_value_text(entry["params"][key]) for key in keys]
        for test_set, metrics in entry["results"].items():
            for metric, stats in metrics.items():
                writer.writerow([cell, *values, test_set, metric, *(stats[key] for key in STAT_KEYS)])
    return buffer.getvalue()


def sweep_markdown(cells: Mapping[str, Any]) -> str:
    """One row per cell × test set, one column per metric (mean ± std over seeds), and n."""
    metrics = list(
        dict.fromkeys(
            metric
            for entry in cells.values()
            for test_metrics in entry["results"].values()
            for metric in test_metrics
            if metric != "examples"
        )
    )
    rows: dict[str, dict[str, str]] = {}
    for cell, entry in cells.items():
        for test_set, values in entry["results"].items():
            row = {metric: stats_text(values[metric]) for metric in metrics if metric in values}
            row["n"] = str(len(entry["seeds"]))
            rows[f"{cell} · {test_set}"] = row
    if not rows:
        return "(no finished runs)"
    return format_table(rows, [*metrics, "n"], markdown=True)


def metric_table(cells: Mapping[str, Any], metric: str) -> str:
    """One metric as a grid: one row per cell (its grid values, ``·``-joined), one column per test
    set, ``mean ± std (n=k)`` over seeds. An unknown ``metric`` is a :class:`SweepError` listing the
    metrics there are."""
    found = sorted(
        {name for entry in cells.values() for values in entry["results"].values() for name in values}
    )
    if metric not in found:
        raise SweepError(f"--metric {metric!r}: the finished runs have the metrics {', '.join(found)}")
    test_sets = list(dict.fromkeys(test_set for entry in cells.values() for test_set in entry["results"]))
    rows: dict[str, dict[str, str]] = {}
    for entry in cells.values():
        label = " · ".join(_value_text(value) for value in entry["params"].values())
        rows[label] = {
            test_set: stats_text(values[metric], count=True)
            for test_set, values in entry["results"].items()
            if metric in values
        }
    keys = " · ".join(next(iter(cells.values()))["params"])
    return f"{metric}, mean ± std over seeds; rows: {keys}\n\n" + format_table(rows, test_sets, markdown=True)


def write_metric_table(cells: Mapping[str, Any], metric: str, out_dir: str | Path) -> str:
    """:func:`metric_table`, also written to ``OUT/aggregate_<metric>.md``; returns it."""
    table = metric_table(cells, metric)
    atomic_write_text(Path(out_dir) / f"aggregate_{metric}.md", table + "\n")
    return table


def report_only(spec: SweepSpec, out_dir: str | Path) -> dict[str, Any]:
    """Rebuild the aggregates from the run directories alone; an error if none finished."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise SweepError(f"runs directory {out_dir} does not exist")
    runs = expand(spec)
    if not collect_results(runs, out_dir):
        raise SweepError(f"runs directory {out_dir} holds no finished run of {spec.source}")
    return write_sweep_aggregate(spec, runs, out_dir)


# --------------------------------------------------------------------------------------------------
# Progress: what a sweep has done and what is left (``attnlab sweep SPEC --status``)

RunState = Literal["done", "training", "interrupted", "failed", "not started"]
RUN_STATES: tuple[RunState, ...] = ("done", "training", "interrupted", "failed", "not started")


@dataclass(frozen=True)
class RunProgress:
    """A run's state, and its finished epochs with their training time (``metrics.jsonl``).

    ``training``: a process holds its lock now; ``interrupted``: it trained some epochs (or left a
    ``last.pt``) and nothing trains it now, so the next sweep resumes it; ``failed``: its last
    attempt raised (``error.txt``); ``done``: it was evaluated."""

    name: str
    cell: str
    state: RunState
    epochs: int
    seconds: float


def sweep_progress(
    spec: SweepSpec,
    out_dir: str | Path,
    only: Iterable[str] | None = None,
    seeds: Iterable[int] | None = None,
) -> list[RunProgress]:
    """Every run of ``spec`` (or of ``only`` and ``seeds``) under ``out_dir``, in the sweep's order,
    read from its directory alone; nothing is written."""
    by_name = {run.name: run for run in expand(spec)}
    return [_run_progress(by_name[name], Path(out_dir)) for name in _select(by_name, only, seeds, spec.seeds)]


def _run_progress(run: SweepRun, out_dir: Path) -> RunProgress:
    run_dir = RunDirectory(run.run_dir(out_dir))
    epochs, seconds = _trained_epochs(run_dir.metrics_file)
    status = run_status(run_dir.path)
    state: RunState
    if status == "done":
        state = "done"
    elif is_being_trained(run_dir.path):
        state = "training"
    elif status == "failed":
        state = "failed"
    elif epochs or run_dir.checkpoint("last").is_file():
        state = "interrupted"
    else:
        state = "not started"
    return RunProgress(run.name, run.cell, state, epochs, seconds)


def _trained_epochs(metrics_file: Path) -> tuple[int, float]:
    """The number of epoch records in ``metrics_file`` (:func:`read_metrics`) and the sum of their
    ``seconds``."""
    records = read_metrics(metrics_file)
    try:
        return len(records), sum(float(record.get("seconds", 0.0)) for record in records)
    except (TypeError, ValueError):
        raise SweepError(f"{metrics_file}: an epoch record whose 'seconds' is not a number") from None


def progress_markdown(progress: Sequence[RunProgress], reference: Sequence[RunProgress] | None = None) -> str:
    """A table of the runs (state, epochs, training time) and :func:`progress_totals`."""
    rows = [[run.name, run.state, str(run.epochs), _hours(run.seconds)] for run in progress]
    table = markdown_table(["run", "state", "epochs", "training time"], rows)
    return f"{table}\n\n{progress_totals(progress, reference)}"


def progress_totals(progress: Sequence[RunProgress], reference: Sequence[RunProgress] | None = None) -> str:
    """One line: the runs in each state, the training time so far, and the time left: each run not
    done (failed runs not counted) takes the mean training time of its cell's done seeds, or of all
    done runs where its cell has none, less what it has trained already. The done runs are those of
    ``reference`` where given (the whole sweep, when ``progress`` is part of it: ``--seeds 1`` is
    estimated from the cells' done seed 0)."""
    counts = {state: sum(run.state == state for run in progress) for state in RUN_STATES}
    spent = sum(run.seconds for run in progress)
    totals = f"{len(progress)} runs: " + ", ".join(f"{counts[state]} {state}" for state in RUN_STATES)
    totals += f"; {_hours(spent)} of training so far."
    done = [run for run in (progress if reference is None else reference) if run.state == "done"]
    open_runs = [run for run in progress if run.state in ("training", "interrupted", "not started")]
    if not open_runs:
        return totals
    if not done:
        return f"{totals} No run is done yet, so no estimate of the time left."
    overall = sum(run.seconds for run in done) / len(done)
    by_cell: dict[str, list[float]] = {}
    for run in done:
        by_cell.setdefault(run.cell, []).append(run.seconds)
    left = 0.0
    for run in open_runs:
        cell = by_cell.get(run.cell)
        left += max(0.0, (sum(cell) / len(cell) if cell else overall) - run.seconds)
    return (
        f"{totals} The {len(open_runs)} runs not done need about {_hours(left)} of one process more "
        f"(each at its cell's done seeds' mean, else at all done runs' mean: {_hours(overall)})."
    )


def _hours(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


# --------------------------------------------------------------------------------------------------
# Command line: ``attnlab sweep SPEC``


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec", help="sweep spec YAML (config, overrides, grid, seeds), or a built-in sweep's name"
    )
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument(
        "--jobs",
        type=int,
        help="local: worker processes (default 1: in this process); ray: CPUs of a local instance",
    )
    parser.add_argument(
        "--address", help="ray: address host:port of a running Ray cluster (default: start one)"
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        help=f"ray with --address: seconds to wait for the cluster (default {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    parser.add_argument("--out", help="output directory (default runs/<spec name>)")
    parser.add_argument("--retry-failed", action="store_true", help="rerun runs whose last attempt failed")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="RUN",
        help="run only these runs (CELL/seedN) or cells (CELL), failed or not",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        metavar="N",
        help="run only these seeds of every cell (or of the --only cells): e.g. every cell's first seed "
        "before another sweep, the rest later",
    )
    parser.add_argument("--report-only", action="store_true", help="only rebuild aggregate.* from the runs")
    parser.add_argument(
        "--status",
        action="store_true",
        help="print each run's state (done, training, interrupted, failed, not started), its epochs and "
        "training time, and the time left (at the mean of the cell's done seeds); trains and writes nothing",
    )
    parser.add_argument(
        "--metric",
        help="print this metric as a grid (cells x test sets) instead of every metric, and write it to "
        "aggregate_<metric>.md (e.g. seq_acc)",
    )


if __name__ == "__main__":  # the same as `attnlab sweep SPEC ...`
    from attnlab.cli import main as cli_main

    sys.exit(cli_main(["sweep", *sys.argv[1:]]))
