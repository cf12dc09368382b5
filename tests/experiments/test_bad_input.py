"""Bad input gives one clear line on stderr, exit status 2, and no half-written run."""

import shutil

import pytest

from attnlab.cli import main


def _fails(argv, capsys, *fragments):
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("attnlab: error:") and "Traceback" not in error
    for fragment in fragments:
        assert fragment in error, error
    return error


def test_unknown_attender(tmp_path, tiny_overrides, capsys):
    run = tmp_path / "run"
    argv = ["train", "lookup", *tiny_overrides(**{"model.attender": "nope"}), "--run-dir", str(run)]
    _fails(argv, capsys, "unknown attender 'nope'", "location", "mix")
    assert not run.exists()


def test_unknown_attender_option(tmp_path, tiny_overrides, capsys):
    argv = [
        "train",
        "lookup",
        *tiny_overrides(**{"model.attender_options": "{min_sigmaa: 1}", "model.attender": "location"}),
    ]
    _fails(argv + ["--run-dir", str(tmp_path / "run")], capsys, "min_sigmaa", "min_sigma")


def test_unknown_config_key_lists_valid_keys(tmp_path, tiny_overrides, capsys):
    argv = ["train", "lookup", *tiny_overrides(), "training.epoch=3", "--run-dir", str(tmp_path / "run")]
    _fails(argv, capsys, "config.training", "'epoch'", "'epochs'", "; did you mean 'epochs'?")


def test_unknown_builtin_config(capsys):
    _fails(["train", "no_such_config"], capsys, "no_such_config", "lookup")


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("training.checkpoint=last", "; did you mean 'evaluation.checkpoint'?"),  # not 'checkpoint_every'
        ("seed=3", "; did you mean 'data.seed' or 'training.seed'?"),  # every section that has it
        ("positional=rope", "; did you mean 'model.transformer.positional'?"),  # two levels down
    ],
)
def test_a_key_of_another_section_is_named_by_its_path(tmp_path, capsys, override, hint):
    _fails(["train", "lookup", override, "--run-dir", str(tmp_path / "run")], capsys, hint)


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["train", "scan_transfomer"], "; did you mean 'scan_transformer'?"),
        (["sweep", "scan_transfomer_stop", "--out", "OUT"], "; did you mean 'scan_transformer_stop'?"),
        (["train", "lookup", "model.attender=locaton"], "; did you mean 'location'?"),
        (["train", "scan_transformer", "model.transformer.positional=rop"], "; did you mean 'rope'?"),
        (
            ["train", "scan_transformer", "model.cross_attention=shift"],
            "; did you mean 'model.transformer.cross_attention'?",  # the key of a subsection
        ),
    ],
)
def test_a_misspelt_name_gets_a_hint(tmp_path, capsys, argv, hint):
    argv = [str(tmp_path / "out") if arg == "OUT" else arg for arg in argv]
    _fails([*argv, "--run-dir", str(tmp_path / "run")] if argv[0] == "train" else argv, capsys, hint)
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("000 t1 .\t000 110\n000 t2 .\n", "line 2"),
        ("000 t1 .\t000 110\t0 1 9\n", "line 1"),
        ("000 t1 .\t000 110\t0 1\n", "line 1"),
        ("", "empty"),
    ],
)
def test_malformed_training_file(tmp_path, lookup_files, tiny_overrides, capsys, content, expected):
    bad = tmp_path / "bad.tsv"
    bad.write_text(content)
    run = tmp_path / "run"
    argv = ["train", "lookup", *tiny_overrides(**{"data.train_file": bad}), "--run-dir", str(run)]
    _fails(argv, capsys, str(bad), expected)
    assert not run.exists()


def test_token_unseen_in_training_at_evaluation(tmp_path, tiny_overrides, capsys):
    run = tmp_path / "run"
    assert main(["train", "lookup", *tiny_overrides(**{"training.epochs": 1}), "--run-dir", str(run)]) == 0
    capsys.readouterr()  # the training's log lines
    unseen = tmp_path / "unseen.tsv"
    unseen.write_text("000 t1 .\t000 110\n000 t9 .\t000 110\n")
    _fails(["evaluate", str(run), "--data", str(unseen)], capsys, str(unseen), "line 2", "'t9'")


def test_checkpoint_from_another_model(tmp_path, tiny_overrides, capsys):
    small, large = tmp_path / "small", tmp_path / "large"
    assert main(["train", "lookup", *tiny_overrides(**{"training.epochs": 1}), "--run-dir", str(small)]) == 0
    overrides = tiny_overrides(**{"training.epochs": 1, "model.hidden_dim": 48})
    assert main(["train", "lookup", *overrides, "--run-dir", str(large)]) == 0
    capsys.readouterr()
    shutil.copy(large / "checkpoints" / "best.pt", small / "checkpoints" / "best.pt")
    _fails(["evaluate", str(small)], capsys, "best.pt", "hidden_dim")


def test_not_a_checkpoint(tmp_path, tiny_overrides, capsys):
    run = tmp_path / "run"
    assert main(["train", "lookup", *tiny_overrides(**{"training.epochs": 1}), "--run-dir", str(run)]) == 0
    capsys.readouterr()  # the training's log lines
    (run / "checkpoints" / "best.pt").write_text("garbage")
    error = _fails(["evaluate", str(run)], capsys, "best.pt", "not a readable attnlab checkpoint: ")
    assert len(error.strip().splitlines()) == 1
    (run / "checkpoints" / "best.pt").write_bytes(b"")  # a write cut off before its first byte
    _fails(["evaluate", str(run)], capsys, "best.pt is not a readable attnlab checkpoint: the file is empty")


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path, tiny_overrides, capsys):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("important")
    _fails(
        ["train", "lookup", *tiny_overrides(), "--run-dir", str(precious), "--overwrite"],
        capsys,
        "not a run directory",
    )
    assert (precious / "thesis.tex").read_text() == "important"


def _listing(folder):
    return {
        path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()
    }


@pytest.mark.parametrize("own_config", [False, True])
def test_a_new_run_refuses_a_folder_of_other_files(tmp_path, tiny_overrides, capsys, own_config):
    """``--run-dir .`` in a project folder would have written config.yaml (over the user's own
    config.yaml, when it has one), metrics.jsonl and checkpoints/ among its files; nothing is
    written, not even the lock or the log."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.md").write_text("mine")
    if own_config:
        (project / "config.yaml").write_text("mine: true\n")
    before = _listing(project)
    _fails(
        ["train", "lookup", *tiny_overrides(), "--run-dir", str(project)],
        capsys,
        f"{project} is not a run directory: it holds ",
        "notes.md and nothing a run writes (train.lock, train.log, environment.jsonl",
    )
    assert _listing(project) == before
    assert sorted(path.name for path in project.iterdir()) == sorted(path.name for path in before)


def test_overwrite_refuses_a_run_folder_that_also_holds_other_files(tmp_path, tiny_overrides, capsys):
    """A config.yaml alone does not make a folder a run directory that --overwrite may empty."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.yaml").write_text("mine: true\n")
    (project / "thesis.tex").write_text("important")
    before = _listing(project)
    _fails(
        ["train", "lookup", *tiny_overrides(), "--run-dir", str(project), "--overwrite"],
        capsys,
        "it holds config.yaml, thesis.tex and nothing a run writes",
        "not deleting anything (--overwrite) there",
    )
    assert _listing(project) == before


@pytest.mark.parametrize(
    "left_behind",
    [
        ("error.txt", "config.yaml", ".metrics.jsonl.x1.tmp"),  # a failed sweep run
        ("train.lock", "train.log", "config.yaml", "vocabulary.txt"),  # a language model stopped early
        ("environment.jsonl", "config.yaml", "seed1/config.yaml"),  # seed 0 beside its seeds' folders
    ],
)
def test_a_folder_a_run_made_takes_a_new_run(tmp_path, tiny_overrides, capsys, left_behind):
    """What a run leaves behind before its first checkpoint (a sweep's error.txt, the log, the lock,
    an experiment's own files) does not stop a new run in its folder."""
    run = tmp_path / "run"
    for name in left_behind:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("{}\n" if name.endswith(".jsonl") else "left behind\n")
    assert main(["train", "lookup", *tiny_overrides(), "--run-dir", str(run)]) == 0
    assert (run / "checkpoints" / "last.pt").is_file()


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("model.embedding_dim", "-4", "config.model: embedding_dim must be >= 1, got -4"),
        ("model.hidden_dim", "0", "config.model: hidden_dim must be >= 1, got 0"),
        ("model.bottleneck_dropout", "1.0", "config.model: bottleneck_dropout must be in [0, 1), got 1.0"),
        ("model.attender", "nope", "config.model: unknown attender 'nope'"),
    ],
)
def test_a_bad_lookup_model_setting_fails_when_the_config_is_read(
    tmp_path, tiny_overrides, capsys, key, value, fragment
):
    """Named with its key before any data or model is built (a negative size was a traceback from
    torch), so a sweep refuses the cell before it starts any run."""
    run = tmp_path / "run"
    _fails(["train", "lookup", *tiny_overrides(**{key: value}), "--run-dir", str(run)], capsys, fragment)
    assert not run.exists()
