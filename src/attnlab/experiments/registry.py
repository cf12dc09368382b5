"""Built-in configs and the experiment each config selects (its ``experiment:`` key)."""

from __future__ import annotations

import importlib
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.logs import log_to_run

EXPERIMENTS = {
    "lookup": "attnlab.experiments.lookup",
    "memory": "attnlab.experiments.memory",
    "language_model": "attnlab.experiments.language_model",
    "scan": "attnlab.experiments.scan",
}
"""Experiment name → module exposing ``parse_config``, ``train`` and ``evaluate``."""

PLOTS = {
    "lookup": "attnlab.experiments.lookup_plots",
    "language_model": "attnlab.experiments.language_model_plots",
    "memory": "attnlab.experiments.memory_plots",
    "scan": "attnlab.experiments.scan_plots",
}
"""Experiment name → module exposing ``plot_run`` (``attnlab plot``)."""


def builtin_configs() -> dict[str, Path]:
    """Name → path of the YAML configs shipped in ``attnlab/experiments/configs``."""
    folder = resources.files("attnlab.experiments") / "configs"
    return {
        Path(entry.name).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".yaml")
    }


def resolve_config(name_or_path: str, overrides: list[str]) -> dict[str, Any]:
    """Load a config file (or built-in config by name) and apply ``key=value`` overrides."""
    path = Path(name_or_path)
    if not path.is_file():
        configs = builtin_configs()
        if name_or_path not in configs:
            raise ConfigError(
                f"config {name_or_path!r} is neither a file nor a built-in config; "
                f"built-in: {sorted(configs)}"
            )
        path = configs[name_or_path]
    return apply_overrides(load_yaml(path), overrides)


def resume_config(run_dir: Path, name_or_path: str, overrides: list[str]) -> dict[str, Any]:
    """The config of ``attnlab train NAME --resume``: the run's saved ``config.yaml``, not the
    config named on the command line, which must only be of the same experiment. ``overrides``
    may only set :data:`~attnlab.experiments.runs.RESUMABLE_KEYS` (they cannot change the epochs
    already trained); nothing is written here."""
    from attnlab.experiments.runs import RESUMABLE_KEYS, RunDirectory, refuse_resume_changes

    run = RunDirectory(run_dir)
    if not run.config_file.is_file():
        raise ConfigError(f"no run to resume in {run_dir}: {run.config_file} is missing")
    saved = run.load_config_data()
    ours, theirs = (
        saved.get("experiment", "lookup"),
        resolve_config(name_or_path, []).get("experiment", "lookup"),
    )
    if ours != theirs:
        raise ConfigError(
            f"--resume: {run_dir} holds a {ours!r} run, but config {name_or_path!r} is a {theirs!r} "
            "experiment; name a config of the run's experiment"
        )
    keys = [override.split("=", 1)[0].strip() for override in overrides]
    refuse_resume_changes(run_dir, [key for key in keys if key not in RESUMABLE_KEYS])
    return apply_overrides(saved, overrides)


def experiment_module(data: dict[str, Any]) -> ModuleType:
    """The module of the experiment named by the config's ``experiment`` key."""
    name = data.get("experiment", "lookup")
    if name not in EXPERIMENTS:
        raise ConfigError(
            f"config key 'experiment': unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}"
        )
    return importlib.import_module(EXPERIMENTS[name])


def plots_module(data: dict[str, Any]) -> ModuleType:
    """The ``attnlab plot`` module of a run's experiment (see :data:`PLOTS`)."""
    experiment_module(data)  # an unknown experiment is an error that lists the known ones
    return importlib.import_module(PLOTS[data.get("experiment", "lookup")])


def check_plot_indices(indices: list[int], count: int, source: str, items: str = "examples") -> list[int]:
    """``attnlab plot --index``: every index is in ``0 … count - 1``, checked before anything is drawn."""
    bad = [index for index in indices if not 0 <= index < count]
    if bad:
        raise ConfigError(f"--index {bad} out of range: {source} has {count} {items} (0..{count - 1})")
    return indices


def train_or_resume(config_data: dict[str, Any], run_dir: Path) -> dict[str, dict[str, float]]:
    """Train a run from plain config data, resuming it if it was interrupted (for sweeps); the
    config must be the run's (only :data:`~attnlab.experiments.runs.RESUMABLE_KEYS` may differ)."""
    from attnlab.experiments.runs import RunDirectory

    experiment = experiment_module(config_data)
    resume = RunDirectory(run_dir).checkpoint("last").exists()
    with log_to_run(run_dir):
        return experiment.train(experiment.parse_config(config_data), run_dir, resume=resume)
