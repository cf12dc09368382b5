"""``training.precision``: ``bf16`` runs each update's forward pass under bfloat16 autocast and keeps
the weights, gradients and optimizer state in float32; validation stays in float32."""

import re

import pytest
import torch
from torch import nn

from attnlab.config import ConfigError
from attnlab.training.trainer import Trainer, TrainingConfig, check_precision, training_autocast


class RecordingTask:
    """Regression of y = 2x that records the dtype of the model's output in training and validation."""

    def __init__(self) -> None:
        self.training_dtypes: list[torch.dtype] = []
        self.validation_dtypes: list[torch.dtype] = []
        self.gradient_dtypes: list[torch.dtype] = []

    def train_batches(self, generator):
        for _ in range(3):
            x = torch.randn(16, 4, generator=generator)
            yield x, 2 * x.sum(dim=1, keepdim=True)

    def training_loss(self, model, batch):
        x, y = batch
        output = model(x)
        self.training_dtypes.append(output.dtype)
        output.register_hook(lambda grad: self.gradient_dtypes.append(grad.dtype))
        return nn.functional.mse_loss(output.float(), y)

    def validate(self, model):
        with torch.no_grad():
            x = torch.eye(4)
            output = model(x)
            self.validation_dtypes.append(output.dtype)
            return {"loss": float(nn.functional.mse_loss(output, 2 * x.sum(dim=1, keepdim=True)))}


def _train(tmp_path, precision: str) -> tuple[nn.Module, RecordingTask, Trainer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    task = RecordingTask()
    config = TrainingConfig(epochs=2, progress=False, device="cpu", learning_rate=0.01, precision=precision)
    trainer = Trainer(model, task, config, tmp_path / precision, {})
    trainer.fit()
    return model, task, trainer


def test_bf16_trains_the_forward_pass_in_bfloat16_and_keeps_float32_weights_and_validation(tmp_path):
    model, task, trainer = _train(tmp_path, "bf16")
    assert task.training_dtypes == [torch.bfloat16] * 6
    assert task.validation_dtypes == [torch.float32] * 2
    assert all(parameter.dtype == torch.float32 for parameter in model.parameters())
    assert all(parameter.grad.dtype == torch.float32 for parameter in model.parameters())
    moments = [state["exp_avg"] for state in trainer.optimizer.state.values()]
    assert moments and all(moment.dtype == torch.float32 for moment in moments)
    assert not torch.is_autocast_enabled("cpu")  # left on after training


def test_fp32_trains_as_before_and_bf16_differs_from_it_only_by_rounding(tmp_path):
    full, task, _ = _train(tmp_path, "fp32")
    assert task.training_dtypes == [torch.float32] * 6
    mixed, _, _ = _train(tmp_path, "bf16")
    for (name, a), b in zip(full.named_parameters(), mixed.parameters(), strict=True):
        assert not torch.equal(a, b), name  # bfloat16's rounding reaches every weight
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.02, msg=name)


def test_training_autocast_is_a_no_op_for_fp32_and_bfloat16_autocast_for_bf16():
    layer = nn.Linear(3, 2)
    with training_autocast("fp32", torch.device("cpu")):
        assert layer(torch.ones(1, 3)).dtype == torch.float32
    with training_autocast("bf16", torch.device("cpu")):
        assert layer(torch.ones(1, 3)).dtype == torch.bfloat16


@pytest.mark.parametrize("precision", ["fp16", "float32", "BF16", ""])
def test_an_unknown_precision_is_refused(precision):
    expected = f"precision must be one of ['fp32', 'bf16'], got '{precision}'"
    with pytest.raises(ValueError, match=re.escape(expected)):
        TrainingConfig(precision=precision)


def test_bf16_on_a_gpu_without_bfloat16_is_a_config_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    with pytest.raises(ConfigError, match=r"training.precision: cuda:0 has no bfloat16 support .*use fp32"):
        check_precision("bf16", torch.device("cuda:0"))
    check_precision("fp32", torch.device("cuda:0"))  # nothing to check
    with pytest.raises(ConfigError, match="training.precision: bf16 trains on cpu or cuda, not mps"):
        check_precision("bf16", torch.device("mps"))


def test_a_bf16_run_resumed_after_an_epoch_ends_as_the_uninterrupted_run(tmp_path):
    full, _, _ = _train(tmp_path, "bf16")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    config = TrainingConfig(epochs=1, progress=False, device="cpu", learning_rate=0.01, precision="bf16")
    Trainer(model, RecordingTask(), config, tmp_path / "resumed", {}).fit()
    torch.manual_seed(1)  # resuming restores the weights and the random state from last.pt
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    config = TrainingConfig(epochs=2, progress=False, device="cpu", learning_rate=0.01, precision="bf16")
    trainer = Trainer(model, RecordingTask(), config, tmp_path / "resumed", {})
    trainer.resume()
    trainer.fit()
    for (name, value), resumed in zip(full.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(value, resumed), name
