"""Training runs end to end: resume, divergence, outputs (tiny data, seconds each)."""

import json

import pytest
import torch

from attnlab.cli import main
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.runner import run_seeds
from attnlab.training.checkpoint import load_checkpoint
from attnlab.training.trainer import TrainingDiverged


@pytest.fixture
def tiny_config(tiny_overrides):
    return lambda **extra: lookup.EXPERIMENT.parse_config(resolve_config("lookup", tiny_overrides(**extra)))


def _final_weights(run_dir):
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def test_run_directory_holds_config_metrics_checkpoints_and_evaluation(
    lookup_files, tiny_config, tiny_overrides, tmp_path
):
    results = lookup.EXPERIMENT.train(tiny_config(), tmp_path / "run")
    run = tmp_path / "run"
    assert set(results) == {"interpolation", "long1"}
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["epoch"] for record in records] == [1, 2, 3]
    assert all("valid/loss" in record and "train/loss" in record for record in records)
    assert (run / "checkpoints" / "best.pt").is_file() and (run / "config.yaml").is_file()
    summary = json.loads((run / "eval" / "summary.json").read_text())
    assert summary["long1"]["examples"] == 60
    assert 0.0 <= summary["interpolation"]["seq_acc"] <= 100.0
    for test_set, metrics in summary.items():  # each example's prediction and verdicts
        header, *rows = (run / "eval" / f"{test_set}.predictions.tsv").read_text().splitlines()
        assert header.split("\t") == ["example", "source", "target", "prediction", "seq_acc", "seq_acc_be"]
        fields = [row.split("\t") for row in rows]
        assert len(fields) == metrics["examples"]
        for column, metric in ((4, "seq_acc"), (5, "seq_acc_be")):
            assert 100 * sum(int(f[column]) for f in fields) / len(fields) == pytest.approx(metrics[metric])
        assert all((f[3] == f[2]) == (f[4] == "1") for f in fields)  # right = the whole target, no more


def test_resume_after_interruption_matches_uninterrupted_run(
    lookup_files, tiny_config, tiny_overrides, tmp_path, monkeypatch
):
    uninterrupted = lookup.EXPERIMENT.train(tiny_config(), tmp_path / "full")

    # Interrupt the second run in the middle of its second epoch.
    calls = {"n": 0}
    original = lookup.teacher_forced_loss

    def crash_midway(model, batch, *args):
        calls["n"] += 1
        if calls["n"] == 13 + 5:  # 13 batches per epoch (400 / 32), crash in epoch 2
            raise KeyboardInterrupt
        return original(model, batch, *args)

    monkeypatch.setattr(lookup, "teacher_forced_loss", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        lookup.EXPERIMENT.train(tiny_config(), tmp_path / "resumed")
    assert load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")["epoch"] == 1
    monkeypatch.setattr(lookup, "teacher_forced_loss", original)
    resumed = lookup.EXPERIMENT.train(tiny_config(), tmp_path / "resumed", resume=True)

    assert resumed == uninterrupted
    full, again = _final_weights(tmp_path / "full"), _final_weights(tmp_path / "resumed")
    assert all(torch.equal(full[name], again[name]) for name in full)
    history = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [record["epoch"] for record in history] == [1, 2, 3]


def test_nan_loss_stops_training_and_keeps_last_good_checkpoint(
    lookup_files, tiny_config, tiny_overrides, tmp_path, monkeypatch
):
    calls = {"n": 0}
    original = lookup.teacher_forced_loss

    def diverge_in_epoch_two(model, batch, *args):
        calls["n"] += 1
        loss = original(model, batch, *args)
        return loss * float("nan") if calls["n"] > 13 else loss

    monkeypatch.setattr(lookup, "teacher_forced_loss", diverge_in_epoch_two)
    with pytest.raises(TrainingDiverged, match="epoch 2"):
        lookup.EXPERIMENT.train(tiny_config(), tmp_path / "run")
    checkpoint = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert checkpoint["epoch"] == 1
    assert all(torch.isfinite(value).all() for value in checkpoint["model"].values())


def test_existing_run_is_not_overwritten_without_resume(lookup_files, tiny_config, tiny_overrides, tmp_path):
    config = tiny_config(**{"training.epochs": 1})
    lookup.EXPERIMENT.train(config, tmp_path / "run")
    with pytest.raises(Exception, match="--resume"):
        lookup.EXPERIMENT.train(config, tmp_path / "run")


def test_cli_train_evaluate_and_plot(lookup_files, tiny_config, tiny_overrides, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "lookup", *tiny_overrides(**{"model.attender": "mix"}), "--run-dir", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "interpolation" in printed and "seqAcc (%)" in printed
    summary = (run / "eval" / "summary.json").read_text()
    assert main(["evaluate", str(run), "--data", str(lookup_files["long1"])]) == 0
    assert json.loads((run / "eval" / "files" / "long1.json").read_text())["examples"] == 60
    assert (run / "eval" / "summary.json").read_text() == summary  # the run's own results stay
    assert main(["plot", str(run), "--test-set", "long1", "--index", "0", "2"]) == 0
    pngs = sorted(path.name for path in (run / "plots").glob("*.png"))
    assert pngs == [
        "long1_0_attention.png",
        "long1_0_variables.png",
        "long1_2_attention.png",
        "long1_2_variables.png",
        "training_curves.png",
    ]
    assert all((run / "plots" / name).stat().st_size > 1000 for name in pngs)


@pytest.mark.parametrize(
    "command",
    [
        ["multiseed", "lookup", "--seeds", "0", "1", "0"],
        ["reproduce", "dubois2020", "--seeds", "2", "2", "--report-only"],
        ["reproduce", "russin2019", "--seeds", "3", "1", "3"],
        ["reproduce", "daniluk2017", "--seeds", "1", "1"],
    ],
)
def test_a_seed_listed_twice_is_a_usage_error(command, tmp_path, capsys):
    """Each seed is one run: listed twice, it would be one run counted twice in a mean ± std."""
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--seeds lists" in error and "more than once: each seed is one run" in error
    assert not (tmp_path / "out").exists()


def test_run_seeds_refuses_a_seed_listed_twice(tmp_path):
    with pytest.raises(ValueError, match=r"seeds \[0\] listed more than once"):
        run_seeds({"experiment": "lookup"}, [0, 1, 0], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_multiseed_reports_mean_and_std(lookup_files, tiny_config, tiny_overrides, tmp_path, capsys):
    out = tmp_path / "seeds"
    overrides = tiny_overrides(**{"training.epochs": 1})
    assert main(["multiseed", "lookup", *overrides, "--seeds", "0", "1", "--out", str(out)]) == 0
    aggregate = json.loads((out / "aggregate.json").read_text())
    stats = aggregate["results"]["interpolation"]["seq_acc"]
    runs = [json.loads((out / f"seed{s}" / "eval" / "summary.json").read_text()) for s in (0, 1)]
    values = [run["interpolation"]["seq_acc"] for run in runs]
    assert stats["n"] == 2 and stats["mean"] == pytest.approx(sum(values) / 2)
    assert (out / "aggregate.csv").read_text().startswith("test_set,metric,mean,std")
    assert "±" in capsys.readouterr().out
