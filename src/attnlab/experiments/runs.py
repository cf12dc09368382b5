"""Run directories: everything a run produced, readable back without retraining.

Layout::

    RUN_DIR/
      config.yaml            the resolved config (defaults filled in, overrides applied)
      metrics.jsonl          one record per finished epoch
      checkpoints/best.pt    lowest validation loss      (atomic writes)
      checkpoints/last.pt    end of the last epoch, with optimizer and RNG state, for resume
      eval/<test set>.json   metrics of one evaluation
      eval/summary.json      all test sets of the last ``train``/``evaluate`` call on the run's own
                             test sets (what multiseed, sweeps, recipes and reports read)
      eval/files/<name>.json metrics on a file given to ``attnlab evaluate --data`` (it leaves
                             the run's own results alone)
      plots/*.png            attention heatmaps, interpretable-variable views, curves
      tensorboard/           TensorBoard event files (only with ``training.tensorboard: true``)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from attnlab.config import ConfigError, load_yaml, save_yaml, to_dict
from attnlab.io import atomic_write_json

ConfigT = TypeVar("ConfigT")


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

    def load_config(self, parse_config: Callable[[dict[str, Any], str], ConfigT]) -> ConfigT:
        """The run's config, read from ``config.yaml`` with an experiment's ``parse_config``."""
        return parse_config(self.load_config_data(), str(self.config_file))

    def save_config(self, config: Any) -> None:
        """Create the run directory and write the resolved ``config`` (a config dataclass) to it."""
        self.path.mkdir(parents=True, exist_ok=True)
        save_yaml(to_dict(config), self.config_file)

    def write_evaluation(
        self, test_set: str, checkpoint: Path, metrics: Mapping[str, Any], *, data_file: bool = False
    ) -> None:
        """``eval/<test_set>.json``: the metrics of ``checkpoint`` on one test set; on a file from
        outside the run's config (``data_file``), ``eval/files/<test_set>.json``."""
        record = {"test_set": test_set, "checkpoint": str(checkpoint), **metrics}
        atomic_write_json(self.evaluation_file(test_set, ".json", data_file=data_file), record)

    def evaluation_file(self, test_set: str, suffix: str, *, data_file: bool = False) -> Path:
        """``eval/<test_set><suffix>``, or ``eval/files/<test_set><suffix>`` for a ``data_file``."""
        folder = self.eval_dir / "files" if data_file else self.eval_dir
        return folder / f"{test_set}{suffix}"

    def write_summary(self, results: Mapping[str, Mapping[str, Any]]) -> None:
        """``eval/summary.json``: the metrics of every test set of one ``train``/``evaluate`` call."""
        atomic_write_json(self.eval_dir / "summary.json", results)


def load_run_for_evaluation(
    run_dir: str | Path,
    parse_config: Callable[[dict[str, Any], str], ConfigT],
    checkpoint: str | None = None,
) -> tuple[RunDirectory, ConfigT]:
    """A trained run and its config, with ``evaluation.checkpoint`` replaced by ``checkpoint`` if given."""
    run = RunDirectory(Path(run_dir))
    config = run.load_config(parse_config)
    if checkpoint is not None:
        config.evaluation.checkpoint = checkpoint  # type: ignore[attr-defined]
    return run, config
