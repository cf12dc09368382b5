"""The trainer's early stopping (``training.patience``), its warning when the epoch cap ends a run
still improving, and learning-rate decay on plateau."""

import logging

import pytest
from torch import nn

from attnlab.config import ConfigError
from attnlab.training.convergence import patience_exhausted
from attnlab.training.trainer import Trainer, TrainingConfig


class ScriptedValidation:
    """The toy task, with validation losses read from a script, one per epoch."""

    def __init__(self, task, losses):
        self.task = task
        self.losses = list(losses)
        self.epoch = 0

    def train_batches(self, generator):
        return self.task.train_batches(generator)

    def training_loss(self, model, batch):
        return self.task.training_loss(model, batch)

    def validate(self, model):
        loss = self.losses[self.epoch]
        self.epoch += 1
        return {"loss": loss}


def test_patience_counts_epochs_since_the_best_validation_loss():
    history = [{"valid/loss": loss} for loss in (3.0, 2.0, 2.5, 2.1)]
    assert not patience_exhausted(history, 3)
    assert patience_exhausted(history, 2)
    assert not patience_exhausted(history, None)


def test_training_stops_after_patience_epochs_without_improvement(tmp_path, toy_task):
    task = ScriptedValidation(toy_task, [3.0, 2.0, 2.5, 2.1, 1.0, 0.5])
    config = TrainingConfig(epochs=6, patience=2, progress=False, device="cpu")
    history = Trainer(nn.Linear(1, 1), task, config, tmp_path, {}).fit()
    assert [record["epoch"] for record in history] == [1, 2, 3, 4]


def test_a_resumed_run_that_had_stopped_trains_no_further(tmp_path, toy_task):
    config = TrainingConfig(epochs=6, patience=1, progress=False, device="cpu")
    Trainer(nn.Linear(1, 1), ScriptedValidation(toy_task, [2.0, 2.5, 1.0]), config, tmp_path, {}).fit()
    trainer = Trainer(nn.Linear(1, 1), ScriptedValidation(toy_task, [0.1] * 6), config, tmp_path, {})
    trainer.resume()
    assert len(trainer.fit()) == 2


def test_learning_rate_decays_after_each_epoch_without_improvement_and_survives_resume(tmp_path, toy_task):
    config = TrainingConfig(epochs=3, learning_rate=1e-2, lr_decay=0.5, progress=False, device="cpu")
    trainer = Trainer(nn.Linear(1, 1), ScriptedValidation(toy_task, [2.0, 2.5, 2.6]), config, tmp_path, {})
    trainer.fit()
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-3)
    longer = TrainingConfig(epochs=4, learning_rate=1e-2, lr_decay=0.5, progress=False, device="cpu")
    resumed = Trainer(nn.Linear(1, 1), ScriptedValidation(toy_task, [1.0]), longer, tmp_path, {})
    resumed.resume()
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-3)
    resumed.fit()
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-3)  # 1.0 improved


@pytest.mark.parametrize(("key", "value"), [("patience", 0), ("lr_decay", 1.0), ("lr_decay", 0.0)])
def test_bad_early_stopping_settings_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        TrainingConfig(**{key: value})


class ScriptedAccuracy(ScriptedValidation):
    """The toy task, with a validation accuracy read from a script, one per epoch."""

    def validate(self, model):
        accuracy = self.losses[self.epoch]
        self.epoch += 1
        return {"loss": 1.0, "accuracy": accuracy}


@pytest.mark.parametrize(
    "setting",
    [
        {"stop_at": {"valid/accuracy": 90.0}},
        {"stop_at": {"validation_accuracy": 90.0}},  # the name before issue 24, mapped
        {"stop_at_accuracy": 90.0},
    ],
)
def test_training_stops_at_the_first_epoch_reaching_the_target(tmp_path, toy_task, setting):
    task = ScriptedAccuracy(toy_task, [50.0, 89.9, 90.0, 95.0, 99.0])
    config = TrainingConfig(epochs=5, progress=False, device="cpu", **setting)
    assert config.stop_targets() == {"valid/accuracy": 90.0}
    history = Trainer(nn.Linear(1, 1), task, config, tmp_path, {}).fit()
    assert [record["valid/accuracy"] for record in history] == [50.0, 89.9, 90.0]
    resumed = Trainer(nn.Linear(1, 1), ScriptedAccuracy(toy_task, [0.0] * 5), config, tmp_path, {})
    resumed.resume()
    assert len(resumed.fit()) == 3  # a run that had reached its target trains no further


def test_a_target_on_a_metric_the_task_does_not_report_is_a_config_error(tmp_path, toy_task):
    config = TrainingConfig(epochs=2, progress=False, device="cpu", stop_at={"valid/seq_acc": 100.0})
    with pytest.raises(ConfigError, match="training.stop_at: the validation reports no valid/seq_acc"):
        Trainer(nn.Linear(1, 1), toy_task, config, tmp_path, {}).fit()


@pytest.mark.parametrize(
    "setting",
    [
        {"stop_at": {}},
        {"stop_at": {"accuracy": 1.0}},
        {"stop_at": {"train/loss": 1.0}},
        {"stop_at": {"train_loss": 1.0}},
        {"stop_at": {"valid/": 1.0}},
        {"stop_at": {"valid/accuracy": 1.0}, "stop_at_accuracy": 1.0},
        {"stop_at": {"validation_accuracy": 1.0}, "stop_at_accuracy": 1.0},
    ],
)
def test_bad_stopping_targets_are_refused(setting):
    with pytest.raises(ValueError, match="stop_at"):
        TrainingConfig(**setting)


def test_a_stopping_target_under_its_old_name_is_read_under_the_new_one_with_a_warning(caplog):
    with caplog.at_level("WARNING", logger="attnlab.metric_names"):
        config = TrainingConfig(stop_at={"validation_seq_acc_be": 99.0})
    assert config.stop_at == {"valid/seq_acc_be": 99.0}
    assert "'validation_seq_acc_be' is the old name of 'valid/seq_acc_be'" in caplog.text
    with pytest.raises(ValueError, match=r"'seq_acc' is not a validation metric \(valid/<metric>"):
        TrainingConfig(stop_at={"seq_acc": 99.0})


@pytest.mark.parametrize("metrics", [{"validation_loss": 1.0}, {"valid/loss": 1.0}, {"accuracy": 1.0}])
def test_a_task_whose_validation_does_not_name_its_metrics_as_the_trainer_expects_is_refused(
    tmp_path, toy_task, metrics
):
    task = ScriptedValidation(toy_task, [])
    task.validate = lambda model: metrics
    config = TrainingConfig(epochs=1, progress=False, device="cpu")
    with pytest.raises(TypeError, match="without a prefix, 'loss' among them"):
        Trainer(nn.Linear(1, 1), task, config, tmp_path, {}).fit()


def test_the_trainer_warns_when_the_cap_ends_a_run_before_it_converged(tmp_path, toy_task, caplog):
    config = TrainingConfig(epochs=3, patience=2, progress=False, device="cpu")
    task = ScriptedValidation(toy_task, [3.0, 2.0, 1.0])
    with caplog.at_level(logging.WARNING, logger="attnlab.training.trainer"):
        Trainer(nn.Linear(1, 1), task, config, tmp_path / "capped", {}).fit()
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [
        "training.epochs=3 ended this run before it converged (lowest validation loss at epoch 3); "
        "to train it on, resume it with a larger training.epochs"
    ]


@pytest.mark.parametrize("losses", [[1.0, 2.0, 3.0, 4.0], [3.0, 1.0, 2.0, 3.0]])
def test_no_warning_when_a_rule_ended_the_run_or_the_best_epoch_is_old(tmp_path, toy_task, caplog, losses):
    config = TrainingConfig(epochs=4, patience=2, progress=False, device="cpu")
    with caplog.at_level(logging.WARNING, logger="attnlab.training.trainer"):
        Trainer(nn.Linear(1, 1), ScriptedValidation(toy_task, losses), config, tmp_path, {}).fit()
    assert not [record for record in caplog.records if record.levelno == logging.WARNING]
