"""Optional TensorBoard logging (``training.tensorboard``): scalars and attention images per epoch,
exact resume without duplicate steps, off by default, clear errors (tiny runs, seconds each)."""

import importlib.util
import json
import sys

import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.config import ConfigError
from attnlab.experiments.language_model import experiment as lm
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.scan import experiment
from attnlab.tasks.corpus import copy_pattern_documents, write_wikitext_folder
from attnlab.training.checkpoint import load_checkpoint
from attnlab.training.trainer import Trainer, TrainingConfig

requires_tensorboard = pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="tensorboard is not installed (pip install 'attnlab[tensorboard]')",
)

SCALARS = {"train/loss", "valid/loss", "valid/seq_acc", "seconds"}


@pytest.fixture(scope="module")
def scan_files(make_scan_files):
    """300 training and 50 test pairs of SCAN without 'around' / 'thrice' (short sequences)."""
    return make_scan_files("scan_tb", 300, 50, without=("around", "thrice"))


def scan_config(files, **overrides):
    settings = {
        "data.split": "files",
        "data.train_file": files["train"],
        "data.test_files": f"{{test: {files['test']}}}",
        "model.embedding_dim": 8,
        "model.encoder_hidden_dim": 8,
        "model.decoder_hidden_dim": 16,
        "model.encoder_layers": 1,
        "model.dropout": 0.1,
        "training.epochs": 2,
        "training.batch_size": 32,
        "training.progress": "false",
        "training.device": "cpu",
        **overrides,
    }
    return experiment.EXPERIMENT.parse_config(
        resolve_config("scan", [f"{k}={v}" for k, v in settings.items()])
    )


def read_events(run_dir):
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    return events


def history(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def scan_runs(scan_files, tmp_path_factory):
    """The same tiny SCAN run with TensorBoard off (the default) and on."""
    folder = tmp_path_factory.mktemp("scan_runs")
    experiment.EXPERIMENT.train(scan_config(scan_files), folder / "off")
    experiment.EXPERIMENT.train(scan_config(scan_files, **{"training.tensorboard": "true"}), folder / "on")
    return {"off": folder / "off", "on": folder / "on"}


@requires_tensorboard
def test_off_by_default_and_logging_does_not_change_training(scan_files, scan_runs):
    assert scan_config(scan_files).training.tensorboard is False
    assert not (scan_runs["off"] / "tensorboard").exists()
    assert (scan_runs["on"] / "tensorboard").is_dir()
    off, on = (
        load_checkpoint(scan_runs[name] / "checkpoints" / "last.pt")["model"] for name in ("off", "on")
    )
    assert all(torch.equal(off[name], on[name]) for name in off)
    strip = [{k: v for k, v in record.items() if k != "seconds"} for record in history(scan_runs["on"])]
    assert strip == [
        {k: v for k, v in record.items() if k != "seconds"} for record in history(scan_runs["off"])
    ]


@requires_tensorboard
def test_scan_run_logs_every_metric_and_attention_images_per_epoch(scan_runs):
    events = read_events(scan_runs["on"])
    assert set(events.Tags()["scalars"]) == SCALARS
    records = history(scan_runs["on"])
    for tag in SCALARS:
        logged = events.Scalars(tag)
        assert [event.step for event in logged] == [1, 2]
        assert [event.value for event in logged] == pytest.approx([r[tag] for r in records], rel=1e-6)
    assert set(events.Tags()["images"]) == {"attention/validation_0", "attention/validation_1"}
    for tag in events.Tags()["images"]:
        images = events.Images(tag)
        assert [image.step for image in images] == [1, 2]
        assert all(image.width >= 1 and image.height >= 1 for image in images)


@requires_tensorboard
def test_resume_replaces_the_interrupted_epoch_without_duplicate_steps(scan_files, tmp_path, monkeypatch):
    config = scan_config(scan_files, **{"training.tensorboard": "true", "training.epochs": 3})
    run_dir = tmp_path / "run"
    original = Trainer._save

    def crash_in_epoch_two(self, epochs_done, improved):
        if epochs_done == 2:  # epoch 2 is already in TensorBoard but not in last.pt
            raise KeyboardInterrupt
        original(self, epochs_done, improved)

    monkeypatch.setattr(Trainer, "_save", crash_in_epoch_two)
    with pytest.raises(KeyboardInterrupt):
        experiment.EXPERIMENT.train(config, run_dir)
    assert [event.step for event in read_events(run_dir).Scalars("train/loss")] == [1, 2]
    monkeypatch.setattr(Trainer, "_save", original)
    experiment.EXPERIMENT.train(config, run_dir, resume=True)

    events, records = read_events(run_dir), history(run_dir)
    for tag in ("train/loss", "valid/loss"):
        logged = events.Scalars(tag)
        assert [event.step for event in logged] == [1, 2, 3]
        assert [event.value for event in logged] == pytest.approx([r[tag] for r in records], rel=1e-6)
    assert [image.step for image in events.Images("attention/validation_0")] == [1, 2, 3]


@requires_tensorboard
def test_language_model_logs_its_window_attention(tmp_path):
    generator = torch.Generator().manual_seed(0)
    documents = {
        split: copy_pattern_documents(count, span=3, words=20, generator=generator)
        for split, count in (("train", 24), ("valid", 4), ("test", 4))
    }
    corpus = write_wikitext_folder(tmp_path / "corpus", documents)
    overrides = {
        "data.corpus": corpus,
        "model.variant": "attention",
        "model.window": 4,
        "model.embedding_dim": 8,
        "model.hidden_dim": "null",
        "model.match_lstm_hidden": 16,
        "training.batch_size": 4,
        "training.bptt": 10,
        "training.epochs": 1,
        "training.progress": "false",
        "training.device": "cpu",
        "training.tensorboard": "true",
        "evaluation.batch_size": 2,
    }
    config = lm.EXPERIMENT.parse_config(
        resolve_config("lm_wikitext2", [f"{k}={v}" for k, v in overrides.items()])
    )
    lm.EXPERIMENT.train(config, tmp_path / "run")
    events = read_events(tmp_path / "run")
    assert {"train/loss", "valid/loss", "valid/perplexity", "seconds"} <= set(events.Tags()["scalars"])
    (image,) = events.Images("attention/validation_stream_0")
    assert (image.step, image.height, image.width) == (1, 10, 4)


@requires_tensorboard
def test_task_without_attention_hook_logs_scalars_only(tmp_path, toy_task):
    config = TrainingConfig(epochs=2, progress=False, device="cpu", tensorboard=True)
    Trainer(nn.Linear(1, 1), toy_task, config, tmp_path, {"toy": 1}).fit()
    tags = read_events(tmp_path).Tags()
    assert set(tags["scalars"]) == {"train/loss", "valid/loss", "seconds"}
    assert tags["images"] == []


@requires_tensorboard
def test_bad_attention_sample_is_an_error_naming_it(tmp_path, toy_task):
    task = toy_task
    task.attention_samples = lambda model: {"flat": torch.ones(3)}
    config = TrainingConfig(epochs=1, progress=False, device="cpu", tensorboard=True)
    with pytest.raises(ValueError, match=r"attention_samples\(\)\['flat'\].*\[target_len, source_len\]"):
        Trainer(nn.Linear(1, 1), task, config, tmp_path, {"toy": 1}).fit()


@pytest.mark.parametrize("value", ["maybe", "1", "'true'"])
def test_non_bool_value_is_a_config_error_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"training\.tensorboard: expected bool"):
        experiment.EXPERIMENT.parse_config(resolve_config("scan", [f"training.tensorboard={value}"]))
    with pytest.raises(ValueError, match="tensorboard must be true or false"):
        TrainingConfig(tensorboard=value)


def test_non_bool_value_is_one_line_on_the_command_line(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "scan", "training.tensorboard=yes please", "--run-dir", str(run)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("attnlab: error:") and "training.tensorboard" in error
    assert "Traceback" not in error and not run.exists()


def test_missing_tensorboard_package_says_how_to_install(tmp_path, monkeypatch, toy_task):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if missing
    config = TrainingConfig(epochs=1, progress=False, device="cpu", tensorboard=True)
    with pytest.raises(ConfigError, match=r"pip install 'attnlab\[tensorboard\]'"):
        Trainer(nn.Linear(1, 1), toy_task, config, tmp_path, {"toy": 1})
    assert not (tmp_path / "tensorboard").exists()
