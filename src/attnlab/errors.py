"""The errors that mean "bad input", which the CLI reports as one clear line instead of a traceback."""

from __future__ import annotations

from attnlab.attention.positions import PositionTableError
from attnlab.config import ConfigError
from attnlab.io import OutputPathError
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import UnknownTokenError
from attnlab.training.checkpoint import CheckpointError
from attnlab.training.trainer import TrainingDiverged

USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    DataFormatError,
    UnknownTokenError,
    CheckpointError,
    TrainingDiverged,
    OutputPathError,
    PositionTableError,
)
