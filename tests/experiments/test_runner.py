"""The one runner: a recipe's grid as data (``Grid``, ``run_grid``) and the backends of recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.experiments import runner
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import Grid, LocalBackend, RayBackend, RunnerError, backend_for, run_grid


def _grid(out: Path, overrides: list[str], seeds: tuple[int, ...] = (0, 1), **options) -> Grid:
    cells = {
        f"lr{rate}": resolve_config("memory_addition", [*overrides, f"training.learning_rate={rate}"])
        for rate in (0.01,)
    }
    return Grid(out, cells, seeds, **options)


def test_run_grid_trains_every_seed_of_every_cell_once_and_aggregates(
    tmp_path, tiny_memory_addition, monkeypatch
):
    out = tmp_path / "out"
    run_grid(_grid(out, tiny_memory_addition))
    for seed in (0, 1):
        config = (out / "lr0.01" / f"seed{seed}" / "config.yaml").read_text()
        assert f"seed: {seed}" in config
        assert (out / "lr0.01" / f"seed{seed}" / "eval" / "summary.json").is_file()
    aggregate = json.loads((out / "lr0.01" / "aggregate.json").read_text())
    assert aggregate["seeds"] == [0, 1]
    assert aggregate["results"]["test"]["accuracy"]["n"] == 2.0

    def no_training(config, run_dir):
        raise AssertionError(f"{run_dir} is done and must not be trained again")

    monkeypatch.setattr(runner, "train_or_resume", no_training)
    run_grid(_grid(out, tiny_memory_addition))


def test_run_grid_without_aggregate_and_with_its_own_run_directories(tmp_path, tiny_memory_addition):
    out = tmp_path / "out"
    grid = _grid(
        out, tiny_memory_addition, (3,), aggregate=False, run_dir=lambda cell, seed: cell / f"s{seed}"
    )
    run_grid(grid)
    assert sorted(path.name for path in (out / "lr0.01").iterdir()) == ["s3"]


def test_run_grid_attempts_every_run_then_names_the_failures(tmp_path, tiny_memory_addition, monkeypatch):
    out = tmp_path / "out"
    attempted = []

    def failing(config, run_dir):
        attempted.append(Path(run_dir).name)
        raise ValueError("no good")

    monkeypatch.setattr(runner, "train_or_resume", failing)
    with pytest.raises(RunnerError, match=r"2 of 2 runs failed \(lr0.01/seed0: ValueError: no good;"):
        run_grid(_grid(out, tiny_memory_addition))
    assert attempted == ["seed0", "seed1"]
    assert "no good" in (out / "lr0.01" / "seed1" / runner.ERROR_FILE).read_text()
    assert not (out / "lr0.01" / "aggregate.json").exists()


def test_backend_of_a_recipe():
    local = backend_for("local", 1)
    assert isinstance(local, LocalBackend) and local.jobs == 1
    for backend, jobs in (("local", 0), ("ray", 0), ("local", -2)):  # 0 was taken as 1 without a word
        with pytest.raises(RunnerError, match=f"--jobs must be at least 1, got {jobs}"):
            backend_for(backend, jobs)
    three = backend_for("local", 3)
    assert isinstance(three, LocalBackend) and three.jobs == 3
    ray = backend_for("ray", 1, "localhost:6379")
    assert isinstance(ray, RayBackend) and ray.num_cpus is None and ray.address == "localhost:6379"
    four = backend_for("ray", 4)
    assert isinstance(four, RayBackend) and four.num_cpus == 4
    with pytest.raises(RunnerError, match="--address applies to --backend ray only"):
        backend_for("local", 1, "localhost:6379")
    with pytest.raises(RunnerError, match="unknown backend 'slurm'"):
        backend_for("slurm")
