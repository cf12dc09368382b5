"""Sweeps: grid × seeds expansion, resumable execution on the local and Ray backends, aggregation."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from attnlab.cli import run_sweep_command
from attnlab.errors import USER_ERRORS
from attnlab.experiments import runner, sweep
from attnlab.experiments.runner import LocalBackend, RayBackend, RunTask, run_status
from attnlab.experiments.sweep import SweepError, expand, load_spec, run_sweep


@pytest.fixture
def make_spec(tmp_path: Path, tiny_memory_addition: list[str]):
    """Writes a sweep spec of tiny ``memory_addition`` runs under ``tmp_path``; returns its path."""

    def make(grid: dict | None = None, seeds: list[int] | None = None, extra=(), name="spec") -> Path:
        data = {
            "config": "memory_addition",
            "overrides": [*tiny_memory_addition, *extra],
            "grid": grid or {},
            "seeds": seeds or [0],
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return make


def _cli(argv: list[str]) -> int:
    """What ``attnlab sweep ARGV`` returns (the CLI prints USER_ERRORS as one line, status 2)."""
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    try:
        return run_sweep_command(parser.parse_args(argv))
    except USER_ERRORS as error:
        print(f"attnlab: error: {error}", file=sys.stderr)
        return 2


class RecordingBackend(LocalBackend):
    """The sequential local backend, remembering which runs it was asked to execute."""

    def __init__(self) -> None:
        super().__init__(jobs=1)
        self.names: list[str] = []

    def run(self, tasks, on_result):
        self.names.extend(task.name for task in tasks)
        super().run(tasks, on_result)


def _summaries(out: Path) -> dict[str, float]:
    """Run name → modification time of its eval/summary.json."""
    return {
        str(path.parent.parent.relative_to(out)): path.stat().st_mtime_ns
        for path in out.glob("*/seed*/eval/summary.json")
    }


# -- spec and expansion ------------------------------------------------------------------------------


def test_expansion_names_runs_by_grid_point_and_seed(tmp_path, make_spec):
    spec = load_spec(
        make_spec(
            {"model.pooling": ["attention", "mean"], "training.learning_rate": [1.0e-3, 0.01]},
            seeds=[3, 7],
        )
    )
    runs = expand(spec)
    assert [run.name for run in runs][:3] == [
        "model.pooling=attention,training.learning_rate=0.001/seed3",
        "model.pooling=attention,training.learning_rate=0.001/seed7",
        "model.pooling=attention,training.learning_rate=0.01/seed3",
    ]
    assert len(runs) == 8 and len({run.name for run in runs}) == 8
    last = runs[-1]
    assert last.params == {"model.pooling": "mean", "training.learning_rate": 0.01}
    assert last.config["model"]["pooling"] == "mean" and last.config["training"]["learning_rate"] == 0.01
    assert last.config["training"]["seed"] == 7 and last.config["data"]["t0"] == 20
    assert last.run_dir(tmp_path) == tmp_path / "model.pooling=mean,training.learning_rate=0.01" / "seed7"
    assert expand(spec) == runs  # stable

    no_grid = expand(load_spec(make_spec(seeds=[0, 1])))
    assert [run.name for run in no_grid] == ["base/seed0", "base/seed1"]


def test_builtin_example_spec_expands():
    spec = load_spec("raffel2015_addition_lr")
    runs = expand(spec)
    assert len(runs) == 2 * 4 * 3
    assert all(run.config["data"]["t0"] == 50 for run in runs)


def test_every_builtin_spec_expands_into_valid_runs():
    """The issue-28 sweeps are grids of variants x 7 positional schemes x 2 kinds of head x 3 seeds,
    but for the SCAN add-jump chain's steps (one cell) and the length split's baseline (one seed);
    the machine-tasks one trains every run on that protocol's data."""
    from attnlab.experiments.lookup import experiment as lookup
    from attnlab.experiments.sweep import builtin_sweeps
    from attnlab.tasks.lookup_machine_tasks import MACHINE_TASKS_VARIANTS

    sizes = {name: len(expand(load_spec(name))) for name in builtin_sweeps()}
    assert sizes == {
        "lookup_transformer": 126,
        "lookup_transformer_machine_tasks": 126,
        "lookup_transformer_stop": 63,
        "lookup_transformer_stop_all_layers": 21,
        "lookup_transformer_stop_gate10": 63,
        "lookup_transformer_stop_detached": 63,
        "lookup_transformer_stop_gradient01": 63,
        "lookup_transformer_stop_gradient01_machine_tasks": 105,
        "lookup_transformer_stop_keys": 36,
        "lookup_transformer_stop_machine_tasks": 63,
        "raffel2015_addition_lr": 24,
        "scan_gru_shift": 9,
        "scan_gru_shift_cutoffs": 11,
        "scan_gru_shift_markers": 10,
        "scan_lstm_shift": 5,
        "scan_transformer": 42,
        "scan_transformer_length": 14,
        "scan_transformer_length_cutoffs": 66,
        "scan_transformer_peers": 3,
        "scan_transformer_peers_as_one": 6,
        "scan_transformer_peers_dropout": 3,
        "scan_transformer_gated_heads": 3,
        "scan_transformer_semantic": 3,
        "scan_transformer_shared_heads": 3,
        "scan_transformer_simple": 42,
        "scan_transformer_stop": 42,
    }
    detached = [
        lookup.EXPERIMENT.parse_config(run.config).model.transformer
        for run in expand(load_spec("lookup_transformer_stop_detached"))
    ]
    assert {(model.stop_detached, model.stop_gate_scale) for model in detached} == {(True, 10.0)}
    partial = [
        lookup.EXPERIMENT.parse_config(run.config).model.transformer
        for run in expand(load_spec("lookup_transformer_stop_gradient01"))
    ]
    assert {(model.stop_head_gradient, model.stop_detached, model.stop_gate_scale) for model in partial} == {
        (0.1, False, 10.0)
    }
    for name in ("lookup_transformer_machine_tasks", "lookup_transformer_stop_machine_tasks"):
        configs = [lookup.EXPERIMENT.parse_config(run.config) for run in expand(load_spec(name))]
        assert {config.data.protocol for config in configs} == {"machine_tasks"}
        assert {config.data.variant for config in configs} == {"long", "reversed", "noisy-single"}
    # gradient01's model on all five machine-tasks variants: only the data differ from the grid it met
    # the target on
    on_machine_tasks = [
        lookup.EXPERIMENT.parse_config(run.config)
        for run in expand(load_spec("lookup_transformer_stop_gradient01_machine_tasks"))
    ]
    assert {config.data.protocol for config in on_machine_tasks} == {"machine_tasks"}
    assert {config.data.variant for config in on_machine_tasks} == set(MACHINE_TASKS_VARIANTS)
    assert {repr(config.model.transformer) for config in on_machine_tasks} == {
        repr(lookup.EXPERIMENT.parse_config(run.config).model.transformer)
        for run in expand(load_spec("lookup_transformer_stop_gradient01"))
    }
    from attnlab.experiments.scan import experiment as scan

    stop = [scan.EXPERIMENT.parse_config(run.config) for run in expand(load_spec("scan_transformer_stop"))]
    assert {(config.data.split, config.data.generate) for config in stop} == {("length", False)}
    options = {
        (model.transformer.end_marker, model.transformer.stop_layers, model.transformer.stop_gate_scale)
        for model in (config.model for config in stop)
    }
    assert options == {(True, "all", 10.0)}
    standard = [scan.EXPERIMENT.parse_config(run.config) for run in expand(load_spec("scan_transformer"))]
    assert {config.data.split for config in standard} == {"addprim_jump"}
    baseline = expand(load_spec("scan_transformer_length"))
    assert {run.seed for run in baseline} == {0}
    baseline_configs = [scan.EXPERIMENT.parse_config(run.config) for run in baseline]
    assert {
        (config.data.split, config.model.transformer.stop_from_attention) for config in baseline_configs
    } == {("length", False)}
    assert {config.model.transformer.positional for config in baseline_configs} == {
        config.model.transformer.positional for config in standard
    }
    chain = ("semantic", "peers", "peers_dropout", "shared_heads", "gated_heads", "peers_as_one")
    for step in chain:
        configs = [
            scan.EXPERIMENT.parse_config(run.config) for run in expand(load_spec(f"scan_transformer_{step}"))
        ]
        assert {config.model.transformer.positional for config in configs} == {"relative"}, step
    semantic = [
        scan.EXPERIMENT.parse_config(run.config) for run in expand(load_spec("scan_transformer_semantic"))
    ]
    assert {
        (config.data.split, config.model.transformer.semantic_output, config.model.transformer.end_marker)
        for config in semantic
    } == {("addprim_jump", True, True)}
    peers = [scan.EXPERIMENT.parse_config(run.config) for run in expand(load_spec("scan_transformer_peers"))]
    assert {
        (
            config.data.split,
            config.model.transformer.semantic_output,
            config.model.transformer.semantic_embeddings,
            config.model.transformer.peer_words,
        )
        for config in peers
    } == {("addprim_jump", True, "separate", "both")}
    dropout = [
        scan.EXPERIMENT.parse_config(run.config)
        for run in expand(load_spec("scan_transformer_peers_dropout"))
    ]
    assert {
        (config.model.transformer.peer_words, config.model.transformer.peer_dropout) for config in dropout
    } == {("both", 0.1)}
    shared = [
        scan.EXPERIMENT.parse_config(run.config).model.transformer
        for run in expand(load_spec("scan_transformer_shared_heads"))
    ]
    assert {
        (
            model.peer_words,
            model.peer_dropout,
            model.semantic_heads,
            model.stop_from_attention,
            model.stop_layers,
            model.stop_gate_scale,
        )
        for model in shared
    } == {("both", 0.1, "shared", True, "all", 10.0)}
    gated = [
        scan.EXPERIMENT.parse_config(run.config).model.transformer
        for run in expand(load_spec("scan_transformer_gated_heads"))
    ]
    assert {repr(dataclasses.replace(model, semantic_heads="shared")) for model in gated} == {
        repr(model) for model in shared
    }  # the shared-heads grid but for the gate
    assert {model.semantic_heads for model in gated} == {"gated"}
    as_one = [
        scan.EXPERIMENT.parse_config(run.config).model.transformer
        for run in expand(load_spec("scan_transformer_peers_as_one"))
    ]
    assert {
        (model.peers_as_one, model.target_alone, model.peer_dropout, model.semantic_heads, model.stop_layers)
        for model in as_one
    } == {(True, "command", 0.0, "gated", "all")}
    assert {
        scan.EXPERIMENT.parse_config(run.config).training.epochs
        for run in expand(load_spec("scan_transformer_peers_as_one"))
    } == {100}
    cutoffs = [
        scan.EXPERIMENT.parse_config(run.config).data
        for run in expand(load_spec("scan_transformer_length_cutoffs"))
    ]
    assert all(data.split == "length" and data.generate for data in cutoffs)
    clips = {
        scan.EXPERIMENT.parse_config(run.config).model.transformer.max_relative_distance
        for run in expand(load_spec("scan_transformer_length_cutoffs"))
    }
    assert clips == {"auto"}  # each stack's longest distance in training, at every cut-off
    assert sorted({data.max_train_actions for data in cutoffs}) == [
        22,
        24,
        25,
        26,
        27,
        28,
        30,
        32,
        33,
        36,
        40,
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"config": "memory_addition", "grid": {"model.pooling": []}}, "non-empty list"),
        ({"config": "memory_addition", "grid": ["model.pooling"]}, "'grid' must map"),
        ({"config": "memory_addition", "seeds": [0, "one"]}, "'seeds' must be"),
        ({"config": "memory_addition", "seeds": [1, 1]}, "seed twice"),
        ({"config": "memory_addition", "grid": {"training.seed": [1, 2]}}, "under 'seeds:'"),
        ({"config": "memory_addition", "gird": {}}, "unknown key(s) ['gird']"),
        ({"config": "no_such_config"}, "neither a file nor a built-in config"),
        ({"grid": {}}, "'config' must be"),
    ],
)
def test_bad_spec_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(SweepError) as raised:
        expand(load_spec(path))
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_unknown_grid_key_fails_before_any_run(tmp_path, capsys, make_spec):
    path = make_spec({"training.learnin_rate": [0.1, 0.01]})
    with pytest.raises(SweepError, match="grid key 'training.learnin_rate' is not a valid key"):
        expand(load_spec(path))
    assert _cli([str(path), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "training.learnin_rate" in error and "learning_rate" in error  # names the valid keys
    assert not (tmp_path / "out").exists()


def test_bad_grid_value_names_the_point(tmp_path, make_spec):
    with pytest.raises(SweepError, match=r"grid point \{'model.pooling': 'maximum'\}: .*expected one of"):
        expand(load_spec(make_spec({"model.pooling": ["attention", "maximum"]})))


def test_cli_exit_status_for_bad_input_is_2(tmp_path, make_spec):
    """The real command line (``python -m``), as the CLI will run it."""
    path = make_spec({"training.no_such_key": [1]})
    result = subprocess.run(
        [sys.executable, "-m", "attnlab.experiments.sweep", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("attnlab: error:") and "training.no_such_key" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- running, resuming, failures, aggregation ----------------------------------------------------------


def test_local_sweep_runs_aggregates_and_skips_finished_runs(tmp_path, capsys, make_spec):
    path = make_spec({"model.pooling": ["attention", "mean"]}, seeds=[0, 1])
    out = tmp_path / "out"
    assert _cli([str(path), "--out", str(out)]) == 0
    names = [run.name for run in expand(load_spec(path))]
    assert all(run_status(out / name) == "done" for name in names)

    summary = json.loads((out / "aggregate.json").read_text())
    assert list(summary["cells"]) == ["model.pooling=attention", "model.pooling=mean"]
    cell = summary["cells"]["model.pooling=mean"]
    assert cell["params"] == {"model.pooling": "mean"} and cell["seeds"] == [0, 1]
    accuracies = [
        json.loads((out / "model.pooling=mean" / f"seed{seed}" / "eval" / "summary.json").read_text())[
            "test"
        ]["accuracy"]
        for seed in (0, 1)
    ]
    stats = cell["results"]["test"]["accuracy"]
    assert stats["n"] == 2 and stats["mean"] == pytest.approx(sum(accuracies) / 2)
    assert stats["min"] == min(accuracies) and stats["max"] == max(accuracies)

    rows = list(csv.DictReader((out / "aggregate.csv").open()))
    assert {(row["model.pooling"], row["metric"]) for row in rows} == {
        (pooling, metric) for pooling in ("attention", "mean") for metric in ("accuracy", "mse", "examples")
    }
    table = (out / "aggregate.md").read_text()
    assert "model.pooling=attention · test" in table and "model.pooling=mean · test" in table
    for cell_name in ("model.pooling=attention", "model.pooling=mean"):  # per-cell multiseed files
        assert json.loads((out / cell_name / "aggregate.json").read_text())["seeds"] == [0, 1]
        assert (out / cell_name / "aggregate.md").is_file() and (out / cell_name / "aggregate.csv").is_file()
    assert "4 done, 0 failed, 0 missing" in capsys.readouterr().out

    # Again: nothing runs; adding a seed runs just the new ones.
    before = _summaries(out)
    backend = RecordingBackend()
    report = run_sweep(load_spec(path), out, backend, log=lambda line: None)
    assert backend.names == [] and report.ok and _summaries(out) == before
    more = load_spec(make_spec({"model.pooling": ["attention", "mean"]}, seeds=[0, 1, 2], name="more"))
    run_sweep(more, out, backend, log=lambda line: None)
    assert sorted(backend.names) == ["model.pooling=attention/seed2", "model.pooling=mean/seed2"]

    # A run written before a config key existed holds that key's default: still the same config.
    config_file = out / "model.pooling=mean" / "seed0" / "config.yaml"
    older = yaml.safe_load(config_file.read_text())
    del older["training"]["tensorboard"]  # default false
    config_file.write_text(yaml.safe_dump(older))
    backend = RecordingBackend()
    run_sweep(load_spec(path), out, backend, log=lambda line: None)
    assert backend.names == []

    # A run trained with other display settings (a pilot moved into its sweep) is the same run.
    shown = yaml.safe_load(config_file.read_text())
    shown["training"].update(progress=not shown["training"]["progress"], tensorboard=True)
    config_file.write_text(yaml.safe_dump(shown))
    backend = RecordingBackend()
    run_sweep(load_spec(path), out, backend, log=lambda line: None)
    assert backend.names == []

    # A sweep whose base config changed does not mix its runs with these.
    changed = load_spec(make_spec({"model.pooling": ["attention"]}, extra=["data.t0=30"], name="changed"))
    with pytest.raises(SweepError, match=r"another config \(data.t0: 20 there, 30 in this sweep\)"):
        run_sweep(changed, out, backend, log=lambda line: None)

    # --report-only rebuilds the aggregates from the run directories alone.
    (out / "aggregate.json").unlink()
    assert _cli([str(path), "--out", str(out), "--report-only"]) == 0
    assert json.loads((out / "aggregate.json").read_text())["cells"]["model.pooling=mean"]["seeds"] == [0, 1]

    # --metric: that metric as a grid, cells x test sets.
    capsys.readouterr()
    assert _cli([str(path), "--out", str(out), "--report-only", "--metric", "accuracy"]) == 0
    mean = f"{stats['mean']:.1f} ± {stats['std']:.1f} (n=2)"
    assert f"| mean | {mean} |" in capsys.readouterr().out
    table = (out / "aggregate_accuracy.md").read_text()
    assert table.startswith("accuracy, mean ± std over seeds; rows: model.pooling")
    assert "|  | test |" in table and f"| mean | {mean} |" in table
    assert _cli([str(path), "--out", str(out), "--report-only", "--metric", "seq_acc"]) == 2
    assert "--metric 'seq_acc': the finished runs have the metrics accuracy, examples, mse" in (
        capsys.readouterr().err
    )


def test_failed_runs_are_reported_and_retried_alone(tmp_path, monkeypatch, capsys, make_spec):
    path = make_spec({"training.learning_rate": [0.01, 0.02]})
    out = tmp_path / "out"
    bad = "training.learning_rate=0.02/seed0"
    real_train = runner.train_or_resume

    def flaky(config, run_dir):
        if config["training"]["learning_rate"] == 0.02:
            raise RuntimeError("simulated failure in the data loader")
        return real_train(config, run_dir)

    monkeypatch.setattr(runner, "train_or_resume", flaky)
    assert _cli([str(path), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert f"{bad}: RuntimeError: simulated failure in the data loader" in captured.err
    assert "--retry-failed" in captured.err
    assert run_status(out / bad) == "failed"
    assert "Traceback" in (out / bad / "error.txt").read_text()
    assert json.loads((out / "failures.json").read_text())[0]["run"] == bad
    assert list(json.loads((out / "aggregate.json").read_text())["cells"]) == ["training.learning_rate=0.01"]

    # A plain restart leaves the failed run alone (and still exits non-zero).
    assert _cli([str(path), "--out", str(out)]) == 1
    assert "skipping failed run" in capsys.readouterr().out

    # Fixed: retry it alone.
    monkeypatch.setattr(runner, "train_or_resume", real_train)
    backend = RecordingBackend()
    report = run_sweep(load_spec(path), out, backend, only=[bad], log=lambda line: None)
    assert backend.names == [bad] and report.ok
    assert not (out / bad / "error.txt").exists() and not (out / "failures.json").exists()
    assert len(json.loads((out / "aggregate.json").read_text())["cells"]) == 2

    with pytest.raises(SweepError, match="--only 'lr=1/seed0': no such run"):
        run_sweep(load_spec(path), out, backend, only=["lr=1/seed0"], log=lambda line: None)


def test_a_sweep_run_a_block_at_a_time_succeeds_when_its_block_is_done(tmp_path, capsys, make_spec):
    """``--only`` asks for part of a sweep: the exit status is about that part, while the other
    runs stay missing (a queue of blocks chained with ``&&`` must go on)."""
    path = make_spec({"model.pooling": ["attention", "mean"]})
    out = tmp_path / "out"
    assert _cli([str(path), "--out", str(out), "--only", "model.pooling=mean"]) == 0
    printed = capsys.readouterr().out
    assert "--only: 1 of 1 runs done, 0 failed, 0 missing" in printed
    assert "1 done, 0 failed, 1 missing" in printed
    assert run_status(out / "model.pooling=attention" / "seed0") == "missing"
    # Without --only the sweep runs the rest.
    backend = RecordingBackend()
    report = run_sweep(load_spec(path), out, backend, log=lambda line: None)
    assert backend.names == ["model.pooling=attention/seed0"]
    assert report.ok and report.counts() == {"done": 2, "failed": 0, "missing": 0}


def test_seeds_runs_every_cells_given_seeds_alone(tmp_path, capsys, make_spec):
    """``--seeds 1``: every cell's seed 1 and nothing else (the exit status is about them), so a
    queue can train each cell once before another sweep and the other seeds later; ``--status``
    narrows the same way, and a seed the sweep does not have is named in one line."""
    path = make_spec({"model.pooling": ["attention", "mean"]}, seeds=[0, 1])
    out = tmp_path / "out"
    assert _cli([str(path), "--out", str(out), "--seeds", "1"]) == 0
    printed = capsys.readouterr().out
    assert "--seeds: 2 of 2 runs done, 0 failed, 0 missing" in printed
    for cell in ("model.pooling=attention", "model.pooling=mean"):
        assert run_status(out / cell / "seed1") == "done"
        assert run_status(out / cell / "seed0") == "missing"
    assert _cli([str(path), "--out", str(out), "--status", "--seeds", "0"]) == 0
    status = capsys.readouterr().out
    assert "seed0" in status and "seed1" not in status
    # its time left estimated from the same cells' done seeds
    assert "2 runs: 0 done" in status and "The 2 runs not done need about" in status
    # With --only, the seeds of those cells.
    backend = RecordingBackend()
    run_sweep(load_spec(path), out, backend, only=["model.pooling=mean"], seeds=[0], log=lambda line: None)
    assert backend.names == ["model.pooling=mean/seed0"]
    assert _cli([str(path), "--out", str(out), "--seeds", "2"]) == 2
    assert "--seeds 2: not a seed of the sweep; its seeds: 0, 1" in capsys.readouterr().err
    # A selection of no run, and --seeds where every finished run is aggregated, are refused.
    assert _cli([str(path), "--out", str(out), "--only", "model.pooling=mean/seed0", "--seeds", "1"]) == 2
    assert "no run of the sweep is both" in capsys.readouterr().err
    assert _cli([str(path), "--out", str(out), "--report-only", "--seeds", "1"]) == 2
    assert "--report-only aggregates every finished run" in capsys.readouterr().err


def test_the_aggregate_says_how_each_runs_training_ended(tmp_path, capsys, make_spec):
    """Each cell of ``aggregate.json`` carries, per seed, how its run's training ended (read from
    its config and metrics); a run the cap ended with its lowest validation loss at its last epoch
    (no patience) is named in ``aggregate.md`` and by ``--report-only``; one whose metrics say
    otherwise is not; a run trained on since its evaluation is judged where it was evaluated, and
    a history that cannot be judged is unread, not an error."""
    path = make_spec(seeds=[0, 1, 2], extra=["training.epochs=2"])
    out = tmp_path / "out"
    assert _cli([str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    metrics = {seed: out / "base" / f"seed{seed}" / "metrics.jsonl" for seed in (0, 1, 2)}
    for seed, losses in ((0, [2.0, 1.0]), (1, [1.0, 2.0]), (2, [2.0, None])):  # seed 0 unconverged
        records = [json.loads(line) for line in metrics[seed].read_text().splitlines()]
        assert [record["epoch"] for record in records] == [1, 2]
        for record, loss in zip(records, losses):
            record["valid/loss"] = loss
        metrics[seed].write_text("".join(json.dumps(record) + "\n" for record in records))
    assert _cli([str(path), "--out", str(out), "--report-only"]) == 0
    printed = capsys.readouterr().out
    cell = json.loads((out / "aggregate.json").read_text())["cells"]["base"]
    assert [end and end["ended_by"] for end in cell["training"]] == ["epoch cap", "epoch cap", None]
    assert [end and end["best_epoch"] for end in cell["training"]] == [2, 1, None]
    assert [end and end["unconverged"] for end in cell["training"]] == [True, False, None]
    named = "Ended by the epoch cap before converging"
    assert "base/seed0 (epoch cap 2, best epoch 2)" in printed.split(named)[1]
    assert "base/seed1" not in printed.split(named)[1]
    assert "base/seed0 (epoch cap 2, best epoch 2)" in (out / "aggregate.md").read_text()
    assert sweep.training_end_counts({"base": cell}) == {
        "runs": 3,
        "stop target": 0,
        "patience": 0,
        "epoch cap": 2,
        "unconverged": 1,
        "unfinished": 0,
        "unread": 1,
    }
    # Seed 0 resumed with training.epochs=3 after its evaluation: judged at epoch 2, its cap then.
    records = [json.loads(line) for line in metrics[0].read_text().splitlines()]
    metrics[0].write_text("".join(json.dumps(r) + "\n" for r in [*records, {"epoch": 3, "valid/loss": 0.5}]))
    config_file = out / "base" / "seed0" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("epochs: 2", "epochs: 3"))
    end = sweep.run_training_end(out / "base" / "seed0")
    assert end is not None and (end.ended_by, end.cap, end.best_epoch, end.unconverged) == (
        "epoch cap",
        2,
        2,
        True,
    )


def test_retry_failed_flag(tmp_path, monkeypatch, make_spec):
    path = make_spec(seeds=[0, 1])
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "train_or_resume", lambda config, run_dir: 1 / 0)
    assert _cli([str(path), "--out", str(out)]) == 1
    assert run_status(out / "base/seed0") == run_status(out / "base/seed1") == "failed"
    monkeypatch.undo()
    assert _cli([str(path), "--out", str(out), "--retry-failed"]) == 0
    assert run_status(out / "base/seed0") == run_status(out / "base/seed1") == "done"


def test_interrupted_sweep_restarts_only_what_is_missing(tmp_path, make_spec):
    """Kill a real sweep process (SIGKILL) once some runs finished; the restart runs only the rest."""
    path = make_spec(
        {"training.learning_rate": [0.01, 0.003, 0.001]},
        seeds=[0, 1],
        extra=["training.epochs=3", "training.updates_per_epoch=15"],
    )
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "attnlab.experiments.sweep", str(path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while len(_summaries(out)) < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    finished = _summaries(out)
    names = [run.name for run in expand(load_spec(path))]
    assert 2 <= len(finished) < len(names), "the sweep should have been killed halfway"

    backend = RecordingBackend()
    report = run_sweep(load_spec(path), out, backend, log=lambda line: None)
    assert sorted(backend.names) == sorted(set(names) - set(finished))
    assert report.ok and report.counts() == {"done": 6, "failed": 0, "missing": 0}
    after = _summaries(out)
    assert {name: after[name] for name in finished} == finished  # finished runs untouched
    assert (
        sum(
            cell["seeds"] == [0, 1]
            for cell in json.loads((out / "aggregate.json").read_text())["cells"].values()
        )
        == 3
    )


def test_runs_start_seed_by_seed(tmp_path, make_spec):
    """Every cell's first seed before any cell's second: a campaign stopped halfway has every row."""
    spec = load_spec(make_spec({"model.pooling": ["attention", "mean"]}, seeds=[3, 1]))
    backend = RecordingBackend()
    run_sweep(spec, tmp_path / "out", backend, log=lambda line: None)
    cells = ["model.pooling=attention", "model.pooling=mean"]
    assert backend.names == [f"{cell}/seed{seed}" for seed in (3, 1) for cell in cells]
    assert [run.name for run in expand(spec)] == [f"{cell}/seed{seed}" for cell in cells for seed in (3, 1)]


def test_a_sweep_started_again_trains_the_missing_first_seeds_first(tmp_path, make_spec):
    """With the first cell's first seed done, the next run is the other cell's first seed, not the
    first cell's second (the seeds' order is the spec's, not that of the runs still to train)."""
    spec = load_spec(make_spec({"model.pooling": ["attention", "mean"]}, seeds=[3, 1]))
    out = tmp_path / "out"
    run_sweep(spec, out, RecordingBackend(), only=["model.pooling=attention/seed3"], log=lambda line: None)
    backend = RecordingBackend()
    run_sweep(spec, out, backend, log=lambda line: None)
    assert backend.names == [
        "model.pooling=mean/seed3",
        "model.pooling=attention/seed1",
        "model.pooling=mean/seed1",
    ]


def test_process_pool_backend(tmp_path, make_spec):
    path = make_spec(seeds=[0, 1])
    report = run_sweep(load_spec(path), tmp_path / "out", LocalBackend(jobs=2), log=lambda line: None)
    assert report.ok and sorted(report.executed) == ["base/seed0", "base/seed1"]


# -- runs directory and Ray --------------------------------------------------------------------------


def test_empty_or_absent_runs_directory_is_a_clear_error(tmp_path, capsys, make_spec):
    path = make_spec()
    (tmp_path / "empty").mkdir()
    assert _cli([str(path), "--out", str(tmp_path / "empty"), "--report-only"]) == 2
    assert "holds no finished run" in capsys.readouterr().err
    assert _cli([str(path), "--out", str(tmp_path / "absent"), "--report-only"]) == 2
    assert "does not exist" in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}", "10.255.255.1:6379"])
def test_unreachable_ray_address_fails_fast(tmp_path, capsys, address, make_spec):
    address = address.format(port=_closed_port())
    path = make_spec()
    argv = [str(path), "--out", str(tmp_path / "out"), "--backend", "ray", "--address", address]
    start = time.monotonic()
    assert _cli([*argv, "--connect-timeout", "1"]) == 2
    assert time.monotonic() - start < 5
    assert f"cannot reach the Ray cluster at {address}" in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("*/seed*/eval"))

    # Also when every run is already done (nothing to start Ray for).
    assert _cli(argv[:3]) == 0
    assert _cli([*argv, "--connect-timeout", "1"]) == 2


def test_malformed_ray_address(tmp_path):
    with pytest.raises(SweepError, match="not of the form host:port"):
        RayBackend(address="nowhere").run([RunTask("x", {}, str(tmp_path))], lambda outcome: None)


def test_ray_backend_on_a_real_local_instance(tmp_path, local_ray, make_spec):
    path = make_spec({"model.pooling": ["attention", "mean"]})
    spec = load_spec(path)
    report = run_sweep(spec, tmp_path / "ray", RayBackend(), log=lambda line: None)
    assert report.ok and sorted(report.executed) == [run.name for run in expand(spec)]
    assert local_ray.is_initialized()  # an instance it did not start is left running

    # The same runs in this process give the same numbers.
    run_sweep(spec, tmp_path / "local", LocalBackend(jobs=1), log=lambda line: None)
    ray_cells = json.loads((tmp_path / "ray" / "aggregate.json").read_text())["cells"]
    local_cells = json.loads((tmp_path / "local" / "aggregate.json").read_text())["cells"]
    for cell, entry in local_cells.items():
        for metric, stats in entry["results"]["test"].items():
            assert ray_cells[cell]["results"]["test"][metric]["mean"] == pytest.approx(
                stats["mean"], rel=1e-4
            )


def test_a_relative_data_path_matches_the_absolute_path_a_run_stored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    stored = {"data": {"corpus": str((tmp_path / "corpus").resolve())}}
    assert sweep._first_difference({"data": {"corpus": "corpus"}}, stored) is None
    assert sweep._first_difference({"data": {"corpus": "other"}}, stored) == (
        "data.corpus",
        "other",
        stored["data"]["corpus"],
    )


def _epochs(run_dir: Path, *seconds: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    records = [{"epoch": epoch, "train/loss": 1.0, "seconds": s} for epoch, s in enumerate(seconds, start=1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def test_status_reads_each_runs_state_and_estimates_the_time_left_without_writing(
    tmp_path, capsys, make_spec
):
    """``--status``: done (evaluated), training (its lock held now), interrupted (epochs, no lock),
    failed (error.txt), not started; epochs and training time from metrics.jsonl; the time left at
    the done runs' mean less what the open runs already trained; ``--only`` narrows it."""
    path = make_spec({"model.pooling": ["attention", "mean"]}, seeds=[0, 1, 2])
    out = tmp_path / "out"
    attention, mean = out / "model.pooling=attention", out / "model.pooling=mean"
    _epochs(attention / "seed0", 60, 60)
    (attention / "seed0" / "eval").mkdir()
    (attention / "seed0" / "eval" / "summary.json").write_text("{}")
    _epochs(attention / "seed1", 30)
    (attention / "seed1" / runner.ERROR_FILE).write_text("Traceback ...\nValueError: boom\n")
    _epochs(attention / "seed2", 100)
    _epochs(mean / "seed0", 60)
    _epochs(mean / "seed1", 120, 120, 120)
    (mean / "seed1" / "eval").mkdir()
    (mean / "seed1" / "eval" / "summary.json").write_text("{}")
    files_before = sorted(p for p in out.rglob("*") if p.name != runner.LOCK_FILE)
    with runner.training_lock(mean / "seed0"):
        assert _cli([str(path), "--out", str(out), "--status"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["| run | state | epochs | training time |", "|---|---|---|---|"]
    assert printed[2:8] == [
        "| model.pooling=attention/seed0 | done | 2 | 2 min |",
        "| model.pooling=attention/seed1 | failed | 1 | 0 min |",
        "| model.pooling=attention/seed2 | interrupted | 1 | 2 min |",
        "| model.pooling=mean/seed0 | training | 1 | 1 min |",
        "| model.pooling=mean/seed1 | done | 3 | 6 min |",
        "| model.pooling=mean/seed2 | not started | 0 | 0 min |",
    ]
    # each open run at its cell's done seed: attention 120 - 100, mean 360 - 60 and 360: 680 s
    assert printed[-1] == (
        "6 runs: 2 done, 1 training, 1 interrupted, 1 failed, 1 not started; 11 min of training so far. "
        "The 3 runs not done need about 11 min of one process more (each at its cell's done seeds' "
        "mean, else at all done runs' mean: 4 min)."
    )
    assert sorted(p for p in out.rglob("*") if p.name != runner.LOCK_FILE) == files_before
    assert _cli([str(path), "--out", str(out), "--status", "--only", "model.pooling=mean"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 + 3 + 2 and printed[-1].startswith("3 runs: 1 done, 0 training, 1 interrupted")
    (mean / "seed1" / "eval" / "summary.json").unlink()  # no done seed in the cell: all done runs' mean
    assert _cli([str(path), "--out", str(out), "--status"]) == 0
    # attention 120 - 100; mean/seed0 (interrupted now) 120 - 60; mean/seed1 120 - 360 -> 0; seed2 120
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .endswith(
            "The 4 runs not done need about 3 min of one process more (each at its cell's done seeds' mean, "
            "else at all done runs' mean: 2 min)."
        )
    )

    (mean / "seed1" / "metrics.jsonl").write_text('{"epoch": 1, "seconds": 5}\nnot json\n')
    assert _cli([str(path), "--out", str(out), "--status"]) == 2
    assert f"{mean / 'seed1' / 'metrics.jsonl'} line 2: not a metrics record" in capsys.readouterr().err
