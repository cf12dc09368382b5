"""Run directories: everything a run produced, readable back without retraining.

Layout::

    RUN_DIR/
      config.yaml            the resolved config (defaults filled in, overrides applied)
      metrics.jsonl          one record per finished epoch
      checkpoints/best.pt    lowest validation loss      (atomic writes)
      checkpoints/last.pt    end of the last epoch, with optimizer and RNG state, for resume
      eval/<test set>.json   metrics of one evaluation
      eval/summary.json      all test sets of the last ``train``/``evaluate`` call
      plots/*.png            attention heatmaps, interpretable-variable views, curves
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError, load_yaml


@dataclass(frozen=True)
class RunDirectory:
    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"

    def checkpoint(self, which: str) -> Path:
        if which not in ("best", "last"):
            raise ConfigError(f"checkpoint must be 'best' or 'last', got {which!r}")
        return self.checkpoints / f"{which}.pt"

    def check_free(self, resume: bool) -> None:
        """Refuse to start a new run over a finished or interrupted one unless resuming it."""
        if self.checkpoint("last").exists() and not resume:
            raise ConfigError(
                f"{self.path} already holds a run; resume it with --resume or choose another run directory"
            )

    def load_config_data(self) -> dict[str, Any]:
        if not self.config_file.is_file():
            raise ConfigError(f"{self.path} is not a run directory: {self.config_file} is missing")
        return load_yaml(self.config_file)
