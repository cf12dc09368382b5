"""The training-session record of ``environment.jsonl``: the commit of the checkout that holds the
package (only where it is tracked there), and the device's model."""

import shutil
import subprocess

import pytest
import torch

from attnlab.training.environment import device_name, git_revision, training_environment

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(directory, *arguments):
    return subprocess.run(
        ["git", "-C", str(directory), *arguments], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git checkout whose ``pkg/`` holds a tracked ``__init__.py``, committed once."""
    _git(tmp_path, "init", "-q")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VERSION = 1\n")
    _git(tmp_path, "add", "pkg/__init__.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return tmp_path


@needs_git
def test_the_commit_of_the_checkout_that_tracks_the_package_and_whether_it_was_changed(checkout):
    package = checkout / "pkg"
    head = _git(checkout, "rev-parse", "HEAD")
    assert git_revision(package) == (head, False)
    (checkout / "notes.txt").write_text("untracked files do not make it dirty\n")
    assert git_revision(package) == (head, False)
    (package / "__init__.py").write_text("VERSION = 2\n")
    assert git_revision(package) == (head, True)


@needs_git
def test_a_package_that_the_checkout_around_it_does_not_track_has_no_commit(checkout):
    # e.g. installed from a wheel into a virtual environment inside someone's repository
    installed = checkout / ".venv" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("VERSION = 1\n")
    assert git_revision(installed) == (None, None)


def test_outside_any_checkout_there_is_no_commit(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    assert git_revision(tmp_path) == (None, None)


def test_a_record_names_the_session_and_the_machine():
    record = training_environment(torch.device("cpu"), from_epoch=3)
    assert record["from_epoch"] == 3 and record["device"] == "cpu"
    assert record["device_name"] == device_name(torch.device("cpu"))
    assert record["torch"] == torch.__version__ and record["threads"] == torch.get_num_threads()
    assert isinstance(record["cpus"], int) and record["cpus"] >= 1
