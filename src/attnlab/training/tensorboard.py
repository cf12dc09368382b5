"""Optional TensorBoard logging for the trainer (``training.tensorboard: true``).

:class:`TensorBoardLogger` wraps ``torch.utils.tensorboard.SummaryWriter``, which is imported only
when logging is on, so the ``tensorboard`` package stays an extra (``pip install
'attnlab[tensorboard]'``). The trainer writes, with global step = epoch (1 for the first):

* one scalar per ``metrics.jsonl`` key (``train/loss``, every ``valid/<metric>``, ``seconds``; the
  names of :mod:`attnlab.metric_names`, so TensorBoard shows a ``train`` and a ``valid`` group);
* ``attention/<name>``: one grey-scale image per attention map the task's optional
  ``attention_samples(model)`` hook returns (rows: output steps, columns: source positions).

A resumed run opens the writer with ``purge_step`` = the first epoch it will train, so TensorBoard
drops whatever an interrupted attempt logged from that epoch on and no step appears twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnlab.config import ConfigError

INSTALL_HINT = "pip install 'attnlab[tensorboard]'"


def summary_writer_class() -> type:
    """``torch.utils.tensorboard.SummaryWriter``; a clear error when ``tensorboard`` is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ConfigError(
            f"training.tensorboard: true needs the tensorboard package: {INSTALL_HINT} ({error})"
        ) from None
    return SummaryWriter


class TensorBoardLogger:
    """Scalars and attention images of one run, in ``log_dir`` (created here if missing)."""

    def __init__(self, log_dir: str | Path, *, purge_step: int | None = None) -> None:
        writer_class = summary_writer_class()
        self.log_dir = Path(log_dir)
        self.writer: Any = writer_class(log_dir=str(self.log_dir), purge_step=purge_step)

    def log_scalars(self, step: int, values: Mapping[str, Any]) -> None:
        """Every real number of ``values`` under its own key (others, e.g. strings, are skipped)."""
        for name, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(name, float(value), step)

    def log_attention(self, step: int, images: Mapping[str, torch.Tensor]) -> None:
        """``attention/<name>`` for each ``[target_len, source_len]`` map of weights in [0, 1]."""
        for name, weights in images.items():
            if not isinstance(weights, torch.Tensor) or weights.dim() != 2 or 0 in weights.shape:
                shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
                raise ValueError(
                    f"attention_samples()[{name!r}] must be a non-empty [target_len, source_len] tensor, "
                    f"got {shape}"
                )
            image = weights.detach().float().cpu().clamp(0.0, 1.0).unsqueeze(0)
            self.writer.add_image(f"attention/{name}", image, step, dataformats="CHW")

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
