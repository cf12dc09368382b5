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
interrupted: it resumes from its last checkpoint). Starting a sweep again runs only what is
missing, so killing a sweep loses no finished run; failed runs are rerun with ``retry_failed`` or
by naming them with ``only``. The results are aggregated per cell (mean, std, median, min, max over
seeds) into ``OUT/<cell>/aggregate.{json,csv,md}`` and over the whole grid into
``OUT/aggregate.{json,csv,md}``; failures are listed in ``OUT/failures.json``.

Backends: :class:`LocalBackend` (in this process when ``jobs == 1``, else a pool of single-threaded
worker processes) and :class:`RayBackend` (a local Ray instance on the available cores, or an
existing cluster given its address; needs ``pip install 'attnlab[ray]'``). On a multi-node Ray
cluster, ``OUT`` must be on a file system every node sees at the same path, and attnlab must be
installed on every node.
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
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml

from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.experiments.multiseed import aggregate_results, write_aggregate
from attnlab.experiments.multiseed import single_thread as use_one_thread
from attnlab.experiments.registry import experiment_for, resolve_config, train_or_resume
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.metric_names import read_summary
from attnlab.reporting.tables import format_table, stats_text

logger = logging.getLogger(__name__)

Status = Literal["done", "failed", "missing"]
Results = dict[str, dict[str, float]]

SPEC_KEYS = ("config", "overrides", "grid", "seeds")
BASE_CELL = "base"
"""Cell name of a sweep with an empty grid."""
ERROR_FILE = "error.txt"
SUMMARY_FILE = Path("eval") / "summary.json"
DEFAULT_CONNECT_TIMEOUT_S = 5.0

_UNSAFE = re.compile(r"[^A-Za-z0-9._+\-]")
_MAX_PART = 120


class SweepError(ConfigError):
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
        raise SweepError(f"{source}: unknown key(s) {unknown}; valid keys: {list(SPEC_KEYS)}")
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
# Run status and execution of one run


def run_status(run_dir: Path) -> Status:
    """``done`` when the run finished, ``failed`` when its last attempt raised, else ``missing``."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY_FILE).is_file():
        return "done"
    if (run_dir / ERROR_FILE).is_file():
        return "failed"
    return "missing"


@dataclass(frozen=True)
class RunTask:
    """What a backend executes: a run's name, config data and directory."""

    name: str
    config: dict[str, Any]
    run_dir: str


@dataclass(frozen=True)
class RunOutcome:
    name: str
    status: Literal["done", "failed"]
    seconds: float
    error: str | None = None
    """The last line of the error, when the run failed (the traceback is in ``error.txt``)."""


def execute_run(task: RunTask, single_thread: bool = False) -> RunOutcome:
    """Train (or resume) one run; an exception is recorded in ``run_dir/error.txt``, not raised."""
    if single_thread:
        use_one_thread()
    run_dir = Path(task.run_dir)
    error_file = run_dir / ERROR_FILE
    start = time.perf_counter()
    try:
        train_or_resume(task.config, run_dir)
    except Exception as error:  # a failed run is recorded and reported; the sweep goes on
        atomic_write_text(error_file, traceback.format_exc())
        return RunOutcome(task.name, "failed", time.perf_counter() - start, _one_line(error))
    error_file.unlink(missing_ok=True)
    return RunOutcome(task.name, "done", time.perf_counter() - start)


def _record_crash(task: RunTask, error: BaseException) -> RunOutcome:
    """A worker died without returning (killed, out of memory): record it as a failure."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    atomic_write_text(Path(task.run_dir) / ERROR_FILE, f"the worker running this run died:\n{text}")
    return RunOutcome(task.name, "failed", 0.0, f"worker died: {_one_line(error)}")


def _one_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def _call_single_threaded(function: Callable[..., Any], argument: tuple) -> Any:
    use_one_thread()
    return function(*argument)


# --------------------------------------------------------------------------------------------------
# Backends


class SweepBackend(Protocol):
    """Executes run tasks, calling ``on_result`` in this process as each one finishes."""

    name: str

    def run(self, tasks: Sequence[RunTask], on_result: Callable[[RunOutcome], None]) -> None: ...


class LocalBackend:
    """Runs in this process one after the other (``jobs == 1``), or in ``jobs`` worker processes."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise SweepError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs

    def run(self, tasks: Sequence[RunTask], on_result: Callable[[RunOutcome], None]) -> None:
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                on_result(execute_run(task))
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(tasks)), initializer=use_one_thread) as pool:
            pending = {pool.submit(execute_run, task): task for task in tasks}
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        task = pending.pop(future)
                        error = future.exception()
                        on_result(_record_crash(task, error) if error is not None else future.result())
            except BaseException:
                for future in pending:
                    future.cancel()
                raise


class RayBackend:
    """Runs each task as a one-CPU Ray task: on a local Ray instance (``address=None``, using
    ``num_cpus`` cores, default all) or on the running cluster at ``address``.

    An address that cannot be reached within ``connect_timeout_s`` is a :class:`SweepError`. A Ray
    instance already initialised in this process (e.g. by a test) is used as it is and left running.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        if num_cpus is not None and num_cpus < 1:
            raise SweepError(f"--jobs must be at least 1, got {num_cpus}")
        self.address = address
        self.num_cpus = num_cpus
        self.connect_timeout_s = connect_timeout_s

    def run(self, tasks: Sequence[RunTask], on_result: Callable[[RunOutcome], None]) -> None:
        if not tasks:  # only check the address: starting Ray for nothing takes seconds
            if self.address not in (None, "", "local", "auto"):
                check_reachable(self.address, self.connect_timeout_s)
            return
        ray = self._connect()
        started_here = self._started_here
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(execute_run)
            pending = {remote.remote(task, True): task for task in tasks}
            try:
                while pending:
                    finished, _ = ray.wait(list(pending), num_returns=1)
                    for ref in finished:
                        task = pending.pop(ref)
                        try:
                            outcome = ray.get(ref)
                        except Exception as error:  # the worker died (RayTaskError, WorkerCrashedError)
                            outcome = _record_crash(task, error)
                        on_result(outcome)
            except BaseException:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        finally:
            if started_here:
                ray.shutdown()

    def call_all(self, function: Callable[..., Any], arguments: Sequence[tuple]) -> None:
        """Call ``function(*argument)`` for every argument as one-CPU Ray tasks (a recipe's cells);
        once all have ended, raise the first failure."""
        if not arguments:
            return
        ray = self._connect()
        started_here = self._started_here
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(_call_single_threaded)
            refs = [remote.remote(function, argument) for argument in arguments]
            errors = []
            try:
                for ref in refs:
                    try:
                        ray.get(ref)
                    except Exception as error:  # RayTaskError wraps the worker's exception
                        errors.append(error)
            except BaseException:
                for ref in refs:
                    ray.cancel(ref, force=True)
                raise
            if errors:
                raise errors[0]
        finally:
            if started_here:
                ray.shutdown()

    def _connect(self) -> Any:
        self._started_here = False
        try:
            import ray
        except ImportError:
            raise SweepError(
                "the ray backend needs Ray: pip install 'attnlab[ray]' (or use --backend local)"
            ) from None
        if self.address not in (None, "", "local", "auto"):
            check_reachable(self.address, self.connect_timeout_s)
        if ray.is_initialized():
            return ray
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if self.address in (None, "", "local"):
            if self.num_cpus is not None:
                options["num_cpus"] = self.num_cpus
        else:
            options["address"] = self.address
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, ValueError) as error:
            where = f"at {self.address}" if self.address else "locally"
            raise SweepError(f"cannot start or reach a Ray cluster {where}: {_one_line(error)}") from None
        self._started_here = True
        return ray


def check_reachable(address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`SweepError` unless a TCP connection to ``[ray://]host:port`` opens in time."""
    target = address.removeprefix("ray://")
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise SweepError(f"Ray address {address!r} is not of the form host:port (or ray://host:port)")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout_s):
            pass
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else str(error) or type(error).__name__
        raise SweepError(
            f"cannot reach the Ray cluster at {address} ({reason} after ≤{timeout_s:g} s)"
        ) from None
    if not address.startswith("ray://"):
        _probe_gcs(address, timeout_s)


def _probe_gcs(address: str, timeout_s: float) -> None:
    """Ask the Ray GCS at ``address`` for its cluster id, within ``timeout_s``.

    A port that accepts TCP connections is not necessarily a Ray head (a proxy, another service);
    ``ray.init`` would then retry for about 20 s before failing, so this asks first.
    """
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # private, not in its stubs
    except ImportError:  # a Ray without this (private) client: let ray.init find out
        return
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            GcsClient(address=address).cluster_id  # noqa: B018 (the request is the point)
            outcome.append(None)
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=probe, name="ray-gcs-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise SweepError(f"cannot reach the Ray cluster at {address} (no answer within {timeout_s:g} s)")
    if outcome[0] is not None:
        raise SweepError(
            f"cannot reach the Ray cluster at {address}: it answers, but not as a Ray head node "
            f"({_one_line(outcome[0])})"
        )


def make_backend(
    kind: str, jobs: int | None = None, address: str | None = None, connect_timeout_s: float = 5.0
) -> SweepBackend:
    """``local`` → :class:`LocalBackend` (``jobs`` default 1); ``ray`` → :class:`RayBackend`."""
    if kind == "local":
        if address:
            raise SweepError("--address applies to --backend ray only")
        return LocalBackend(jobs or 1)
    if kind == "ray":
        return RayBackend(address=address, num_cpus=jobs, connect_timeout_s=connect_timeout_s)
    raise SweepError(f"unknown backend {kind!r}; choose 'local' or 'ray'")


# --------------------------------------------------------------------------------------------------
# The sweep


@dataclass
class SweepReport:
    """Status of every run after a sweep, and the failures with their error line."""

    out_dir: Path
    statuses: dict[str, Status]
    executed: list[str]
    failures: dict[str, str]

    @property
    def ok(self) -> bool:
        return all(status == "done" for status in self.statuses.values())

    def counts(self) -> dict[str, int]:
        return {
            key: sum(status == key for status in self.statuses.values())
            for key in ("done", "failed", "missing")
        }


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    backend: SweepBackend,
    *,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepReport:
    """Run what is missing of ``spec`` (and failed runs if ``retry_failed``; ``only``: just those
    runs, failed or not yet done), then aggregate everything that is done. Progress lines go to
    ``log`` (default: this module's logger)."""
    log = log or logger.info
    out_dir = Path(out_dir)
    runs = expand(spec)
    by_name = {run.name: run for run in runs}
    selected = _select(by_name, only)
    for run in runs:
        _check_same_config(run, run.run_dir(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "sweep.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))

    statuses = {name: run_status(run.run_dir(out_dir)) for name, run in by_name.items()}
    wanted = {"missing", "failed"} if (retry_failed or only) else {"missing"}
    todo = [name for name in selected if statuses[name] in wanted]
    skipped_failed = [name for name in selected if statuses[name] == "failed" and name not in todo]
    counts = {key: sum(statuses[name] == key for name in selected) for key in ("done", "failed", "missing")}
    log(
        f"sweep {spec.source}: {len(selected)} runs ({counts['done']} done, {counts['failed']} failed, "
        f"{counts['missing']} missing); running {len(todo)} on the {backend.name} backend"
    )
    for name in skipped_failed:
        log(f"  skipping failed run {name} (rerun it with --retry-failed or --only {name})")

    tasks = [RunTask(name, by_name[name].config, str(by_name[name].run_dir(out_dir))) for name in todo]
    executed: list[str] = []

    def on_result(outcome: RunOutcome) -> None:
        executed.append(outcome.name)
        detail = f"{outcome.seconds:.1f} s" if outcome.status == "done" else outcome.error
        log(f"  [{len(executed)}/{len(tasks)}] {outcome.status:6s} {outcome.name} ({detail})")

    backend.run(tasks, on_result)  # even with nothing to run: a bad --address is reported

    statuses = {name: run_status(run.run_dir(out_dir)) for name, run in by_name.items()}
    failures = {
        name: _error_line(by_name[name].run_dir(out_dir))
        for name, status in statuses.items()
        if status == "failed"
    }
    _write_failures(out_dir, failures, by_name)
    write_sweep_aggregate(spec, runs, out_dir)
    return SweepReport(out_dir, statuses, executed, failures)


def _select(by_name: Mapping[str, SweepRun], only: Iterable[str] | None) -> list[str]:
    if only is None:
        return list(by_name)
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


def _check_same_config(run: SweepRun, run_dir: Path) -> None:
    """Refuse to mix results: an existing run directory must hold the same resolved config."""
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


STAT_KEYS = ("mean", "std", "median", "min", "max", "n")


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
    cells: dict[str, Any] = {}
    for cell in dict.fromkeys(run.cell for run in runs):
        if cell not in collected:
            continue
        seeds = sorted(collected[cell])
        aggregate = aggregate_results([collected[cell][seed] for seed in seeds])
        write_aggregate(aggregate, out_dir / cell, seeds=seeds)
        cells[cell] = {"params": params[cell], "seeds": seeds, "results": aggregate}
    summary = {"sweep": spec.to_dict(), "cells": cells}
    atomic_write_json(out_dir / "aggregate.json", summary)
    atomic_write_text(out_dir / "aggregate.csv", _aggregate_csv(spec, cells))
    atomic_write_text(out_dir / "aggregate.md", sweep_markdown(cells) + "\n")
    return summary


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
# Command line: ``attnlab sweep SPEC``


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML (config, overrides, grid, seeds)")
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument(
        "--jobs",
        type=int,
        help="local: worker processes (default 1: in this process); ray: CPUs of a local instance",
    )
    parser.add_argument(
        "--address", help="ray: address host:port of a running Ray cluster (default: start one)"
    )
    parser.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S, help="seconds")
    parser.add_argument("--out", help="output directory (default runs/<spec name>)")
    parser.add_argument("--retry-failed", action="store_true", help="rerun runs whose last attempt failed")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="RUN",
        help="run only these runs (CELL/seedN) or cells (CELL), failed or not",
    )
    parser.add_argument("--report-only", action="store_true", help="only rebuild aggregate.* from the runs")


if __name__ == "__main__":  # the same as `attnlab sweep SPEC ...`
    from attnlab.cli import main as cli_main

    sys.exit(cli_main(["sweep", *sys.argv[1:]]))
