"""``training.ema_decay``: validation, checkpoints and evaluation read an exponential moving average
of the weights, training goes on from the weights themselves, and a resumed run is exact."""

import pytest
import torch
from torch import nn

from attnlab.training.checkpoint import load_checkpoint
from attnlab.training.trainer import Trainer, TrainingConfig


class LinearTask:
    """Four batches an epoch of a noisy linear regression; validation records the weights it saw."""

    def __init__(self) -> None:
        self.validated: list[dict[str, torch.Tensor]] = []

    def train_batches(self, generator):
        for _ in range(4):
            x = torch.randn(8, 3, generator=generator)
            yield x, x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(8, 1, generator=generator)

    def training_loss(self, model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x), y)

    def validate(self, model):
        self.validated.append({name: value.clone() for name, value in model.state_dict().items()})
        with torch.no_grad():
            x = torch.eye(3)
            return {"loss": float(nn.functional.mse_loss(model(x), torch.tensor([[1.0], [-2.0], [0.5]])))}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.Linear(8, 1))


def _config(**overrides) -> TrainingConfig:
    settings = {"epochs": 2, "progress": False, "device": "cpu", "learning_rate": 0.05}
    return TrainingConfig(**{**settings, **overrides})


def _trained_weights_after_each_update(model: nn.Module, trainer: Trainer) -> list[dict[str, torch.Tensor]]:
    """Record the model's weights after every optimizer step of ``trainer``."""
    seen: list[dict[str, torch.Tensor]] = []
    trainer.optimizer.register_step_post_hook(
        lambda *_: seen.append({name: value.detach().clone() for name, value in model.state_dict().items()})
    )
    return seen


def test_the_average_follows_its_definition_and_is_what_is_validated_and_saved(tmp_path):
    model, task = _model(), LinearTask()
    trainer = Trainer(model, task, _config(ema_decay=0.75), tmp_path, {})
    updates = _trained_weights_after_each_update(model, trainer)
    trainer.fit()

    # a_1 = w_1, then a_k = 0.75 a_(k-1) + 0.25 w_k, over the 8 updates of two epochs
    expected = dict(updates[0])
    averages_at_epoch_ends = []
    for k, weights in enumerate(updates[1:], start=2):
        expected = {name: 0.75 * expected[name] + 0.25 * weights[name] for name in weights}
        if k % 4 == 0:
            averages_at_epoch_ends.append(expected)
    assert len(updates) == 8 and len(task.validated) == 2
    for validated, average in zip(task.validated, averages_at_epoch_ends, strict=True):
        for name, value in validated.items():
            torch.testing.assert_close(value, average[name], msg=name)

    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["averaged_updates"] == 8
    for name, value in last["model"].items():
        torch.testing.assert_close(value, averages_at_epoch_ends[-1][name], msg=name)
        torch.testing.assert_close(last["training_model"][name], updates[-1][name], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(model.state_dict()[name], updates[-1][name], rtol=0, atol=0, msg=name)
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert "training_model" not in best
    best_epoch = min(range(2), key=lambda i: trainer.history[i]["valid/loss"])
    for name, value in best["model"].items():
        torch.testing.assert_close(value, averages_at_epoch_ends[best_epoch][name], msg=name)


def test_averaging_does_not_change_the_training_itself(tmp_path):
    plain_model = _model()
    plain = Trainer(plain_model, LinearTask(), _config(), tmp_path / "plain", {}).fit()
    averaged_model = _model()
    averaged = Trainer(averaged_model, LinearTask(), _config(ema_decay=0.9), tmp_path / "averaged", {}).fit()
    for name, value in averaged_model.state_dict().items():
        torch.testing.assert_close(value, plain_model.state_dict()[name], rtol=0, atol=0, msg=name)
    # the training losses are the same; the validation, of other weights, is not
    assert [record["train/loss"] for record in averaged] == [record["train/loss"] for record in plain]
    assert [record["valid/loss"] for record in averaged] != [record["valid/loss"] for record in plain]


class Interrupt(Exception):
    pass


def test_a_run_resumed_within_an_epoch_ends_with_the_same_average_and_weights(tmp_path):
    config = _config(ema_decay=0.8, epochs=3, checkpoint_every=3)
    full_model = _model()
    full = Trainer(full_model, LinearTask(), config, tmp_path / "full", {}).fit()

    task = LinearTask()
    original, calls = task.training_loss, {"n": 0}

    def interrupted(model, batch):
        calls["n"] += 1
        if calls["n"] == 4 + 4:  # epoch 2, update 4: last.pt was written after its update 3
            raise Interrupt
        return original(model, batch)

    task.training_loss = interrupted
    with pytest.raises(Interrupt):
        Trainer(_model(), task, config, tmp_path / "resumed", {}).fit()
    del task.training_loss
    resumed_model = _model()
    trainer = Trainer(resumed_model, task, config, tmp_path / "resumed", {})
    trainer.resume()
    resumed = trainer.fit()

    assert resumed == [{**record, "seconds": resumed[i]["seconds"]} for i, record in enumerate(full)]
    for which in ("model", "training_model"):
        expected = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")[which]
        found = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")[which]
        for name, value in found.items():
            torch.testing.assert_close(value, expected[name], rtol=0, atol=0, msg=f"{which}.{name}")


def test_resuming_with_averaging_needs_a_checkpoint_written_with_it(tmp_path):
    Trainer(_model(), LinearTask(), _config(epochs=1), tmp_path, {}).fit()
    trainer = Trainer(_model(), LinearTask(), _config(ema_decay=0.9), tmp_path, {})
    with pytest.raises(Exception, match="not written by a run with training.ema_decay"):
        trainer.resume()


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises(ValueError, match="ema_decay must be in \\(0, 1\\) or null"):
        TrainingConfig(ema_decay=decay)
