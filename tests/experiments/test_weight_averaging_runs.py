"""``training.ema_decay`` through the CLI: the run evaluates the average, `attnlab evaluate` reads the
same weights again, and a resume may not switch the averaging or change its decay."""

import json

import torch

from attnlab.cli import main
from attnlab.training.checkpoint import load_checkpoint


def _train(run, overrides, *extra):
    return main(["train", "memory_addition", *overrides, *extra, "--run-dir", str(run)])


def test_a_run_with_averaged_weights_evaluates_and_resumes_them(tmp_path, tiny_memory_addition, capsys):
    run = tmp_path / "run"
    assert _train(run, tiny_memory_addition, "training.ema_decay=0.5", "training.epochs=2") == 0
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["averaged_updates"] == 10  # 5 updates an epoch
    assert any(not torch.equal(value, last["training_model"][name]) for name, value in last["model"].items())
    summary = json.loads((run / "eval" / "summary.json").read_text())

    # evaluating the run again reads the same (averaged) weights and finds the same numbers
    (run / "eval" / "summary.json").unlink()
    assert main(["evaluate", str(run)]) == 0
    assert json.loads((run / "eval" / "summary.json").read_text()) == summary

    capsys.readouterr()
    resume = ["train", "memory_addition", "--run-dir", str(run), "--resume"]
    assert main([*resume, "training.ema_decay=0.9"]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert "--resume cannot change training.ema_decay (trained with 0.5)" in error

    assert main([*resume, "training.epochs=3"]) == 0
    assert load_checkpoint(run / "checkpoints" / "last.pt")["averaged_updates"] == 15


def test_the_trained_weights_are_evaluated_on_request_and_only_where_a_run_kept_them(
    tmp_path, tiny_memory_addition, capsys
):
    run = tmp_path / "run"
    assert _train(run, tiny_memory_addition, "training.ema_decay=0.5", "training.epochs=2") == 0
    trained = load_checkpoint(run / "checkpoints" / "trained.pt")
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert trained["epoch"] == 2 and "optimizer" not in trained
    for name, value in trained["model"].items():
        torch.testing.assert_close(value, last["training_model"][name], rtol=0, atol=0, msg=name)
    averaged = json.loads((run / "eval" / "summary.json").read_text())

    out = tmp_path / "trained"
    assert main(["evaluate", str(run), "--checkpoint", "trained", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["test"]["mse"] != averaged["test"]["mse"]
    assert json.loads((run / "eval" / "summary.json").read_text()) == averaged  # left alone

    plain = tmp_path / "plain"
    assert _train(plain, tiny_memory_addition) == 0
    assert not (plain / "checkpoints" / "trained.pt").exists()
    capsys.readouterr()
    assert main(["evaluate", str(plain), "--checkpoint", "trained"]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert f"{plain} has no checkpoints/trained.pt: only a run with training.ema_decay" in error


def test_the_trained_weights_are_plotted_beside_the_average(tmp_path, tiny_memory_addition, capsys):
    run = tmp_path / "run"
    assert _train(run, tiny_memory_addition, "training.ema_decay=0.5", "training.epochs=2") == 0
    assert main(["plot", str(run), "--index", "1", "--device", "cpu"]) == 0
    averaged = (run / "plots" / "attention_test_1.png").read_bytes()
    assert main(["plot", str(run), "--index", "1", "--checkpoint", "trained", "--device", "cpu"]) == 0
    trained = run / "plots" / "trained" / "attention_test_1.png"
    assert trained.read_bytes() != averaged  # other weights, other attention
    assert (run / "plots" / "attention_test_1.png").read_bytes() == averaged  # left alone

    plain = tmp_path / "plain"
    assert _train(plain, tiny_memory_addition) == 0
    capsys.readouterr()
    assert main(["plot", str(plain), "--checkpoint", "trained", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and f"{plain} has no checkpoints/trained.pt" in error
