"""Crash safety: a training process killed with SIGKILL at random points, including in the middle
of writing a checkpoint, and resumed with ``--resume`` each time, ends with exactly the metrics,
weights and evaluation of an uninterrupted run.

The kill points come from a seeded RNG: the Nth checkpoint write of a process (it kills itself
between writing the temporary file and moving it into place, through the test hook
``ATTNLAB_TEST_KILL_IN_CHECKPOINT_WRITE``), or a random delay after training has started.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import attnlab
from attnlab.cli import main
from attnlab.training.checkpoint import KILL_IN_CHECKPOINT_WRITE, load_checkpoint

SOURCE = Path(attnlab.__file__).resolve().parents[1]


def _command(run: Path, overrides: list[str], resume: bool) -> list[str]:
    argv = [sys.executable, "-m", "attnlab.cli", "train", "lookup", "--run-dir", str(run)]
    return [*argv, "--resume"] if resume else [*argv, *overrides]


def _environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != KILL_IN_CHECKPOINT_WRITE}
    python_path = [str(SOURCE), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(python_path), "OMP_NUM_THREADS": "1", **extra}


def _run(command: list[str], **env: str) -> int:
    return subprocess.run(command, env=_environment(**env), capture_output=True, check=False).returncode


def _kill_after_start(command: list[str], delay: float) -> int:
    """Start training, SIGKILL it ``delay`` seconds after its first log line; its exit status."""
    process = subprocess.Popen(command, env=_environment(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stderr is not None
    process.stderr.readline()  # its first log line ("resuming ..."): training goes on
    deadline = time.monotonic() + delay
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.stderr.read()
    return process.wait()


def _outcome(run: Path) -> tuple[object, object, dict[str, torch.Tensor]]:
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    history = [{key: value for key, value in record.items() if key != "seconds"} for record in history]
    summary = json.loads((run / "eval" / "summary.json").read_text())
    return history, summary, load_checkpoint(run / "checkpoints" / "last.pt")["model"]


def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(tiny_overrides, tmp_path):
    overrides = tiny_overrides(**{"training.checkpoint_every": 3, "training.progress": "true"})
    full = tmp_path / "full"  # trained in this process: one thread, as the subprocesses
    assert main(_command(full, overrides, resume=False)[3:]) == 0

    rng = random.Random(25)
    run = tmp_path / "killed"
    # A full run writes 15-18 checkpoints (13 updates per epoch: 4 within-epoch saves, then best.pt
    # if the epoch improved, and last.pt). Killed while writing its 1st-8th, then, resumed, while
    # writing the 1st-4th of the rest: both kills land whatever the machine's speed.
    kill_in_write = {KILL_IN_CHECKPOINT_WRITE: str(rng.randint(1, 8))}
    assert _run(_command(run, overrides, resume=False), **kill_in_write) == -9
    kill_in_write = {KILL_IN_CHECKPOINT_WRITE: str(rng.randint(1, 4))}
    assert _run(_command(run, overrides, resume=True), **kill_in_write) == -9
    # Resumed again and killed at a random moment (unless it finished first), then left to finish.
    _kill_after_start(_command(run, overrides, resume=True), rng.uniform(0.0, 1.0))
    assert _run(_command(run, overrides, resume=True)) == 0

    history, summary, weights = _outcome(run)
    expected_history, expected_summary, expected_weights = _outcome(full)
    assert history == expected_history and [record["epoch"] for record in history] == [1, 2, 3]
    assert summary == expected_summary
    assert all(torch.equal(weights[name], expected_weights[name]) for name in expected_weights)
    assert not list(run.rglob("*.tmp"))  # no temporary file of a killed write is left behind
