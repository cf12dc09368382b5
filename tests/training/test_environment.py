"""The training-session record of ``environment.jsonl``: the commit of the checkout that holds the
package (only where it is tracked there), and the device's model; the warning where PyTorch's
threads would contend for busy cores."""

import logging
import shutil
import subprocess

import pytest
import torch

from attnlab.experiments import runs
from attnlab.experiments.runs import RunDirectory
from attnlab.training.environment import (
    device_name,
    git_revision,
    load_average,
    thread_contention,
    training_environment,
)

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


@pytest.mark.parametrize(
    ("threads", "cpus", "load", "warns"),
    [
        (2, 2, 2.0, True),  # two busy one-thread runs on two cores
        (2, 2, 1.0, True),  # one core idle, two threads
        (4, 8, 5.0, True),
        (2, 2, 0.2, False),  # an idle machine
        (4, 8, 4.0, False),
        (1, 2, 6.0, False),  # one thread waits for no other
        (2, None, 2.0, False),  # unknown CPU count or load: no warning
        (2, 2, None, False),
    ],
)
def test_a_warning_only_where_the_threads_outnumber_the_idle_cores(threads, cpus, load, warns):
    warning = thread_contention(threads, cpus, load)
    assert (warning is not None) == warns
    if warns:
        assert f"load average {load:.1f} on {cpus} CPUs" in warning and "OMP_NUM_THREADS" in warning


def test_the_load_average_is_a_number_where_the_system_gives_one():
    load = load_average()
    assert load is None or load >= 0.0


@pytest.mark.parametrize(("load", "warns"), [(8.0, True), (0.0, False)])
def test_a_training_session_on_a_busy_cpu_warns_in_the_log(tmp_path, monkeypatch, caplog, load, warns):
    monkeypatch.setattr(runs, "load_average", lambda: load)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    (tmp_path / "run").mkdir()
    with caplog.at_level(logging.WARNING, logger=runs.__name__):
        RunDirectory(tmp_path / "run").record_environment(torch.device("cpu"), from_epoch=0)
    assert (tmp_path / "run" / "environment.jsonl").is_file()
    assert any("OMP_NUM_THREADS" in record.getMessage() for record in caplog.records) == warns
