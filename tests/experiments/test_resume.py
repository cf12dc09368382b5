"""``attnlab train … --resume`` continues the run in RUN_DIR with the config saved there.

Overrides given with ``--resume`` may only change what cannot alter the epochs already trained
(more epochs, progress, checkpoint frequency, TensorBoard, device); they are recorded in the run's
``resumes.jsonl``. Anything else is refused, naming the key, before any file in the run changes.
"""

import json
import shutil

import pytest
import torch
import yaml

import attnlab
from attnlab.cli import main
from attnlab.config import ConfigError
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config, train_or_resume


def _files(run):
    """Every file of a run directory and its bytes (to show that nothing was rewritten)."""
    return {path.relative_to(run): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


def _config(run):
    return yaml.safe_load((run / "config.yaml").read_text())


def _fails(argv, capsys, *fragments):
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1].startswith("attnlab: error:"), error
    for fragment in fragments:
        assert fragment in error, error
    return error


@pytest.fixture
def one_epoch_run(tmp_path, tiny_overrides, capsys):
    """A finished one-epoch Location Attender run (not the built-in config's Mix Attender)."""
    run = tmp_path / "run"
    overrides = tiny_overrides(**{"model.attender": "location", "training.epochs": 1})
    assert main(["train", "lookup", *overrides, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    return run


def test_resume_reads_the_runs_config_not_the_command_line(one_epoch_run, tiny_overrides, tmp_path, capsys):
    run = one_epoch_run
    saved = _config(run)
    # As the README shows: the built-in config's name and the run directory, plus more epochs.
    assert main(["train", "lookup", "--run-dir", str(run), "--resume", "training.epochs=2"]) == 0
    config = _config(run)
    assert config["model"]["attender"] == "location"  # not the built-in config's mix
    assert config["data"] == saved["data"]  # still the run's files, not generated Long data
    assert config["training"]["epochs"] == 2
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["epoch"] for record in history] == [1, 2]
    (resume,) = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert resume["from_epoch"] == 1
    assert resume["changes"] == {"training.epochs": [1, 2]}
    # Each training session says where it ran: the new run from epoch 0, the resume after epoch 1.
    sessions = [json.loads(line) for line in (run / "environment.jsonl").read_text().splitlines()]
    assert [session["from_epoch"] for session in sessions] == [0, 1]
    for session in sessions:
        assert session["device"] == "cpu"  # tiny_overrides train on the CPU
        assert session["torch"] == torch.__version__ and session["attnlab"] == attnlab.__version__
        assert session["threads"] == torch.get_num_threads()

    # Two epochs with a resume in between end exactly like two epochs in one go.
    full = tmp_path / "full"
    overrides = tiny_overrides(**{"model.attender": "location", "training.epochs": 2})
    assert main(["train", "lookup", *overrides, "--run-dir", str(full)]) == 0
    assert (run / "eval" / "summary.json").read_text() == (full / "eval" / "summary.json").read_text()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.variant=reversed", "data.variant"),  # trained with the config's long
        ("model.hidden_dim=48", "model.hidden_dim"),
        ("training.learning_rate=0.01", "training.learning_rate"),
        ("model.attender=mix", "model.attender"),
        ("training.precision=bf16", "training.precision"),
    ],
)
def test_resume_refuses_an_override_that_would_change_the_trained_result(
    one_epoch_run, capsys, override, key
):
    before = _files(one_epoch_run)
    argv = ["train", "lookup", "--run-dir", str(one_epoch_run), "--resume", override]
    _fails(argv, capsys, key, "--resume")
    assert _files(one_epoch_run) == before


def test_resume_accepts_the_training_command_repeated(one_epoch_run, tiny_overrides, capsys):
    """The command that trained the run, with --resume and more epochs, continues it: overrides
    that set a key to the value the run was trained with change nothing."""
    overrides = tiny_overrides(**{"model.attender": "location", "training.epochs": 2})
    assert main(["train", "lookup", *overrides, "--run-dir", str(one_epoch_run), "--resume"]) == 0
    (resume,) = [json.loads(line) for line in (one_epoch_run / "resumes.jsonl").read_text().splitlines()]
    assert resume["changes"] == {"training.epochs": [1, 2]}
    capsys.readouterr()
    _fails(
        ["train", "lookup", "--run-dir", str(one_epoch_run), "--resume", "model.attender=mix"],
        capsys,
        "model.attender (trained with 'location')",
    )


def test_resume_refuses_a_config_of_another_experiment(one_epoch_run, capsys):
    before = _files(one_epoch_run)
    argv = ["train", "memory_addition", "--run-dir", str(one_epoch_run), "--resume"]
    _fails(argv, capsys, "'lookup'", "'memory'")
    assert _files(one_epoch_run) == before


def test_resume_without_a_run_says_so_and_creates_nothing(tmp_path, capsys):
    run = tmp_path / "nothing"
    _fails(["train", "lookup", "--run-dir", str(run), "--resume"], capsys, str(run), "no run to resume")
    assert not run.exists()


def test_resume_with_a_checkpoint_of_another_model_rewrites_nothing(
    one_epoch_run, tiny_overrides, tmp_path, capsys
):
    other = tmp_path / "other"
    overrides = tiny_overrides(**{"model.attender": "location", "training.epochs": 1, "model.hidden_dim": 48})
    assert main(["train", "lookup", *overrides, "--run-dir", str(other)]) == 0
    shutil.copy(other / "checkpoints" / "last.pt", one_epoch_run / "checkpoints" / "last.pt")
    capsys.readouterr()
    before = _files(one_epoch_run)
    argv = ["train", "lookup", "--run-dir", str(one_epoch_run), "--resume", "training.epochs=3"]
    _fails(argv, capsys, "last.pt", "belongs to another model")
    assert _files(one_epoch_run) == before  # config.yaml still says 1 epoch


def test_resume_and_overwrite_together_are_refused(one_epoch_run, capsys):
    before = _files(one_epoch_run)
    argv = ["train", "lookup", "--run-dir", str(one_epoch_run), "--resume", "--overwrite"]
    _fails(argv, capsys, "--resume", "--overwrite")
    assert _files(one_epoch_run) == before


def test_library_resume_with_a_changed_config_is_refused(one_epoch_run, tiny_overrides, lookup_files):
    """Sweeps and recipes resume through ``train_or_resume``: a run made with other data is not
    silently continued on this data."""
    before = _files(one_epoch_run)
    changed = resolve_config(
        "lookup",
        tiny_overrides(
            **{"model.attender": "location", "training.epochs": 2, "data.train_file": lookup_files["long1"]}
        ),
    )
    with pytest.raises(ConfigError, match="data.train_file"):
        train_or_resume(changed, one_epoch_run)
    with pytest.raises(ConfigError, match="data.train_file"):
        lookup.EXPERIMENT.train(lookup.EXPERIMENT.parse_config(changed), one_epoch_run, resume=True)
    assert _files(one_epoch_run) == before
