"""``training.checkpoint_every``: ``last.pt`` within an epoch, and an exact resume from it."""

import pytest
import torch
from torch import nn

from attnlab.training.checkpoint import CheckpointError, load_checkpoint
from attnlab.training.trainer import Trainer, TrainingConfig


class CarryingTask:
    """Six batches per epoch; the task carries a running sum of the targets from batch to batch
    and adds it to every input, so a resumed epoch must restore it to match."""

    def __init__(self, batches: int = 6) -> None:
        self.batches = batches
        self.carry = torch.zeros(1)

    def train_batches(self, generator):
        self.carry = torch.zeros(1)
        for _ in range(self.batches):
            x = torch.randn(8, 4, generator=generator)
            yield x, x.sum(1, keepdim=True)

    def training_loss(self, model, batch):
        x, y = batch
        loss = nn.functional.mse_loss(model(x + self.carry), y)
        self.carry = self.carry + y.mean()
        return loss

    def validate(self, model):
        with torch.no_grad():
            x = torch.linspace(-1, 1, 8).view(2, 4)
            return {"loss": float(nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)))}

    def carried_state(self):
        return {"carry": self.carry.clone()}

    def restore_carried_state(self, state):
        self.carry = state["carry"]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))  # dropout: RNG matters


def _config(**overrides) -> TrainingConfig:
    return TrainingConfig(
        **{"epochs": 3, "progress": False, "device": "cpu", "checkpoint_every": 2, **overrides}
    )


class Interrupt(Exception):
    pass


def _train_until_interrupted(
    task, run_dir, stop_at_update: int, config: TrainingConfig | None = None
) -> None:
    calls = {"n": 0}
    original = task.training_loss

    def interrupted(model, batch):
        calls["n"] += 1
        if calls["n"] == stop_at_update:
            raise Interrupt
        return original(model, batch)

    task.training_loss = interrupted
    with pytest.raises(Interrupt):
        Trainer(_model(), task, config or _config(), run_dir, {}).fit()
    del task.training_loss


def test_resume_within_an_epoch_matches_an_uninterrupted_run(tmp_path):
    full_model = _model()
    full = Trainer(full_model, CarryingTask(), _config(), tmp_path / "full", {}).fit()
    task = CarryingTask()
    _train_until_interrupted(task, tmp_path / "resumed", stop_at_update=6 + 5)  # epoch 2, update 5
    checkpoint = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    assert checkpoint["epoch"] == 1
    assert checkpoint["within_epoch"]["updates"] == 4
    assert checkpoint["within_epoch"]["carried_state"]["carry"].item() != 0
    resumed_model = _model()
    trainer = Trainer(resumed_model, CarryingTask(), _config(), tmp_path / "resumed", {})
    trainer.resume()
    resumed = trainer.fit()
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in resumed] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in full
    ]
    for name, value in full_model.state_dict().items():
        assert torch.equal(value, resumed_model.state_dict()[name]), name
    assert "within_epoch" not in load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")


def test_without_the_carried_state_the_resumed_run_differs(tmp_path):
    """The test above can fail: a task that does not restore its carry ends elsewhere."""
    full_model = _model()
    Trainer(full_model, CarryingTask(), _config(), tmp_path / "full", {}).fit()
    _train_until_interrupted(CarryingTask(), tmp_path / "resumed", stop_at_update=6 + 5)
    forgetful = CarryingTask()
    forgetful.restore_carried_state = lambda state: None
    resumed_model = _model()
    trainer = Trainer(resumed_model, forgetful, _config(), tmp_path / "resumed", {})
    trainer.resume()
    trainer.fit()
    assert not torch.equal(full_model[0].weight, resumed_model[0].weight)


def test_checkpoints_only_after_epochs_by_default(tmp_path):
    _train_until_interrupted(CarryingTask(), tmp_path, 6 + 5, _config(checkpoint_every=None))
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert checkpoint["epoch"] == 1 and "within_epoch" not in checkpoint


def test_resume_with_fewer_batches_than_the_checkpoint_is_an_error(tmp_path):
    _train_until_interrupted(CarryingTask(), tmp_path, stop_at_update=6 + 5)
    trainer = Trainer(_model(), CarryingTask(batches=3), _config(), tmp_path, {})
    trainer.resume()
    with pytest.raises(CheckpointError, match=r"after update 4 of its epoch.*only 3 batches"):
        trainer.fit()


@pytest.mark.parametrize("every", [0, -2])
def test_checkpoint_every_must_be_positive(every):
    with pytest.raises(ValueError, match="checkpoint_every must be >= 1"):
        _config(checkpoint_every=every)
