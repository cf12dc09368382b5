"""The one runner: every training job of attnlab (sweeps, recipes, ``attnlab multiseed``) runs here.

A job is either a *run* (:class:`RunTask`: a config trained or resumed into its run directory, a
failure recorded in ``error.txt`` and reported, not raised; what sweeps and grid recipes execute)
or a *call* of a module-level function (:func:`run_parallel`: a recipe's scheduler, such as the
Raffel recipe's learning-rate race, whose first failure is raised once all calls have ended).

Backends: :class:`LocalBackend` (in this process when ``jobs == 1``, else a pool of ``jobs``
worker processes with one CPU thread each) and :class:`RayBackend` (one-CPU Ray tasks on a local
Ray instance, or on the running cluster at ``--address``; needs ``pip install 'attnlab[ray]'``).
On a multi-node Ray cluster the output directory must be on a file system every node sees at the
same path, and attnlab must be installed on every node.

A run's status is read from its directory alone (:func:`run_status`), so a runner started again
runs only what is missing. A run is trained under its directory's lock (:func:`training_lock`), so
two runners over the same runs (two sweeps or recipes started on one ``--out``, e.g. one per CPU
core) share the work: each skips what the other is training or has finished. Results over seeds
are aggregated by :mod:`attnlab.experiments.aggregate`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from attnlab.config import ConfigError, apply_overrides
from attnlab.experiments.aggregate import Results, aggregate_results, write_aggregate
from attnlab.experiments.registry import train_or_resume
from attnlab.io import atomic_write_text, make_directory
from attnlab.logs import show_logs_in_worker
from attnlab.metric_names import read_summary

try:
    import fcntl
except ImportError:  # not POSIX (Windows): runs are not locked
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

Status = Literal["done", "failed", "missing"]

ERROR_FILE = "error.txt"
LOCK_FILE = "train.lock"
SUMMARY_FILE = Path("eval") / "summary.json"
DEFAULT_CONNECT_TIMEOUT_S = 5.0


class RunnerError(ConfigError):
    """Bad runner input (backend, ``--jobs``, unreachable cluster, a sweep spec), or runs of a
    recipe's grid that failed: reported by the CLI as one line. ``sweep.SweepError`` is this class."""


def single_thread() -> None:
    """Set this worker process up: one CPU thread, freed memory kept and log records shown on
    stderr, as the CLI does."""
    os.environ["OMP_NUM_THREADS"] = "1"
    show_logs_in_worker()
    import torch

    from attnlab.training.allocator import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()


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


def is_being_trained(run_dir: Path) -> bool:
    """Whether some process holds ``run_dir``'s training lock (:func:`training_lock`) now: a sweep,
    a recipe or ``attnlab train`` is training it. Always ``False`` where nothing is locked. The
    probe holds a shared lock for an instant: a training that starts in that instant is refused
    as busy (:class:`RunBusy`), as beside any other process, and left for the next sweep."""
    lock = Path(run_dir) / LOCK_FILE
    if fcntl is None or not lock.is_file():
        return False
    descriptor = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused while an exclusive lock is held
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # and with it the shared lock, if taken
    return False


class RunBusy(RunnerError):
    """Another process is training this run directory."""


_held_locks: set[Path] = set()
"""The run directories (resolved) whose lock this process holds."""


@contextlib.contextmanager
def training_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir/train.lock`` while the block runs, so that no two processes train one run at
    once (two sweeps on one ``--out``, or ``attnlab train --resume`` beside a sweep): if another
    process holds it, raise :class:`RunBusy` at once, naming its pid.

    The lock is an exclusive ``flock`` on the open file: the kernel drops it when its process ends,
    even when killed, so it is never stale and nothing has to clean it up. It is re-entrant within
    a process (a sweep's worker holds it around the whole run, the driver again around training).
    A directory the lock created is removed again if nothing else was written in it. Where
    ``fcntl`` does not exist (Windows) nothing is locked.
    """
    key = Path(run_dir).resolve()
    if fcntl is None:
        yield
        return
    if key in _held_locks:  # the outer holder releases it
        yield
        return
    created = not key.exists()
    make_directory(key)
    descriptor = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunBusy(
                f"{run_dir} is being trained by another process (pid {holder}, holding "
                f"{key / LOCK_FILE}); wait for it to finish or choose another run directory"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        _held_locks.add(key)
        try:
            yield
        finally:
            _held_locks.discard(key)
    finally:
        os.close(descriptor)  # closing the file releases the lock
        if created and [path.name for path in key.iterdir()] == [LOCK_FILE]:
            with contextlib.suppress(OSError):  # nothing was written (a run refused at its start)
                (key / LOCK_FILE).unlink()
                key.rmdir()


@dataclass(frozen=True)
class RunTask:
    """What a backend executes: a run's name, config data and directory."""

    name: str
    config: dict[str, Any]
    run_dir: str


@dataclass(frozen=True)
class RunOutcome:
    name: str
    status: Literal["done", "failed", "busy"]
    """``busy``: another process was training it, so this runner left it alone."""
    seconds: float
    error: str | None = None
    """The last line of the error, when the run failed (the traceback is in ``error.txt``), or
    why it was left alone."""


def execute_run(task: RunTask, one_thread: bool = False) -> RunOutcome:
    """Train (or resume) one run; an exception is recorded in ``run_dir/error.txt``, not raised.
    A run that another process is training is left alone (``busy``), and one it has finished since
    this runner looked is not trained again."""
    if one_thread:
        single_thread()
    run_dir = Path(task.run_dir)
    error_file = run_dir / ERROR_FILE
    start = time.perf_counter()
    try:
        with training_lock(run_dir):
            if run_status(run_dir) == "done":
                return RunOutcome(task.name, "done", 0.0)
            train_or_resume(task.config, run_dir)
    except RunBusy as busy:
        return RunOutcome(task.name, "busy", time.perf_counter() - start, str(busy))
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
    single_thread()
    return function(*argument)


# --------------------------------------------------------------------------------------------------
# Backends


class Backend(Protocol):
    """Executes run tasks, calling ``on_result`` in this process as each one finishes, and calls
    of module-level functions (``call_all``)."""

    name: str

    def run(self, tasks: Sequence[RunTask], on_result: Callable[[RunOutcome], None]) -> None: ...

    def call_all(self, function: Callable[..., Any], arguments: Sequence[tuple]) -> None: ...


class LocalBackend:
    """Runs in this process one after the other (``jobs == 1``), or in ``jobs`` worker processes."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise RunnerError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs

    def run(self, tasks: Sequence[RunTask], on_result: Callable[[RunOutcome], None]) -> None:
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                on_result(execute_run(task))
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(tasks)), initializer=single_thread) as pool:
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

    def call_all(self, function: Callable[..., Any], arguments: Sequence[tuple]) -> None:
        """Call ``function(*argument)`` for every argument (a recipe's cells): in this process, or
        in the worker processes; once all have ended, raise the first failure."""
        if self.jobs == 1 or len(arguments) <= 1:
            for argument in arguments:
                function(*argument)
            return
        with ProcessPoolExecutor(
            max_workers=min(self.jobs, len(arguments)), initializer=single_thread
        ) as pool:
            futures = [pool.submit(function, *argument) for argument in arguments]
            wait(futures)
            for future in futures:
                future.result()


class RayBackend:
    """Runs each task as a one-CPU Ray task: on a local Ray instance (``address=None``, using
    ``num_cpus`` cores, default all) or on the running cluster at ``address``.

    An address that cannot be reached within ``connect_timeout_s`` is a :class:`RunnerError`. A Ray
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
            raise RunnerError(f"--jobs must be at least 1, got {num_cpus}")
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
            raise RunnerError(
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
            raise RunnerError(f"cannot start or reach a Ray cluster {where}: {_one_line(error)}") from None
        self._started_here = True
        return ray


def check_reachable(address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`RunnerError` unless a TCP connection to ``[ray://]host:port`` opens in time."""
    target = address.removeprefix("ray://")
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise RunnerError(f"Ray address {address!r} is not of the form host:port (or ray://host:port)")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout_s):
            pass
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else str(error) or type(error).__name__
        raise RunnerError(
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
        raise RunnerError(f"cannot reach the Ray cluster at {address} (no answer within {timeout_s:g} s)")
    if outcome[0] is not None:
        raise RunnerError(
            f"cannot reach the Ray cluster at {address}: it answers, but not as a Ray head node "
            f"({_one_line(outcome[0])})"
        )


def make_backend(
    kind: str,
    jobs: int | None = None,
    address: str | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> Backend:
    """``local`` → :class:`LocalBackend` (``jobs`` default 1); ``ray`` → :class:`RayBackend`."""
    if kind == "local":
        if address:
            raise RunnerError("--address applies to --backend ray only")
        return LocalBackend(jobs or 1)
    if kind == "ray":
        return RayBackend(address=address, num_cpus=jobs, connect_timeout_s=connect_timeout_s)
    raise RunnerError(f"unknown backend {kind!r}; choose 'local' or 'ray'")


# --------------------------------------------------------------------------------------------------
# What sweeps, recipes and ``attnlab multiseed`` call


def run_tasks(
    tasks: Sequence[RunTask], backend: Backend, log: Callable[[str], None] | None = None
) -> list[RunOutcome]:
    """Execute ``tasks`` on ``backend`` (even none: a bad ``--address`` is reported), logging one
    line per finished run to ``log`` (default: this module's logger); returns the outcomes in the
    order they finished."""
    log = log or logger.info
    outcomes: list[RunOutcome] = []

    def on_result(outcome: RunOutcome) -> None:
        outcomes.append(outcome)
        detail = f"{outcome.seconds:.1f} s" if outcome.status == "done" else outcome.error
        log(f"  [{len(outcomes)}/{len(tasks)}] {outcome.status:6s} {outcome.name} ({detail})")

    backend.run(tasks, on_result)
    return outcomes


def backend_for(kind: str, jobs: int = 1, address: str | None = None) -> Backend:
    """The backend of a recipe's ``--backend``, ``--jobs`` and ``--address``: ``local`` runs in this
    process (``jobs <= 1``) or in ``jobs`` worker processes; ``ray`` on ``jobs`` CPUs of a local
    instance (all of them when ``jobs <= 1``) or on the cluster at ``address``."""
    if jobs < 1:
        raise RunnerError(f"--jobs must be at least 1, got {jobs}")
    if kind == "ray":
        return RayBackend(address=address, num_cpus=jobs if jobs > 1 else None)
    if kind != "local":
        raise RunnerError(f"unknown backend {kind!r}; choose 'local' or 'ray'")
    if address:
        raise RunnerError("--address applies to --backend ray only")
    return LocalBackend(jobs)


def seed_dir(cell_dir: Path, seed: int) -> Path:
    """``<cell>/seed<N>``: where a grid's run of ``seed`` lives (the default of :class:`Grid`)."""
    return cell_dir / f"seed{seed}"


@dataclass(frozen=True)
class Grid:
    """A recipe's grid as data: cells × seeds, executed by :func:`run_grid`.

    ``cells`` maps each cell's folder (relative to ``out_dir``) to its config data without a seed,
    in the order the cells are run; every seed of ``seeds`` is one run of every cell, with
    ``training.seed`` set, in the directory ``run_dir(out_dir / cell, seed)``.
    """

    out_dir: Path
    cells: dict[str, dict[str, Any]]
    seeds: tuple[int, ...]
    aggregate: bool = True
    """Write ``<cell>/aggregate.{json,csv,md}`` once every seed of a cell is done."""
    run_dir: Callable[[Path, int], Path] = seed_dir

    def tasks(self) -> list[RunTask]:
        """Every cell × seed as a run task named ``<cell>/seed<N>``, in cell order."""
        return [
            RunTask(
                f"{cell}/seed{seed}",
                apply_overrides(config, [f"training.seed={seed}"]),
                str(self.run_dir(self.out_dir / cell, seed)),
            )
            for cell, config in self.cells.items()
            for seed in self.seeds
        ]


def run_grid(grid: Grid, *, jobs: int = 1, backend: str = "local", address: str | None = None) -> None:
    """Train every run of ``grid`` that is not done (failed ones again), one job per run on the
    backend of :func:`backend_for`; then write the aggregates of the finished cells.

    Every run is attempted; if some failed, a :class:`RunnerError` then names them (their
    tracebacks are in ``<run>/error.txt``).
    """
    tasks = [task for task in grid.tasks() if run_status(Path(task.run_dir)) != "done"]
    logger.info("%d cells × %d seeds: %d runs to train", len(grid.cells), len(grid.seeds), len(tasks))
    outcomes = run_tasks(tasks, backend_for(backend, jobs, address))
    if grid.aggregate:
        for cell in grid.cells:
            summaries = [grid.run_dir(grid.out_dir / cell, seed) / SUMMARY_FILE for seed in grid.seeds]
            if all(summary.is_file() for summary in summaries):
                results = [read_summary(summary) for summary in summaries]
                write_aggregate(aggregate_results(results), grid.out_dir / cell, seeds=list(grid.seeds))
    failed = [outcome for outcome in outcomes if outcome.status == "failed"]
    if failed:
        names = "; ".join(f"{outcome.name}: {outcome.error}" for outcome in failed)
        raise RunnerError(
            f"{len(failed)} of {len(tasks)} runs failed ({names}); tracebacks in <run>/{ERROR_FILE}"
        )


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

    ``backend="local"``: in this process (``jobs <= 1``) or in ``jobs`` single-threaded worker
    processes (runs are small; one thread each uses the cores best). ``backend="ray"``: one
    single-threaded Ray task per call, on a local Ray instance with ``jobs`` CPUs or on the running
    cluster at ``address``. Every call runs to its end; then the first failure, if any, is raised.
    """
    backend_for(backend, jobs, address).call_all(function, arguments)


def add_out_argument(parser: argparse.ArgumentParser, name: str) -> None:
    """A recipe's ``--out``: the folder of its runs and tables, ``runs/<name>`` by default."""
    parser.add_argument(
        "--out",
        default=f"runs/{name}",
        metavar="DIR",
        help="the folder of the runs and the tables: finished runs are skipped, interrupted ones "
        f"resume (default: runs/{name})",
    )


def add_parallel_arguments(parser: argparse.ArgumentParser, what: str = "runs") -> None:
    """``--jobs``, ``--backend`` and ``--address`` of a recipe (see :func:`run_parallel`)."""
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help=f"local: {what} trained in parallel, one thread each (default 1: in this process); ray: CPUs "
        "of a local instance (default: all)",
    )
    parser.add_argument("--backend", choices=["local", "ray"], default="local", help="local processes or Ray")
    parser.add_argument(
        "--address", default=None, help="ray: host:port of a running cluster (default: start one)"
    )


def repeated_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds that ``seeds`` lists more than once, in increasing order."""
    return sorted(seed for seed, count in Counter(seeds).items() if count > 1)


class _DistinctSeeds(argparse.Action):
    """Store ``--seeds`` as a list; a seed listed twice is a usage error (it would be one run counted
    twice in a mean ± std)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        repeated = repeated_seeds(values)
        if repeated:
            parser.error(
                f"{option_string} lists {', '.join(map(str, repeated))} more than once: each seed is one run"
            )
        setattr(namespace, self.dest, list(values))


def add_seeds_argument(parser: argparse.ArgumentParser, default: list[int], help: str | None = None) -> None:
    """``--seeds N [N ...]``: training seeds, one run each, every seed at most once."""
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=default,
        action=_DistinctSeeds,
        help=help or f"training seeds, one run each (default: {' '.join(map(str, default))})",
    )


def parallel_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`run_parallel` from :func:`add_parallel_arguments`' options."""
    return {"jobs": args.jobs, "backend": args.backend, "address": args.address}


def run_seeds(
    config_data: dict[str, Any],
    seeds: Sequence[int],
    out_dir: str | Path,
    train: Callable[[dict[str, Any], Path], Results] = train_or_resume,
) -> dict[str, dict[str, dict[str, float]]]:
    """Train ``config_data`` once per seed into ``out_dir/seed<N>`` (in this process, one seed after
    the other) and aggregate the results into ``out_dir/aggregate.*``.

    Seeds whose run already finished (``eval/summary.json`` exists) are not trained again, so an
    interrupted multi-seed run continues where it stopped; a failure is raised.
    """
    repeated = repeated_seeds(seeds)
    if repeated:
        raise ValueError(f"seeds {repeated} listed more than once: each seed is one run")
    out_dir = Path(out_dir)
    per_seed: dict[int, Results] = {}
    for seed in seeds:
        run_dir = out_dir / f"seed{seed}"
        summary = run_dir / SUMMARY_FILE
        if summary.is_file():
            per_seed[seed] = read_summary(summary)
            continue
        seeded = apply_overrides(config_data, [f"training.seed={seed}"])
        per_seed[seed] = train(seeded, run_dir)
    aggregate = aggregate_results(list(per_seed.values()))
    write_aggregate(aggregate, out_dir, seeds=list(seeds))
    return aggregate
