"""The generic driver: train / resume / evaluate / checkpoint for every :class:`Experiment`.

One skeleton serves all systems; each supplies only its parts through the interface
(:mod:`attnlab.experiments.base`):

* :func:`train`: config → run directory checks → data → seeded model → :class:`Trainer` (which
  resumes from ``last.pt`` and applies the config's stopping rules) → evaluation of the
  experiment's checkpoint on the test sets already loaded for training;
* :func:`evaluate`: a trained run's checkpoint on its own test sets (their files possibly moved)
  or on given files (:attr:`Capability.EVALUATE_FILES`), with the run's evaluation settings or
  others (their results written elsewhere than ``eval/``);
* :func:`load_trained`: a run's config and model, for plots and text generation.

Evaluation writes ``eval/<test set>.json`` per test set and ``eval/summary.json`` (``eval/files/``
and no summary for given files), see :class:`~attnlab.experiments.runs.RunDirectory`; with other
evaluation settings, the same files in another folder, with ``evaluation.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, is_dataclass, replace
from pathlib import Path
from typing import Any, Generic

import torch

from attnlab.config import ConfigError, save_yaml, to_dict
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
from attnlab.experiments.runner import training_lock
from attnlab.experiments.runs import (
    EVALUATION_RECORD,
    EVALUATION_SECTION,
    RunDirectory,
    evaluation_overrides,
    load_run_for_evaluation,
    log_evaluation,
)
from attnlab.training.trainer import Trainer, resolve_device, seed_everything


def train(
    experiment: Experiment[ConfigT, DataT, LoadedT],
    config: ConfigT,
    run_dir: str | Path,
    *,
    resume: bool = False,
) -> Results:
    """Train ``config`` into ``run_dir`` (continue it from ``last.pt`` with ``resume``), then
    evaluate the experiment's checkpoint on the run's test sets; returns their metrics. The run's
    lock is held throughout (:func:`~attnlab.experiments.runner.training_lock`): a run that another
    process is training raises :class:`~attnlab.experiments.runner.RunBusy`. A folder that is not
    a run directory is refused before the lock writes its file there (and again under the lock)."""
    RunDirectory(Path(run_dir)).check_free(resume)
    with training_lock(Path(run_dir)):
        return _train(experiment, config, RunDirectory(Path(run_dir)), resume)


def _train(
    experiment: Experiment[ConfigT, DataT, LoadedT], config: ConfigT, run: RunDirectory, resume: bool
) -> Results:
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
        read_model_spec=experiment.read_model_spec,
    )
    run.start_training(config, trainer, changes, device)
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
    overrides: Sequence[str] = (),
    out: str | Path | None = None,
) -> Results:
    """Evaluate a trained run's checkpoint (``checkpoint``, else the experiment's choice) on its
    test sets, read from where ``overrides`` (``key=value`` of
    :data:`~attnlab.experiments.runs.DATA_PATH_KEYS`) says its data now are, or on ``data_files``.

    ``overrides`` may also change the run's evaluation settings (``evaluation.KEY=VALUE``); the
    results then go to ``out``, which they require, never to the run's ``eval/``. With ``out``
    the results (the files of ``eval/``) go there, with ``evaluation.yaml``, the record of what
    was evaluated (:func:`write_evaluation_record`), written first; ``summary.json``, written
    last, says the evaluation finished."""
    if data_files and not experiment.supports(Capability.EVALUATE_FILES):
        raise UnsupportedCapability(
            f"--data does not apply to {experiment.name} runs (they evaluate on their own test sets)"
        )
    results_dir = _results_dir(run_dir, evaluation_overrides(run_dir, overrides), out)
    trained = load_trained(experiment, run_dir, device_name, checkpoint, overrides)
    run = trained.run
    if data_files:
        test_sets = experiment.file_test_sets(trained.config, trained.loaded, data_files)
    else:
        test_sets = experiment.test_sets(trained.config, trained.loaded, trained.device)
    if results_dir is not None:  # once the data are read: a bad file leaves no record behind
        run = replace(run, results=results_dir)
        write_evaluation_record(run, trained.checkpoint, overrides, trained.config, data_files)
    return evaluate_checkpoint(
        experiment,
        run,
        trained.config,
        trained.loaded,
        trained.checkpoint,
        test_sets,
        trained.device,
        data_files=bool(data_files),
    )


def _results_dir(run_dir: str | Path, changed: Sequence[str], out: str | Path | None) -> Path | None:
    """Where an evaluation with the ``evaluation.*`` overrides ``changed`` writes its results:
    ``out`` (``None``: the run's ``eval/``), which changed settings require and which is not
    the run's ``eval/``, nor a folder of other files (an earlier evaluation's may be replaced)."""
    if out is None:
        if changed:
            raise ConfigError(
                f"{' '.join(changed)} would evaluate {run_dir} with other evaluation settings than "
                f"its own: give --out DIR for the results ({Path(run_dir) / 'eval'} holds those of "
                "the run's own settings and is left alone)"
            )
        return None
    own = RunDirectory(Path(run_dir)).eval_dir.resolve()
    if Path(out).resolve() == own or own in Path(out).resolve().parents:
        raise ConfigError(f"--out {out} is inside the run's own results folder {own}: give another folder")
    if Path(out).is_dir() and any(Path(out).iterdir()) and not (Path(out) / EVALUATION_RECORD).is_file():
        raise ConfigError(
            f"--out {out} holds other files and no {EVALUATION_RECORD}: give an empty or new folder, "
            "or one an earlier evaluation wrote (its files are then replaced)"
        )
    return Path(out)


def write_evaluation_record(
    run: RunDirectory,
    checkpoint: Path,
    overrides: Sequence[str],
    config: Any,
    data_files: Sequence[str] | None,
) -> None:
    """``evaluation.yaml`` in the results folder of ``run`` (:attr:`RunDirectory.results`): the
    run, its checkpoint, the overrides given, the evaluation settings used and, for given files,
    the files."""
    record: dict[str, Any] = {
        "run": str(run.path.resolve()),
        "checkpoint": str(checkpoint.resolve()),
        "overrides": list(overrides),
    }
    settings = getattr(config, EVALUATION_SECTION, None)
    if is_dataclass(settings):
        record[EVALUATION_SECTION] = to_dict(settings)
    if data_files:
        record["data_files"] = [str(Path(file).resolve()) for file in data_files]
    save_yaml(record, run.eval_dir / EVALUATION_RECORD)


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
    overrides: Sequence[str] = (),
) -> TrainedRun[ConfigT, LoadedT]:
    """A run's config (with ``overrides``: its data moved, its evaluation settings changed, see
    :func:`~attnlab.experiments.runs.load_run_for_evaluation`) and the model of ``checkpoint``
    (default: the one the experiment evaluates) on device ``device_name``."""
    run, config = load_run_for_evaluation(run_dir, experiment.parse_config, overrides)
    device = resolve_device(device_name)
    path = run.checkpoint(checkpoint or experiment.evaluation_checkpoint(config))
    return TrainedRun(run, config, path, experiment.load_model(path, device, config), device)
