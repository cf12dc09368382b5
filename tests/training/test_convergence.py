"""How a run's training ended (attnlab.training.convergence); the trainer's warning at the cap is
tested in test_early_stopping.py."""

import pytest

from attnlab.training.convergence import training_end


def _history(losses, accuracies=None):
    records = [{"epoch": epoch, "valid/loss": loss} for epoch, loss in enumerate(losses, start=1)]
    for record, accuracy in zip(records, accuracies or []):
        record["valid/seq_acc"] = accuracy
    return records


@pytest.mark.parametrize(
    ("losses", "accuracies", "epochs", "patience", "ended_by", "best", "unconverged"),
    [
        # the last epoch reached the target: a stopping rule, whatever the loss did
        ([3.0, 2.0, 1.0], [50.0, 90.0, 100.0], 10, 5, "stop target", 3, False),
        # two epochs without a lower loss, patience 2
        ([3.0, 1.0, 2.0, 1.5], None, 10, 2, "patience", 2, False),
        # the cap with the lowest loss at the last epoch
        ([3.0, 2.0, 1.0], None, 3, 2, "epoch cap", 3, True),
        # the cap with the lowest loss one epoch before it: patience 2 would have gone on
        ([3.0, 1.0, 1.5], None, 3, 2, "epoch cap", 2, True),
        # the cap reached exactly as patience ran out: the rule ended it
        ([1.0, 2.0, 3.0], None, 3, 2, "patience", 1, False),
        # no patience: improving only if the last epoch is the best
        ([3.0, 1.0, 1.5], None, 3, None, "epoch cap", 2, False),
        ([3.0, 2.0, 1.0], None, 3, None, "epoch cap", 3, True),
        # fewer epochs than the cap and no rule met: interrupted
        ([3.0, 2.0], None, 5, 3, "unfinished", 2, False),
    ],
)
def test_training_end(losses, accuracies, epochs, patience, ended_by, best, unconverged):
    targets = {"valid/seq_acc": 100.0} if accuracies else {}
    end = training_end(_history(losses, accuracies), epochs, patience, targets)
    assert end is not None
    assert (end.ended_by, end.best_epoch, end.epochs, end.cap) == (ended_by, best, len(losses), epochs)
    assert end.unconverged is unconverged
    assert end.to_dict()["unconverged"] is unconverged


def test_the_best_epoch_is_the_first_with_the_lowest_loss_and_no_history_has_no_end():
    end = training_end(_history([2.0, 1.0, 1.0]), 3, 5, {})
    assert end is not None and end.best_epoch == 2
    assert training_end([], 3, 5, {}) is None


def test_a_nan_loss_is_never_the_best_as_the_trainer_keeps_best_pt():
    end = training_end(_history([float("nan"), 2.0, 1.5]), 3, 5, {})
    assert end is not None and end.best_epoch == 3


@pytest.mark.parametrize(
    "bad",
    [{"epoch": 2}, {"epoch": 2, "valid/loss": None}, {"epoch": "2", "valid/loss": 1.0}, {"valid/loss": 1.0}],
)
def test_a_history_it_cannot_judge_has_no_end(bad):
    """A record without a whole epoch and a numeric validation loss (a hand-edited or foreign
    metrics.jsonl): None, not an exception, since reports read every finished run."""
    assert training_end([{"epoch": 1, "valid/loss": 2.0}, bad], 2, 5, {}) is None


def test_a_stop_metric_that_is_not_a_number_is_not_reached():
    history = [{"epoch": 1, "valid/loss": 1.0, "valid/seq_acc": None}]
    end = training_end(history, 1, None, {"valid/seq_acc": 100.0})
    assert end is not None and end.ended_by == "epoch cap"
