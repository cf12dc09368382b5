"""Where and with what a run was trained: the software and machine of one training session.

A run directory's ``environment.jsonl`` holds one record a session (a new run, then each resume;
:meth:`attnlab.experiments.runs.RunDirectory.start_training`), so a number in a report can be
traced to the code, library versions and hardware that produced it, also for a run resumed on
another machine or trained on a borrowed one (a GPU for some epochs, the CPU for others).

The attnlab commit is that of the checkout the package was imported from, read with ``git`` when
the package's own files are tracked there (an editable install); ``dirty`` says whether tracked
files differed from that commit. It is read once per process, at its first training session
(close to when the code was imported; a sweep's later runs in the same process ran that code too,
whatever was committed since). A package installed from a wheel has no commit (``null``): its
version says what it is.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

import attnlab

ENVIRONMENT_FILE = "environment.jsonl"
"""A run directory's training-session records, one JSON object a line."""

GIT_TIMEOUT_S = 5.0
"""How long one ``git`` call may take before the commit is recorded as unknown."""

CONTENTION_MARGIN = 0.5
"""How far PyTorch's threads may exceed the idle cores (CPUs minus the load average) before
:func:`thread_contention` warns: a load average is an estimate, and a new run's own start adds to it."""


def _git(directory: Path, *arguments: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *arguments],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision(package_dir: Path) -> tuple[str | None, bool | None]:
    """The commit of the git checkout that tracks ``package_dir``'s ``__init__.py``, and whether
    tracked files differ from it; ``(None, None)`` where no checkout tracks it (a wheel install,
    possibly inside someone's repository) or git is missing."""
    if _git(package_dir, "ls-files", "--error-unmatch", "__init__.py") is None:
        return None, None
    commit = _git(package_dir, "rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git(package_dir, "status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


@functools.cache
def _package_revision() -> tuple[str | None, bool | None]:
    """:func:`git_revision` of the imported attnlab package, read once per process."""
    return git_revision(Path(attnlab.__file__).parent)


def device_name(device: torch.device) -> str:
    """The model of ``device``: the GPU's name, or the CPU's model name from ``/proc/cpuinfo``
    (``platform.processor()`` elsewhere; empty where neither says)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def training_environment(device: torch.device, from_epoch: int) -> dict[str, Any]:
    """One ``environment.jsonl`` record: when a training session started, after which epoch
    (0 for a new run), attnlab's version and commit, Python, PyTorch, the device (its type and
    model), PyTorch's intra-op threads, the machine's CPU count and host name."""
    commit, dirty = _package_revision()
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "from_epoch": from_epoch,
        "attnlab": attnlab.__version__,
        "commit": commit,
        "dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "host": platform.node(),
    }


def load_average() -> float | None:
    """The machine's load average over the last minute, or ``None`` where the system does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows; unavailable in some sandboxes
        return None


def thread_contention(threads: int, cpus: int | None, load: float | None) -> str | None:
    """A warning where training on the CPU with ``threads`` intra-op threads would contend for busy
    cores, else ``None``.

    PyTorch starts as many threads as the machine has cores; where other processes keep some of
    them busy (``load`` of ``cpus``), each parallel region waits for its slowest thread, and the
    waiting costs more than the extra threads give: one epoch of ``configs/demo.yaml`` took 22.3 s
    on 2 threads beside two busy one-thread runs on 2 cores, 3.3 s on 1 thread (1.45 s and 1.95 s on
    the idle machine; docs/results.md, session 35). One thread never warns."""
    if threads <= 1 or cpus is None or load is None:
        return None
    idle = cpus - load
    if threads <= idle + CONTENTION_MARGIN:
        return None
    return (
        f"PyTorch trains on {threads} threads, but the machine is busy (load average {load:.1f} on "
        f"{cpus} CPUs): threads that wait for a busy core can make training several times slower; "
        f"set OMP_NUM_THREADS to the idle cores (e.g. OMP_NUM_THREADS=1) before starting"
    )
