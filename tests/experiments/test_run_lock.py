"""One process trains a run at a time: the run directory's lock (``runner.training_lock``), and
runners that share runs by skipping what another process trains or has finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.experiments import runner
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import Grid, RunBusy, RunTask, execute_run, run_grid, training_lock

pytestmark = pytest.mark.skipif(runner.fcntl is None, reason="run locks need fcntl (POSIX)")


class LockHolder:
    """Another process that holds ``run_dir``'s lock until it is stopped."""

    def __init__(self, run_dir: Path) -> None:
        code = textwrap.dedent(
            f"""
            import sys, time
            from pathlib import Path
            from attnlab.experiments.runner import training_lock
            with training_lock(Path({str(run_dir)!r})):
                print("held", flush=True)
                time.sleep(60)
            """
        )
        self.process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "held"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@pytest.fixture()
def holder_of(tmp_path):
    holders: list[LockHolder] = []

    def start(run_dir: Path) -> LockHolder:
        holders.append(LockHolder(run_dir))
        return holders[-1]

    yield start
    for holder in holders:
        holder.kill()


def test_a_run_held_by_another_process_is_busy_until_that_process_ends(tmp_path, holder_of):
    run_dir = tmp_path / "run"
    holder = holder_of(run_dir)
    busy = rf"being trained by another process \(pid {holder.process.pid}, holding"
    with pytest.raises(RunBusy, match=busy), training_lock(run_dir):
        pass
    holder.kill()  # killed, not released: the kernel drops the lock with its process
    with training_lock(run_dir):
        with training_lock(run_dir):  # re-entrant within a process
            pass
        assert (run_dir / runner.LOCK_FILE).read_text().strip() == str(os.getpid())
    with training_lock(run_dir):  # released after the block
        pass


def test_a_runner_leaves_a_busy_run_alone_and_does_not_retrain_one_finished_meanwhile(
    tmp_path, tiny_memory_addition, holder_of, monkeypatch
):
    config = resolve_config("memory_addition", tiny_memory_addition)
    busy_dir, done_dir = tmp_path / "busy", tmp_path / "done"
    holder = holder_of(busy_dir)
    outcome = execute_run(RunTask("busy", config, str(busy_dir)))
    assert outcome.status == "busy" and f"pid {holder.process.pid}" in (outcome.error or "")
    assert not (busy_dir / runner.ERROR_FILE).exists() and not (busy_dir / "config.yaml").exists()

    assert execute_run(RunTask("done", config, str(done_dir))).status == "done"

    def no_training(config, run_dir):
        raise AssertionError(f"{run_dir} is done and must not be trained again")

    monkeypatch.setattr(runner, "train_or_resume", no_training)
    assert execute_run(RunTask("done", config, str(done_dir))).status == "done"


def test_two_runners_over_one_grid_share_it(tmp_path, tiny_memory_addition, holder_of):
    """A grid whose first run another runner is training: this runner trains the others, and does
    not count the busy one as failed (no error.txt), so either runner can finish it later."""
    cells = {"cell": resolve_config("memory_addition", tiny_memory_addition)}
    grid = Grid(tmp_path / "out", cells, (0, 1, 2))
    holder = holder_of(tmp_path / "out" / "cell" / "seed0")
    run_grid(grid)
    seeds = {seed: runner.run_status(tmp_path / "out" / "cell" / f"seed{seed}") for seed in (0, 1, 2)}
    assert seeds == {0: "missing", 1: "done", 2: "done"}
    holder.kill()
    run_grid(grid)
    assert runner.run_status(tmp_path / "out" / "cell" / "seed0") == "done"
    assert (tmp_path / "out" / "cell" / "aggregate.json").is_file()


def test_a_sweep_says_which_missing_runs_another_process_was_training(
    tmp_path, tiny_memory_addition, holder_of, capsys
):
    """Two sweeps on one ``--out``: the one that reaches a run the other trains leaves it missing
    (exit status 1, since the sweep is not complete) and says why, instead of a bare "1 missing"."""
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump({"config": "memory_addition", "overrides": tiny_memory_addition, "seeds": [0, 1]})
    )
    out = tmp_path / "out"
    holder = holder_of(out / "base" / "seed0")
    with pytest.raises(SystemExit) as exit_status:
        main(["sweep", str(spec), "--out", str(out)])
    assert exit_status.value.code == 1
    printed = capsys.readouterr().out
    assert "busy   base/seed0 (" in printed and f"pid {holder.process.pid}" in printed
    assert "1 done, 0 failed, 1 missing (1 of them trained by another process meanwhile;" in printed
    holder.kill()
    assert main(["sweep", str(spec), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 done, 0 failed, 0 missing; results in" in printed and "another process" not in printed


def test_train_refuses_a_run_another_process_trains_and_overwrite_deletes_nothing(
    tmp_path, tiny_memory_addition, holder_of, capsys
):
    run_dir = tmp_path / "run"
    assert main(["train", "memory_addition", *tiny_memory_addition, "--run-dir", str(run_dir)]) == 0
    before = sorted(path.name for path in run_dir.iterdir())
    holder = holder_of(run_dir)
    command = ["train", "memory_addition", *tiny_memory_addition, "--run-dir", str(run_dir)]
    assert main([*command, "--overwrite"]) != 0
    assert f"being trained by another process (pid {holder.process.pid}" in capsys.readouterr().err
    assert sorted(path.name for path in run_dir.iterdir()) == before
    holder.kill()
    assert main([*command, "--overwrite"]) == 0
    assert sorted(path.name for path in run_dir.iterdir()) == before
