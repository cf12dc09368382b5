"""Training tells what it does: what is trained on what, progress with a total, one line per
epoch with the validation metrics and the best checkpoint, the same lines in ``RUN_DIR/train.log``,
which checkpoint was evaluated, and a result table with the README's column names."""

import re

from attnlab.cli import main
from attnlab.training import trainer


def _train(tiny_overrides, run, capsys, **extra):
    assert main(["train", "lookup", *tiny_overrides(**extra), "--run-dir", str(run)]) == 0
    return capsys.readouterr()


def test_training_logs_what_it_trains_every_epoch_and_the_evaluated_checkpoint(
    tiny_overrides, tmp_path, capsys
):
    run = tmp_path / "run"
    printed = _train(tiny_overrides, run, capsys)
    lines = printed.err.strip().splitlines()
    start = next(line for line in lines if "parameters" in line)
    for fragment in (
        "lookup",
        "scaled_dot",
        "train 400",
        "validation 60",
        "device cpu",
        "3 epochs",
        str(run),
    ):
        assert fragment in start, start
    assert re.search(r"\b\d{1,3}(,\d{3})* parameters", start), start
    epochs = [line for line in lines if re.search(r"epoch \d/3:", line)]
    assert len(epochs) == 3, lines
    for line in epochs:
        assert re.search(r"train loss \d+\.\d{4}", line) and re.search(r"validation loss \d+\.\d{4}", line)
        assert re.search(r"seqAcc \d+\.\d{2}%", line), line
        assert "best" in line
    assert "new best" in epochs[0]  # the first epoch is always the best so far
    evaluated = [line for line in lines if "evaluat" in line and "best.pt" in line]
    assert evaluated and str(run / "checkpoints" / "best.pt") in evaluated[0] and "epoch" in evaluated[0]

    logged = (run / "train.log").read_text()
    for line in [start, *epochs, evaluated[0]]:
        assert line.removeprefix("attnlab: ") in logged


def test_the_first_line_says_when_training_is_in_mixed_precision(tiny_overrides, tmp_path, capsys):
    def start_line(run, **extra):
        lines = _train(tiny_overrides, run, capsys, **{"training.epochs": 1, **extra}).err.splitlines()
        return next(line for line in lines if "parameters" in line)

    assert "device cpu, bf16 mixed precision;" in start_line(
        tmp_path / "bf16", **{"training.precision": "bf16"}
    )
    assert "precision" not in start_line(tmp_path / "fp32")


def test_result_table_names_columns_as_the_readme_and_prints_counts_as_integers(
    tiny_overrides, tmp_path, capsys
):
    out = _train(tiny_overrides, tmp_path / "run", capsys, **{"training.epochs": 1}).out
    header = out.splitlines()[0]
    assert header.split() == ["seqAcc", "(%)", "seqAccBE", "(%)", "loss", "examples", "attnLoss"], header
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:3]}
    assert rows["interpolation"][4] == "60" and rows["long1"][4] == "60"  # the examples column


def test_progress_off_a_terminal_is_periodic_log_lines_with_a_total(
    tiny_overrides, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(trainer, "PROGRESS_LOG_SECONDS", 0.0)  # a line after every update
    err = _train(tiny_overrides, tmp_path / "run", capsys, **{"training.progress": "true"}).err
    progress = re.findall(r"epoch 2/3: (\d+)/13 updates", err)
    assert [int(n) for n in progress] == list(range(1, 14)), err
    assert "\r" not in err  # no progress bar in a log file


def test_progress_on_a_terminal_is_a_bar_with_a_total(tiny_overrides, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trainer, "stderr_is_terminal", lambda: True)
    err = _train(tiny_overrides, tmp_path / "run", capsys, **{"training.progress": "true"}).err
    assert re.search(r"epoch 1/3: +\d+%\|.*\| *\d+/13 ", err), err
    assert not re.search(r"epoch \d/3: \d+/13 updates", err)  # no log lines besides the bar


def test_resumed_training_says_where_it_resumes(tiny_overrides, tmp_path, capsys):
    run = tmp_path / "run"
    _train(tiny_overrides, run, capsys, **{"training.epochs": 1})
    assert main(["train", "lookup", "--run-dir", str(run), "--resume", "training.epochs=2"]) == 0
    err = capsys.readouterr().err
    assert f"resuming {run} after epoch 1" in err and "training.epochs: 1 -> 2" in err
    log = (run / "train.log").read_text()
    assert log.count("parameters") == 2  # both starts, appended to one log


def test_runs_trained_by_recipes_multiseed_and_sweeps_log_to_their_train_log(tiny_overrides, tmp_path):
    """They all train through ``train_or_resume``, in this process or a worker."""
    from attnlab.experiments.registry import resolve_config, train_or_resume

    run = tmp_path / "run"
    train_or_resume(resolve_config("lookup", tiny_overrides()), run)
    logged = (run / "train.log").read_text()
    assert "parameters" in logged and len(re.findall(r"epoch \d/3:", logged)) == 3
    assert "evaluating" in logged and str(run / "checkpoints" / "best.pt") in logged
