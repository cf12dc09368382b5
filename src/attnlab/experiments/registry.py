"""The systems, found by their packages; built-in configs; the experiment a config selects.

A system is a package ``attnlab.experiments.<name>`` with an ``experiment`` module defining
``EXPERIMENT`` (an :class:`~attnlab.experiments.base.Experiment` whose ``name`` is ``<name>``, the
configs' ``experiment:`` key), usually a ``plots`` module (``attnlab plot``) and, for a paper's
tables and figures, a ``recipe`` module (``attnlab reproduce <recipe.PAPER>``). Adding a package
adds the system everywhere (CLI, sweeps, reports): nothing here lists them.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

from attnlab.checks import did_you_mean
from attnlab.config import ConfigError, apply_overrides, load_yaml
from attnlab.experiments.base import Capability, Experiment
from attnlab.logs import log_to_run

PACKAGE = "attnlab.experiments"
DEFAULT_EXPERIMENT = "lookup"
"""The experiment of a config without an ``experiment`` key (the first system's configs had none)."""


def system_modules(module: str) -> dict[str, str]:
    """System name → the path of its ``module`` (``experiment``, ``plots``, ``recipe``), for the
    packages below :data:`PACKAGE` that have one."""
    folder = importlib.import_module(PACKAGE)
    found = {}
    for info in pkgutil.iter_modules(folder.__path__):
        path = f"{PACKAGE}.{info.name}.{module}"
        if info.ispkg and importlib.util.find_spec(path) is not None:
            found[info.name] = path
    return dict(sorted(found.items()))


EXPERIMENTS = system_modules("experiment")
"""Experiment name → its module, which defines ``EXPERIMENT``."""


def get_experiment(name: str) -> Experiment[Any, Any, Any]:
    """The experiment called ``name``; an unknown name is an error that lists the known ones."""
    if name not in EXPERIMENTS:
        raise ConfigError(
            f"config key 'experiment': unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}"
            f"{did_you_mean(name, EXPERIMENTS)}"
        )
    experiment = importlib.import_module(EXPERIMENTS[name]).EXPERIMENT
    if not isinstance(experiment, Experiment) or experiment.name != name:
        raise TypeError(f"{EXPERIMENTS[name]}.EXPERIMENT must be the Experiment named {name!r}")
    return experiment


def experiment_for(data: dict[str, Any]) -> Experiment[Any, Any, Any]:
    """The experiment named by a config's ``experiment`` key."""
    return get_experiment(str(data.get("experiment", DEFAULT_EXPERIMENT)))


def experiments_with(capability: Capability) -> list[Experiment[Any, Any, Any]]:
    """The experiments that declare ``capability``."""
    return [
        experiment
        for experiment in (get_experiment(name) for name in EXPERIMENTS)
        if experiment.supports(capability)
    ]


def recipes() -> dict[str, ModuleType]:
    """``attnlab reproduce``: paper (the recipe's ``PAPER``) → recipe module, each with
    ``add_arguments(parser)`` and ``main(args)`` (which returns the report)."""
    modules = [importlib.import_module(path) for path in system_modules("recipe").values()]
    return {module.PAPER: module for module in sorted(modules, key=lambda module: str(module.PAPER))}


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
                f"built-in: {sorted(configs)}{did_you_mean(name_or_path, configs)}"
            )
        path = configs[name_or_path]
    return apply_overrides(load_yaml(path), overrides)


def resume_config(run_dir: Path, name_or_path: str, overrides: list[str]) -> dict[str, Any]:
    """The config of ``attnlab train NAME --resume``: the run's saved ``config.yaml``, not the
    config named on the command line, which must only be of the same experiment. ``overrides``
    may only set :data:`~attnlab.experiments.runs.RESUMABLE_KEYS` (they cannot change the epochs
    already trained), or other keys to the values the run was trained with (so the training
    command itself can be repeated with ``--resume``); nothing is written here."""
    from attnlab.experiments.runs import RESUMABLE_KEYS, RunDirectory, refuse_resume_changes

    run = RunDirectory(run_dir)
    if not run.config_file.is_file():
        raise ConfigError(f"no run to resume in {run_dir}: {run.config_file} is missing")
    saved = run.load_config_data()
    ours, theirs = (
        saved.get("experiment", DEFAULT_EXPERIMENT),
        resolve_config(name_or_path, []).get("experiment", DEFAULT_EXPERIMENT),
    )
    if ours != theirs:
        raise ConfigError(
            f"--resume: {run_dir} holds a {ours!r} run, but config {name_or_path!r} is a {theirs!r} "
            "experiment; name a config of the run's experiment"
        )
    refused = []
    for override in overrides:  # the training command repeated with --resume is fine
        key = override.split("=", 1)[0].strip()
        if key not in RESUMABLE_KEYS and apply_overrides(saved, [override]) != saved:
            refused.append(f"{key} (trained with {_dotted_value(saved, key)!r})")
    refuse_resume_changes(run_dir, refused)
    return apply_overrides(saved, overrides)


def _dotted_value(data: dict[str, Any], dotted: str) -> Any:
    """The value at ``section.key`` of plain config data, ``None`` where there is none."""
    node: Any = data
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


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

    experiment = experiment_for(config_data)
    resume = RunDirectory(run_dir).checkpoint("last").exists()
    with log_to_run(run_dir):
        return experiment.train(experiment.parse_config(config_data), run_dir, resume=resume)
