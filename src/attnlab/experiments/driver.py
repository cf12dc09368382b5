"""The generic driver: train / resume / evaluate / checkpoint for every :class:`Experiment`.

One skeleton serves all systems; each supplies only its parts through the interface
(:mod:`attnlab.experiments.base`):

* :func:`train`: config → run directory checks → data → seeded model → :class:`Trainer` (which
  resumes from ``last.pt`` and applies the config's stopping rules) → evaluation of the
  experiment's checkpoint on the test sets already loaded for training;
* :func:`evaluate`: a trained run's checkpoint on its own test sets (their files possibly moved)
  or on given files (:attr:`Capability.EVALUATE_FILES`);
* :func:`load_trained`: a run's config and model, for plots and text generation.

Evaluation writes ``eval/<test set>.json`` per test set and ``eval/summary.json`` (``eval/files/``
and no summary for given files), see :class:`~attnlab.experiments.runs.RunDirectory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

import torch

from attnlab.experiments.base import (
    Capability,
    ConfigT,
    DataT,
    Evaluation,
    Experiment,
    LoadedT,
    Results,
    UnsupportedCapability,
)
from attnlab.experiments.runs import RunDirectory, load_run_for_evaluation, log_evaluation
from attnlab.training.trainer import Trainer, resolve_device, seed_everything


def train(
    experiment: Experiment[ConfigT, DataT, LoadedT],
    config: ConfigT,
    run_dir: str | Path,
    *,
    resume: bool = False,
) -> Results:
    """Train ``config`` into ``run_dir`` (continue it from ``last.pt`` with ``resume``), then
    evaluate the experiment's checkpoint on the run's test sets; returns their metrics."""
    run = RunDirectory(Path(run_dir))
    experiment.prepare_config(config)
    changes = run.check_start(config, resume)
    training = config.training  # type: ignore[attr-defined]
    device = resolve_device(training.device, "training.device")
    data = experiment.training_data(config, device)
    seed_everything(training.seed)
    model = experiment.build_model(config, data).to(device)
    task = experiment.training_task(config, data, device)
    trainer = Trainer(
        model,
        task,
        training,
        run.path,
        experiment.model_spec(config, data),
        summary=experiment.run_summary(config, data),
    )
    run.start_training(config, trainer, changes)
    experiment.on_training_start(run, data)
    trainer.fit()
    path = run.checkpoint(experiment.evaluation_checkpoint(config))
    loaded = experiment.load_model(path, device, config)
    test_sets = experiment.trained_test_sets(config, data, loaded)
    if test_sets is None:
        test_sets = experiment.test_sets(config, loaded, device)
    return evaluate_checkpoint(experiment, run, config, loaded, path, test_sets, device)


def evaluate(
    experiment: Experiment[ConfigT, DataT, LoadedT],
    run_dir: str | Path,
    *,
    data_files: Sequence[str] | None = None,
    checkpoint: str | None = None,
    device_name: str = "auto",
    data_paths: Sequence[str] = (),
) -> Results:
    """Evaluate a trained run's checkpoint (``checkpoint``, else the experiment's choice) on its
    test sets, read from where ``data_paths`` (``key=value`` of
    :data:`~attnlab.experiments.runs.DATA_PATH_KEYS`) says its data now are, or on ``data_files``."""
    if data_files and not experiment.supports(Capability.EVALUATE_FILES):
        raise UnsupportedCapability(
            f"--data does not apply to {experiment.name} runs (they evaluate on their own test sets)"
        )
    trained = load_trained(experiment, run_dir, device_name, checkpoint, data_paths)
    if data_files:
        test_sets = experiment.file_test_sets(trained.config, trained.loaded, data_files)
    else:
        test_sets = experiment.test_sets(trained.config, trained.loaded, trained.device)
    return evaluate_checkpoint(
        experiment,
        trained.run,
        trained.config,
        trained.loaded,
        trained.checkpoint,
        test_sets,
        trained.device,
        data_files=bool(data_files),
    )


def evaluate_checkpoint(
    experiment: Experiment[ConfigT, DataT, LoadedT],
    run: RunDirectory,
    config: ConfigT,
    loaded: LoadedT,
    checkpoint: Path,
    test_sets: dict[str, Any],
    device: torch.device,
    *,
    data_files: bool = False,
) -> Results:
    """The loaded ``checkpoint``'s metrics on each test set, written to ``eval/<name>.json``; on
    the run's own test sets also the experiment's further evaluations and ``eval/summary.json``
    (on given files, ``data_files``: ``eval/files/<name>.json`` only)."""
    log_evaluation(checkpoint, list(test_sets))
    evaluation = Evaluation(run, config, loaded, device, data_files)
    results: Results = {}
    metrics: dict[str, dict[str, Any]] = {}
    for name, test_set in test_sets.items():
        metrics[name] = experiment.evaluate_set(evaluation, name, test_set)
        results[name] = experiment.reported_metrics(metrics[name])
        run.write_evaluation(name, checkpoint, metrics[name], data_file=data_files)
    if data_files:
        return results
    for name, extra in experiment.finish_evaluation(evaluation, metrics).items():
        results[name] = extra
        run.write_evaluation(name, checkpoint, extra)
    run.write_summary(results)
    return results


@dataclass(frozen=True)
class TrainedRun(Generic[ConfigT, LoadedT]):
    """A trained run as :func:`load_trained` reads it back."""

    run: RunDirectory
    config: ConfigT
    checkpoint: Path
    """The checkpoint the model was loaded from."""
    loaded: LoadedT
    """The experiment's :meth:`~Experiment.load_model` result."""
    device: torch.device


def load_trained(
    experiment: Experiment[ConfigT, DataT, LoadedT],
    run_dir: str | Path,
    device_name: str = "auto",
    checkpoint: str | None = None,
    data_paths: Sequence[str] = (),
) -> TrainedRun[ConfigT, LoadedT]:
    """A run's config (its data moved by ``data_paths``) and the model of ``checkpoint`` (default:
    the one the experiment evaluates) on device ``device_name``."""
    run, config = load_run_for_evaluation(run_dir, experiment.parse_config, data_paths)
    device = resolve_device(device_name)
    path = run.checkpoint(checkpoint or experiment.evaluation_checkpoint(config))
    return TrainedRun(run, config, path, experiment.load_model(path, device, config), device)
