"""``bench_scan.py --converge``: reading a finished SCAN run and comparing the two protocols."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from attnlab.experiments.registry import resolve_config


@pytest.fixture(scope="module")
def bench(load_benchmark_module: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark_module("bench_scan.py")


def _fake_run(run_dir: Path, valid_losses: list[float], seconds: list[float], accuracy: float) -> Path:
    """A finished run directory: the config (generated simple split, 100 training commands), one
    metrics record per epoch in the current metric names, and a test summary."""
    run_dir.mkdir(parents=True)
    config = resolve_config("scan", ["data.split=simple", "data.generate=true", "data.train_limit=100"])
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    records = [
        {"epoch": epoch, "train/loss": 1.0, "valid/loss": loss, "seconds": second}
        for epoch, (loss, second) in enumerate(zip(valid_losses, seconds), start=1)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (run_dir / "eval").mkdir()
    summary = {"test": {"seq_acc": accuracy / 2, "seq_acc_given_length": accuracy, "examples": 10.0}}
    (run_dir / "eval" / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_finished_run_reads_the_best_epoch_and_its_time(bench: ModuleType, tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run", [0.5, 0.2, 0.3], [10.0, 20.0, 40.0], 90.0)
    row = bench.finished_run(run, batch_size=1)
    training_examples = row["updates"] / row["epochs"]
    assert row["best_epoch"] == 2
    assert row["seconds_to_best"] == pytest.approx(30.0)
    assert row["seconds"] == pytest.approx(70.0)
    assert 0 < training_examples <= 100
    assert row["examples_per_s"] == pytest.approx(3 * training_examples / 70.0)
    assert (row["seq_acc"], row["seq_acc_given_length"]) == (45.0, 90.0)


def test_compare_protocols_gives_statistics_over_seeds_and_the_time_ratio(bench: ModuleType) -> None:
    def row(given: float, seconds: float) -> dict[str, float]:
        return {"seq_acc": given / 2, "seq_acc_given_length": given, "seconds_to_best": seconds}

    text = bench.compare_protocols(
        {"batched": [row(60.0, 100.0), row(80.0, 300.0)], "one_at_a_time": [row(99.0, 4000.0)]}
    )
    lines = text.splitlines()
    assert lines[0] == (
        "batched: <eos> 35.0 ± 7.1 (median 35.0; n=2); length given 70.0 ± 14.1 (median 70.0; n=2);"
        " 200 s to the best checkpoint"
    )
    assert lines[1].startswith("one_at_a_time: <eos> 49.5 ± 0.0 (median 49.5; n=1)")
    assert lines[2] == "time to the best checkpoint: 20.0x shorter batched (target: >= 10x)"


def test_converge_overrides_apply_to_both_protocols_after_the_protocol_settings(bench: ModuleType) -> None:
    import argparse

    args = argparse.Namespace(
        split="addprim_jump", device="cpu", overrides=["model.end_marker=true", "training.patience=3"]
    )
    batched = bench.protocol_overrides(args, batch_size=64, epochs=50, seed=2)
    single = bench.protocol_overrides(args, batch_size=1, epochs=17, seed=2)
    assert batched[-2:] == single[-2:] == ["model.end_marker=true", "training.patience=3"]
    assert "training.batch_size=64" in batched and "training.batch_size=1" in single
    config = resolve_config("scan", single)
    assert config["model"]["end_marker"] is True and config["training"]["patience"] == 3
    assert config["training"]["epochs"] == 17 and config["data"]["split"] == "addprim_jump"
