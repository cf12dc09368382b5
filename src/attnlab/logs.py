"""How attnlab's log records are shown. Library code logs through :mod:`logging` (loggers under
``attnlab``) and never prints; the CLI shows the records on stderr (and in ``train.log``) in
:data:`LOG_FORMAT`, and :func:`show_logs_in_worker` does the same in a worker process that trains
cells of a recipe or a sweep."""

from __future__ import annotations

import logging
import sys

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
