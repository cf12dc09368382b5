"""An unknown or unavailable device is one line of user error (exit 2) that lists the devices
this machine has, raised before a run directory is created."""

import pytest
import torch

from attnlab.cli import main
from attnlab.config import ConfigError
from attnlab.training.trainer import available_devices, resolve_device


def _one_line_error(capsys) -> str:
    error = capsys.readouterr().err
    assert "Traceback" not in error
    lines = error.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:"), error
    return lines[0]


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_available_devices_without_accelerators(no_cuda):
    assert available_devices() == ["auto", "cpu"]
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("gpu", "unknown device 'gpu'"),
        ("cuda", "'cuda' is not available"),
        ("cuda:1", "'cuda:1' is not available"),
    ],
)
def test_bad_device_is_a_config_error_listing_the_available_ones(no_cuda, name, fragment):
    with pytest.raises(ConfigError) as error:
        resolve_device(name, "training.device")
    message = str(error.value)
    assert message.startswith("training.device:") and fragment in message
    assert "available: auto, cpu" in message


@pytest.mark.parametrize("device", ["gpu", "cuda"])
def test_cli_train_on_a_bad_device_exits_2_before_writing(no_cuda, device, tiny_overrides, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "lookup", *tiny_overrides(**{"training.device": device}), "--run-dir", str(run)]
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert "training.device" in line and repr(device) in line and "available: auto, cpu" in line
    assert not run.exists()


def test_cli_evaluate_on_a_bad_device_exits_2(no_cuda, tiny_overrides, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "lookup", *tiny_overrides(**{"training.epochs": 1}), "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--device", "gpu"]) == 2
    line = _one_line_error(capsys)
    assert "--device" in line and "'gpu'" in line and "available: auto, cpu" in line
