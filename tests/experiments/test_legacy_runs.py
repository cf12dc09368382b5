"""Run directories written before issue 24 (metric names ``train_loss``, ``validation_<metric>``)
still read, report, evaluate and resume, in the current names of :mod:`attnlab.metric_names`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from legacy_runs import BUILDERS, PAPERS, write_legacy_run

from attnlab.cli import main
from attnlab.experiments.memory import experiment as memory
from attnlab.experiments.registry import resolve_config
from attnlab.metric_names import read_metrics, read_summary
from attnlab.plotting.curves import learning_curve_panels
from attnlab.reporting.html import build_report, experiment_percent_metrics

FIXTURES = Path(__file__).parent / "fixtures" / "legacy_reports"

LEGACY_VALIDATION = {
    "lookup": {"loss": [0.9, 0.4], "seq_acc": [40.0, 90.5], "attn_loss": [2.5, 1.25]},
    "scan": {"loss": [0.7, 0.3], "seq_acc": [55.0, 97.25]},
    "memory": {"loss": [0.01, 0.001], "accuracy": [80.0, 100.0]},
    "language_model": {"loss": [5.1, 4.9], "perplexity": [164.0, 134.3]},
}
"""Each system's validation metrics as its runs recorded them before issue 24 (``validation_*``)."""


@pytest.mark.parametrize("system", list(LEGACY_VALIDATION))
def test_a_legacy_metrics_file_reads_in_current_names(tmp_path, system):
    validation = LEGACY_VALIDATION[system]
    write_legacy_run(tmp_path, system, validation, {"test": {"loss": 1.0}})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert "validation_loss" in json.loads(lines[0]) and "train_loss" in json.loads(lines[0])
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [list(record) for record in records] == [
        ["epoch", "train/loss", *(f"valid/{name}" for name in validation), "seconds"]
    ] * 2
    for name, values in validation.items():
        assert [record[f"valid/{name}"] for record in records] == values
    assert [record["train/loss"] for record in records] == [2.0, 1.0]
    assert read_summary(tmp_path / "eval" / "summary.json") == {"test": {"loss": 1.0}}


def test_the_report_draws_every_systems_validation_accuracy_from_legacy_and_current_names(tmp_path):
    """The HTML report's accuracy panel was empty for Lookup Tables and SCAN runs."""
    for system, validation in LEGACY_VALIDATION.items():
        write_legacy_run(tmp_path / system, system, validation, None)
        history = read_metrics(tmp_path / system / "metrics.jsonl")
        panels = learning_curve_panels(history, experiment_percent_metrics(system))
        assert panels["loss"] == ["train/loss", "valid/loss"]
        expected = {
            "lookup": {"accuracy (%)": ["valid/seq_acc"]},
            "scan": {"accuracy (%)": ["valid/seq_acc"]},
            "memory": {"accuracy (%)": ["valid/accuracy"]},
            "language_model": {"valid/perplexity": ["valid/perplexity"]},
        }[system]
        assert {title: keys for title, keys in panels.items() if title != "loss"} == expected
    page = build_report(tmp_path, tmp_path / "report.html").read_text()
    assert page.count("alt='learning curve'") == len(LEGACY_VALIDATION)


def test_a_bad_line_in_a_metrics_file_is_named_or_left_out(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1, "train_loss": 1.5}\n{"epoch": 2, "train_lo\n')
    with pytest.raises(Exception, match=r"metrics.jsonl line 2: not a metrics record"):
        read_metrics(path)
    assert read_metrics(path, skip_bad_lines=True) == [{"epoch": 1, "train/loss": 1.5}]
    assert read_metrics(tmp_path / "absent.jsonl") == []


@pytest.mark.parametrize("paper", PAPERS)
def test_recipe_reports_of_a_legacy_run_tree_print_what_they_printed_before(tmp_path, capsys, paper):
    """``fixtures/legacy_reports/<paper>.txt`` is what ``attnlab reproduce <paper> --report-only``
    printed for the same tree with the code of before issue 24 (the output folder as ``OUT``)."""
    out = tmp_path / paper
    BUILDERS[paper](out)
    assert main(["reproduce", paper, "--report-only", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.replace(str(out), "OUT")
    assert printed == (FIXTURES / f"{paper}.txt").read_text()


# ------------------------------------------------------------------------------ resume, evaluate

LEGACY_KEYS = {
    "train/loss": "train_loss",
    "valid/loss": "validation_loss",
    "valid/accuracy": "validation_accuracy",
}


def _legacy(record: dict) -> dict:
    return {LEGACY_KEYS.get(key, key): value for key, value in record.items()}


def _make_legacy(run_dir: Path) -> None:
    """Rewrite a run as the trainer before issue 24 wrote it: legacy names in ``metrics.jsonl``
    and in the checkpoints' ``history``, and ``training.stop_at`` under its legacy name."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    legacy = [_legacy(json.loads(line)) for line in lines]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in legacy))
    for name in ("best", "last"):
        path = run_dir / "checkpoints" / f"{name}.pt"
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["history"] = [_legacy(record) for record in checkpoint["history"]]
        torch.save(checkpoint, path)
    config = (run_dir / "config.yaml").read_text()
    assert "valid/accuracy: 101.0" in config
    config = config.replace("valid/accuracy: 101.0", "validation_accuracy: 101.0")
    (run_dir / "config.yaml").write_text(config)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _config(epochs: int) -> memory.MemoryExperimentConfig:
    overrides = [
        "data.t0=20",
        "data.test_size=100",
        "training.learning_rate=1e-2",
        "training.batch_size=20",
        "training.updates_per_epoch=10",
        f"training.epochs={epochs}",
        "training.stop_at_accuracy=null",
        "training.stop_at={valid/accuracy: 101.0}",  # never reached: the rule is only carried along
        "training.progress=false",
        "training.device=cpu",
    ]
    return memory.EXPERIMENT.parse_config(resolve_config("memory_addition", overrides))


def test_a_legacy_run_evaluates_and_resumes_to_the_run_trained_straight(tmp_path, caplog):
    straight = memory.EXPERIMENT.train(_config(3), tmp_path / "straight")
    run = tmp_path / "legacy"
    after_one = memory.EXPERIMENT.train(_config(1), run)
    _make_legacy(run)
    assert "validation_accuracy" in (run / "metrics.jsonl").read_text()

    with caplog.at_level("INFO", logger="attnlab.experiments.runs"):
        assert memory.EXPERIMENT.evaluate(run, device_name="cpu") == after_one
    assert "validation loss" in caplog.text  # read from the checkpoint's legacy history

    resumed = memory.EXPERIMENT.train(_config(3), run, resume=True)
    assert resumed == straight
    records = _records(run)
    expected = _records(tmp_path / "straight")
    names = {"epoch", "train/loss", "valid/loss", "valid/accuracy", "seconds"}
    assert all(set(record) == names for record in records)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in records] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in expected
    ]
    history = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["history"]
    assert [set(record) for record in history] == [set(record) for record in records]
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert resumes[-1]["changes"] == {"training.epochs": [1, 3]}  # the legacy stop_at is no change
