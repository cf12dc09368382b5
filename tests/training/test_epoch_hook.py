"""The trainer's optional ``start_epoch`` hook: called before every epoch, also after a resume."""

from torch import nn

from attnlab.training.trainer import Trainer, TrainingConfig


def test_start_epoch_is_called_in_train_mode_before_each_epoch_and_on_resume(tmp_path, toy_task):
    calls: list[tuple[int, bool]] = []
    toy_task.start_epoch = lambda model, epoch: calls.append((epoch, model.training))
    config = TrainingConfig(epochs=2, progress=False, device="cpu")
    Trainer(nn.Linear(1, 1), toy_task, config, tmp_path, {}).fit()
    assert calls == [(0, True), (1, True)]
    calls.clear()
    longer = TrainingConfig(epochs=4, progress=False, device="cpu")
    trainer = Trainer(nn.Linear(1, 1), toy_task, longer, tmp_path, {})
    trainer.resume()
    trainer.fit()
    assert calls == [(2, True), (3, True)]
