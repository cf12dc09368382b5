"""``attnlab archive``: a run tree's results without its checkpoints, enough to rebuild a report."""

import json
import os
import shutil

import pytest
from scripted_race import write_run

from attnlab.cli import main
from attnlab.experiments import race as races
from attnlab.experiments.memory import recipe as raffel2015
from attnlab.experiments.memory.recipe import Cell
from attnlab.experiments.runner import run_status

PREDICTIONS = "example\tsource\ttarget\tprediction\tseq_acc\n0\tx\ta b\ta\t0\n1\tx\ta\ta\t1\n"
"""A predictions file: one output stops early, one is right."""


def _campaign(root):
    """A small Raffel run tree with what training also leaves: checkpoints, logs, predictions, plots."""
    write_run(Cell("addition", 50, "attention").path(root), 1e-2, [100.0])
    write_run(Cell("multiplication", 10_000, "mean").path(root), 1e-3, [40.0, 70.25])
    for cell in root.glob("*/*/*"):
        races.race_record(cell, 0).write_text("{}")
    for run in root.glob("*/*/*/lr*/seed0"):
        (run / "config.yaml").write_text("data:\n  padding: pooled\n")
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.pt").write_bytes(b"\0" * 1000)
        (run / "checkpoints" / "best.pt").write_bytes(b"\1" * 1000)  # the checkpoint evaluation reads
        (run / "train.log").write_text("epoch 1/1\n")
        (run / "eval" / "test.predictions.tsv").write_text(PREDICTIONS)
        (run / "plots").mkdir()
        (run / "plots" / "attention.png").write_bytes(b"png")
        (run / "resumes.jsonl").write_text('{"after_epoch": 1}\n')
        (run / "environment.jsonl").write_text('{"from_epoch": 0, "device": "cpu"}\n')
        summary = run / "eval" / "summary.json"
        if summary.is_file():  # evaluation comes after training's last checkpoint
            checkpoint = (run / "checkpoints" / "last.pt").stat()
            os.utime(summary, ns=(checkpoint.st_atime_ns, checkpoint.st_mtime_ns + 1_000_000))
        (run / "eval_at" / "epoch1").mkdir(parents=True)
        (run / "eval_at" / "epoch1" / "summary.json").write_text("{}")
        (run / "eval_at" / "epoch1" / "trained").mkdir()  # a run with training.ema_decay
        (run / "eval_at" / "epoch1" / "trained" / "summary.json").write_text("{}")
        (run / "eval_at" / "epoch1" / "trained" / "test.errors.json").write_text("{}")
    (root / "aggregate.md").write_text("| cell |\n")


def _files(root):
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def test_the_archive_keeps_what_reports_read_and_nothing_else(tmp_path, capsys):
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    assert main(["archive", str(source), str(archive)]) == 0
    run = "addition/t0_50/attention/lr0.01/seed0"
    kept = _files(archive)
    assert {f"{run}/config.yaml", f"{run}/metrics.jsonl", f"{run}/eval/summary.json"} <= kept
    assert {f"{run}/resumes.jsonl", f"{run}/environment.jsonl", f"{run}/eval_at/epoch1/summary.json"} <= kept
    trained = f"{run}/eval_at/epoch1/trained"  # a weight-averaging run's trained weights, evaluated
    assert {f"{trained}/summary.json", f"{trained}/test.errors.json"} <= kept
    assert {"addition/t0_50/attention/race_seed0.json", "aggregate.md"} <= kept
    assert not any(name.endswith((".pt", ".log", ".tsv", ".png")) for name in kept)
    counted = {
        name.replace(".predictions.tsv", ".errors.json") for name in _files(source) if name.endswith(".tsv")
    }
    assert len(counted) == 2 and counted <= kept
    assert kept == counted | {
        name for name in _files(source) if not name.endswith((".pt", ".log", ".tsv", ".png"))
    }
    assert f"{len(kept)} files" in capsys.readouterr().out


def test_the_archive_counts_wrong_outputs_where_evaluation_left_only_predictions(tmp_path):
    """A run evaluated before evaluation wrote errors files gets one in the archive, counted from its
    predictions, and so does one whose errors file predates the one-word counts; a run with a
    current one keeps it as it is."""
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    old, new = sorted(source.rglob("eval/test.predictions.tsv"))
    before_words = {"examples": 9, "wrong": 0, "stops early": 0, "stops late": 0}
    before_words |= {"wrong words, right length": 0, "wrong words, other length": 0}
    own = before_words | {"one target word wrong": 0, "one target word left out": 0}
    (new.parent / "test.errors.json").write_text(json.dumps(own))
    main(["archive", str(source), str(archive)])
    counted = archive / old.relative_to(source).with_name("test.errors.json")
    assert json.loads(counted.read_text()) == {**own, "examples": 2, "wrong": 1, "stops early": 1}
    archived_new = archive / new.relative_to(source).with_name("test.errors.json")
    assert json.loads(archived_new.read_text()) == own
    assert not (source / old.relative_to(source).with_name("test.errors.json")).exists()  # source untouched

    (new.parent / "test.errors.json").write_text(json.dumps(before_words))
    main(["archive", str(source), str(archive)])
    assert json.loads(archived_new.read_text()) == json.loads(counted.read_text())  # the same predictions
    assert json.loads((new.parent / "test.errors.json").read_text()) == before_words  # source untouched


def test_a_malformed_predictions_file_stops_the_archive_before_it_writes(tmp_path, capsys):
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    broken = sorted(source.rglob("eval/test.predictions.tsv"))[0]
    broken.write_text(PREDICTIONS + "2\tx\ta\n")
    assert main(["archive", str(source), str(archive)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"attnlab: error: {broken} line 4: ") and "Traceback" not in error
    assert not archive.exists()


def test_a_report_rebuilt_from_the_archive_equals_the_one_from_the_runs(tmp_path):
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    main(["archive", str(source), str(archive)])
    assert raffel2015.report(archive) == raffel2015.report(source)
    assert "70.2% (2 ep.) (80.8%)" in raffel2015.report(archive)
    assert run_status(archive / "addition/t0_50/attention/lr0.01/seed0") == "done"


def test_archiving_again_replaces_files_and_keeps_earlier_ones(tmp_path):
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    main(["archive", str(source), str(archive)])
    (archive / "older" / "config.yaml").parent.mkdir()
    (archive / "older" / "config.yaml").write_text("kept: true\n")
    (source / "aggregate.md").write_text("| cell | new |\n")
    main(["archive", str(source), str(archive)])
    assert (archive / "aggregate.md").read_text() == "| cell | new |\n"
    assert (archive / "older" / "config.yaml").is_file()


@pytest.mark.parametrize(
    ("where", "message"),
    [("missing", "not a directory"), ("inside", "inside")],
)
def test_bad_archive_paths_are_one_line_errors(tmp_path, capsys, where, message):
    source = tmp_path / "runs"
    _campaign(source)
    if where == "missing":
        args = [str(tmp_path / "nowhere"), str(tmp_path / "results")]
    else:
        args = [str(source), str(source / "results")]
    assert main(["archive", *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith("attnlab: error:") and message in error and "Traceback" not in error


def test_archived_checkpoints_of_unfinished_runs_and_only_those(tmp_path):
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    unfinished = source / "addition/t0_50/attention/lr0.01/seed0"
    (unfinished / "eval" / "summary.json").unlink()
    assert main(["archive", str(source), str(archive), "--unfinished-checkpoints"]) == 0
    checkpoints = {name for name in _files(archive) if name.endswith(".pt")}
    run = "addition/t0_50/attention/lr0.01/seed0/checkpoints"
    assert checkpoints == {f"{run}/last.pt", f"{run}/best.pt"}  # best.pt: a config may evaluate it
    assert (archive / run / "best.pt").read_bytes() == (unfinished / "checkpoints" / "best.pt").read_bytes()
    (unfinished / "eval" / "summary.json").write_text("{}")  # it finished since
    (unfinished / "eval" / "test.json").write_text(json.dumps({"trained_epochs": 1}))
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    assert not any(name.endswith(".pt") for name in _files(archive))


def test_a_finished_run_resumed_to_a_larger_budget_keeps_its_checkpoints_until_evaluated_again(tmp_path):
    """``scripts/epoch_budget.sh`` resumes an evaluated run for its next stage; stopped before that
    stage's first epoch ends, the run has the epochs its evaluation records, and only its
    ``resumes.jsonl`` says it is to train on: the archive keeps its checkpoints until it is
    evaluated again."""
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    run_name = "addition/t0_50/attention/lr0.01/seed0"
    run = source / run_name
    metrics = (run / "metrics.jsonl").read_text()
    assert len(metrics.splitlines()) == 1
    (run / "eval" / "test.json").write_text(json.dumps({"trained_epochs": 1}))
    resumes = run / "resumes.jsonl"  # a resume before the evaluation, and one at it that changed nothing
    resumes.write_text(
        '{"after_epoch": 1}\nnot json\n{"from_epoch": 0, "changes": {"training.epochs": [1, 1]}}\n'
        '{"from_epoch": 1, "changes": {}}\n'
    )
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    assert not any(path.endswith(".pt") for path in _files(archive))
    with resumes.open("a") as file:
        file.write('{"from_epoch": 1, "changes": {"training.epochs": [1, 3]}}\n')
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    checkpoints = {path for path in _files(archive) if path.endswith(".pt")}
    assert checkpoints == {f"{run_name}/checkpoints/last.pt", f"{run_name}/checkpoints/best.pt"}
    (run / "metrics.jsonl").write_text(metrics * 3)  # its next stage trained and evaluated
    (run / "eval" / "test.json").write_text(json.dumps({"trained_epochs": 3}))
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    assert not any(path.endswith(".pt") for path in _files(archive))


RESUMED = "multiplication/t0_10000/mean/lr0.001/seed0"
"""The run of :func:`_archive_a_run_trained_since_evaluated`."""


def _archive_a_run_trained_since_evaluated(tmp_path):
    """A campaign whose run ``RESUMED`` trained on after its evaluation (its last.pt the newer file),
    archived with ``--unfinished-checkpoints``; returns ``(source, archive)``."""
    source, archive = tmp_path / "runs", tmp_path / "results"
    _campaign(source)
    last, summary = source / RESUMED / "checkpoints" / "last.pt", source / RESUMED / "eval" / "summary.json"
    os.utime(last, ns=(last.stat().st_atime_ns, summary.stat().st_mtime_ns + 1_000_000))
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    return source, archive


def test_a_finished_run_trained_again_since_its_evaluation_keeps_its_checkpoint(tmp_path):
    """A race resumes the rates it keeps with more epochs: their last.pt is newer than the summary
    of the last round, and the archive keeps it until the run is evaluated again."""
    source, archive = _archive_a_run_trained_since_evaluated(tmp_path)
    resumed = source / RESUMED
    last, summary = resumed / "checkpoints" / "last.pt", resumed / "eval" / "summary.json"
    checkpoints = {name for name in _files(archive) if name.endswith(".pt")}
    assert checkpoints == {f"{RESUMED}/checkpoints/last.pt", f"{RESUMED}/checkpoints/best.pt"}
    evaluated = {"test": {"accuracy": 70.25}, "trained_epochs": 2}  # evaluated again, as now recorded
    (resumed / "eval" / "test.json").write_text(json.dumps(evaluated))
    os.utime(summary, ns=(summary.stat().st_atime_ns, last.stat().st_mtime_ns + 1_000_000))
    main(["archive", str(source), str(archive), "--unfinished-checkpoints"])
    assert not any(name.endswith(".pt") for name in _files(archive))


def test_an_archived_checkpoint_whose_run_records_no_epochs_survives_a_copy_that_reorders_file_times(
    tmp_path,
):
    """A run evaluated before evaluations recorded their epochs, then trained on: its archived
    last.pt stays when the run tree comes back from a checkout or copy that made its summary the
    newer file (file times are all the archive has to go on there, and they no longer tell)."""
    _, archive = _archive_a_run_trained_since_evaluated(tmp_path)
    archived = f"{RESUMED}/checkpoints/last.pt"
    assert archived in _files(archive)
    restored = tmp_path / "restored"
    shutil.copytree(archive, restored, copy_function=shutil.copy)  # the checkout of a new machine
    last = restored / archived
    summary = restored / RESUMED / "eval" / "summary.json"
    os.utime(summary, ns=(summary.stat().st_atime_ns, last.stat().st_mtime_ns + 1_000_000))
    assert main(["archive", str(restored), str(archive), "--unfinished-checkpoints"]) == 0
    best = f"{RESUMED}/checkpoints/best.pt"
    assert {name for name in _files(archive) if name.endswith(".pt")} == {archived, best}


def test_which_finished_runs_trained_since_their_evaluation_reads_no_file_times(tmp_path):
    """A run trained on after its evaluation (here: its epoch-1 evaluation put back beside its
    epoch-3 checkpoint) keeps its last.pt in the archive even when the copy it is archived from
    made the summary the newer file; once evaluated again, it does not."""
    quick = ["training.updates_per_epoch=10", "training.batch_size=20", "data.test_size=50"]
    spec = raffel2015.cell_race(Cell("addition", 20, "attention"), tmp_path, 3, [1e-3], overrides=quick)
    run = tmp_path / "runs" / "seed0"
    races.train_or_resume(spec.run_config(1e-3, 1), run)
    assert json.loads((run / "eval" / "test.json").read_text())["trained_epochs"] == 1
    shutil.copytree(run / "eval", tmp_path / "evaluated_at_epoch1")
    races.train_or_resume(spec.run_config(1e-3, 3), run)
    evaluated_at_epoch3 = tmp_path / "evaluated_at_epoch3"
    shutil.move(run / "eval", evaluated_at_epoch3)
    shutil.copytree(tmp_path / "evaluated_at_epoch1", run / "eval")
    copy = tmp_path / "copied"
    shutil.copytree(run.parent, copy, copy_function=shutil.copy)  # a copy's files get new times
    last, summary = copy / "seed0" / "checkpoints" / "last.pt", copy / "seed0" / "eval" / "summary.json"
    os.utime(summary, ns=(summary.stat().st_atime_ns, last.stat().st_mtime_ns + 1_000_000))
    main(["archive", str(copy), str(tmp_path / "results"), "--unfinished-checkpoints"])
    archived = {name for name in _files(tmp_path / "results") if name.endswith(".pt")}
    assert archived == {"seed0/checkpoints/last.pt", "seed0/checkpoints/best.pt"}
    shutil.rmtree(copy / "seed0" / "eval")
    shutil.copytree(evaluated_at_epoch3, copy / "seed0" / "eval")
    os.utime(last, ns=(last.stat().st_atime_ns, summary.stat().st_mtime_ns + 1_000_000))
    main(["archive", str(copy), str(tmp_path / "results"), "--unfinished-checkpoints"])
    assert not any(name.endswith(".pt") for name in _files(tmp_path / "results"))


def test_a_run_resumed_from_the_archive_ends_as_if_never_interrupted(tmp_path):
    quick = ["training.updates_per_epoch=10", "training.batch_size=20", "data.test_size=50"]
    spec = raffel2015.cell_race(Cell("addition", 20, "attention"), tmp_path, 3, [1e-3], overrides=quick)
    straight = tmp_path / "straight" / "seed0"
    races.train_or_resume(spec.run_config(1e-3, 3), straight)
    interrupted = tmp_path / "lost_machine" / "seed0"
    races.train_or_resume(spec.run_config(1e-3, 1), interrupted)
    (interrupted / "eval" / "summary.json").unlink()  # as if stopped after epoch 1
    main(["archive", str(interrupted.parent), str(tmp_path / "results"), "--unfinished-checkpoints"])
    restored = tmp_path / "new_machine"
    shutil.copytree(tmp_path / "results", restored)
    races.train_or_resume(spec.run_config(1e-3, 3), restored / "seed0")
    resumed = races.finished_history(restored / "seed0")
    resume_records = (restored / "seed0" / "resumes.jsonl").read_text().splitlines()
    assert [json.loads(line)["from_epoch"] for line in resume_records] == [1]  # resumed, not retrained
    assert [r["epoch"] for r in resumed] == [1, 2, 3]
    assert [r["valid/loss"] for r in resumed] == [r["valid/loss"] for r in races.finished_history(straight)]
