"""How attnlab's log records are shown. Library code logs through :mod:`logging` (loggers under
``attnlab``) and never prints; the CLI shows the records on stderr (and in ``train.log``) in
:data:`LOG_FORMAT`, and :func:`show_logs_in_worker` does the same in a worker process that trains
cells of a recipe or a sweep."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_FORMAT = logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
"""The library's log lines (training progress, evaluated checkpoints) on stderr and in train.log."""


def show_logs_in_worker() -> None:
    """Show the ``attnlab`` INFO records on this process's stderr, as the CLI does, unless the
    process already has a handler for them (a forked worker inherits the CLI's). A worker started
    afresh (``spawn``, ``forkserver``, a Ray worker) has none, and would show nothing."""
    logger = logging.getLogger("attnlab")
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LOG_FORMAT)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class RunLogHandler(logging.FileHandler):
    """``RUN_DIR/train.log``, appended to. Records that come before the run directory exists wait
    in memory, so that a run refused before it starts leaves no file behind."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.setFormatter(LOG_FORMAT)
        self.waiting: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is None and not Path(self.baseFilename).parent.is_dir():
            self.waiting.append(record)
            return
        waiting, self.waiting = self.waiting, []
        for earlier in waiting:
            super().emit(earlier)
        super().emit(record)


@contextmanager
def log_to(*handlers: logging.Handler) -> Iterator[None]:
    """Pass the library's INFO log records to ``handlers`` while the block runs."""
    logger = logging.getLogger("attnlab")
    level = logger.level
    logger.setLevel(logging.INFO)
    for handler in handlers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(level)


def log_to_run(run_dir: Path) -> contextlib.AbstractContextManager[None]:
    """Append what training logs to ``RUN_DIR/train.log`` while the block runs (``attnlab train``,
    and every run a recipe, ``multiseed`` or a sweep trains through
    :func:`~attnlab.experiments.registry.train_or_resume`, in whatever process)."""
    return log_to(RunLogHandler(Path(run_dir) / "train.log"))
