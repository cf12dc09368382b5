"""Cells trained in worker processes (recipes' ``--jobs``, sweeps) show their log lines too."""

import logging

from attnlab.experiments.runner import run_parallel


def _log_a_line(text: str) -> None:
    logging.getLogger("attnlab.experiments.recipes.test").info("== %s", text)


def test_worker_processes_show_the_library_log_lines_on_stderr(capfd):
    run_parallel(_log_a_line, [("cell one",), ("cell two",)], jobs=2)
    err = capfd.readouterr().err
    assert "== cell one" in err and "== cell two" in err
