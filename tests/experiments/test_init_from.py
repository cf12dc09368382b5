"""``training.init_from``: a new run that starts from another run's weights (a second training
phase, fine-tuning), with its own optimizer, history and epochs; bad checkpoints are clear errors."""

import json
import shutil

import pytest
import torch
import yaml

from attnlab.cli import main
from attnlab.training.checkpoint import load_checkpoint
from attnlab.training.trainer import TrainingConfig


def _weights(run):
    return load_checkpoint(run / "checkpoints" / "last.pt")["model"]


def _train(run, overrides, *extra):
    return main(["train", "memory_addition", *overrides, *extra, "--run-dir", str(run)])


def test_a_run_starts_from_the_weights_of_another_runs_checkpoint(tmp_path, tiny_memory_addition, capsys):
    first = tmp_path / "first"
    assert _train(first, tiny_memory_addition, "training.epochs=2") == 0
    checkpoint = first / "checkpoints" / "best.pt"

    # At a vanishing learning rate the second run ends where the first one's weights were ...
    second = tmp_path / "second"
    init = f"training.init_from={checkpoint}"
    assert _train(second, tiny_memory_addition, init, "training.learning_rate=1e-12") == 0
    start = load_checkpoint(checkpoint)["model"]
    for name, value in _weights(second).items():
        torch.testing.assert_close(value, start[name], rtol=0, atol=1e-8, msg=name)
    # ... which a run from the seeded initialisation does not.
    fresh = tmp_path / "fresh"
    assert _train(fresh, tiny_memory_addition, "training.learning_rate=1e-12") == 0
    assert any(not torch.allclose(value, start[name]) for name, value in _weights(fresh).items())

    # A new training: its own history from epoch 1, and the checkpoint's absolute path in its config.
    history = [json.loads(line) for line in (second / "metrics.jsonl").read_text().splitlines()]
    assert [record["epoch"] for record in history] == [1]
    saved = yaml.safe_load((second / "config.yaml").read_text())["training"]
    assert saved["init_from"] == str(checkpoint.resolve())
    assert f"initialised from {checkpoint.resolve()}" in (second / "train.log").read_text()


def test_a_resumed_run_continues_from_its_own_checkpoint_not_the_initial_one(tmp_path, tiny_memory_addition):
    first = tmp_path / "first"
    assert _train(first, tiny_memory_addition) == 0
    init = f"training.init_from={first / 'checkpoints' / 'best.pt'}"

    straight = tmp_path / "straight"
    assert _train(straight, tiny_memory_addition, init, "training.epochs=2") == 0
    halves = tmp_path / "halves"
    assert _train(halves, tiny_memory_addition, init) == 0
    shutil.rmtree(first)  # a resume reads its own last.pt: the initial checkpoint may be gone
    assert main(["train", "memory_addition", "--run-dir", str(halves), "--resume", "training.epochs=2"]) == 0
    expected = _weights(straight)
    for name, value in _weights(halves).items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0, msg=name)


def test_a_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path, tiny_memory_addition, capsys):
    missing = tmp_path / "nowhere.pt"
    assert _train(tmp_path / "a", tiny_memory_addition, f"training.init_from={missing}") == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert f"training.init_from: checkpoint {missing} does not exist" in error
    assert not (tmp_path / "a").exists()

    other = tmp_path / "other"  # another model: a wider hidden layer
    assert _train(other, [*tiny_memory_addition, "model.hidden_dim=24"]) == 0
    capsys.readouterr()
    foreign = other / "checkpoints" / "best.pt"
    assert _train(tmp_path / "b", tiny_memory_addition, f"training.init_from={foreign}") == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert f"{foreign} belongs to another model" in error and "hidden_dim" in error

    not_a_checkpoint = tmp_path / "notes.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    assert _train(tmp_path / "c", tiny_memory_addition, f"training.init_from={not_a_checkpoint}") == 2
    assert "is not a readable attnlab checkpoint" in capsys.readouterr().err


def test_a_relative_initial_checkpoint_is_kept_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert TrainingConfig(init_from="first/checkpoints/best.pt").init_from == str(
        tmp_path.resolve() / "first" / "checkpoints" / "best.pt"
    )
    with pytest.raises(ValueError, match="init_from must be the path of a checkpoint"):
        TrainingConfig(init_from=" ")
