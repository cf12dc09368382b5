"""Atomic writes, and the one-line errors for output paths that cannot be written."""

import pytest

from attnlab.cli import main
from attnlab.io import OutputPathError, atomic_write_text, make_directory


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "new" / "folder" / "out.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [path.name for path in target.parent.iterdir()] == ["out.txt"]


def test_a_folder_where_a_file_is_to_be_written_is_an_output_path_error(tmp_path):
    with pytest.raises(OutputPathError, match=rf"{tmp_path} is a folder: give a file path"):
        atomic_write_text(tmp_path, "text")
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_a_folder_is_needed_is_an_output_path_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    for path in (blocker, blocker / "below" / "it"):
        with pytest.raises(OutputPathError, match=rf"{blocker} is a file, not a folder"):
            make_directory(path)
        with pytest.raises(OutputPathError, match=rf"{blocker} is a file, not a folder"):
            atomic_write_text(path / "out.txt", "text")
    assert blocker.read_text() == "keep me"
    assert make_directory(tmp_path / "x" / "y").is_dir()


def test_the_cli_reports_a_run_directory_that_is_a_file_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "run"
    blocker.write_text("")
    assert main(["train", "lookup", "--run-dir", str(blocker), "training.epochs=1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"attnlab: error: {blocker} is a file, not a folder: give another path than {blocker}"]
