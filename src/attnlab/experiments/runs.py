"""Run directories: everything a run produced, readable back without retraining.

Layout::

    RUN_DIR/
      config.yaml            the resolved config (defaults filled in, overrides applied)
      train.log              what training logged (appended to on each resume)
      resumes.jsonl          one record per resume: the epoch it resumed after and the config
                             keys it changed (only those of :data:`RESUMABLE_KEYS`)
      environment.jsonl      one record per training session (the new run, then each resume):
                             attnlab's version and commit, Python, PyTorch, the device, threads,
                             host (:func:`~attnlab.training.environment.training_environment`)
      metrics.jsonl          one record per finished epoch: ``epoch``, ``train/loss``, the
                             ``valid/<metric>`` metrics, ``seconds`` (:mod:`attnlab.metric_names`;
                             read with :func:`~attnlab.metric_names.read_metrics`, which maps the
                             names of earlier versions)
      checkpoints/best.pt    lowest validation loss      (atomic writes)
      checkpoints/last.pt    end of the last epoch, with optimizer and RNG state, for resume
      checkpoints/trained.pt with ``training.ema_decay`` (where the two above hold the average):
                             the trained weights at the end of the last epoch
      eval/<test set>.json   metrics of one evaluation (the ``test/<test set>/<metric>`` names)
      eval/summary.json      all test sets of the last ``train``/``evaluate`` call on the run's own
                             test sets, test set → metric → value (what multiseed, sweeps, recipes
                             and reports read, with :func:`~attnlab.metric_names.read_summary`)
      eval/files/<name>.json metrics on a file given to ``attnlab evaluate --data`` (it leaves
                             the run's own results alone)
      plots/*.png            attention heatmaps, interpretable-variable views, curves
      tensorboard/           TensorBoard event files (only with ``training.tensorboard: true``)

``attnlab evaluate RUN_DIR evaluation.KEY=VALUE --out OUT`` (other evaluation settings) writes
the files of ``eval/`` to ``OUT/`` instead (:attr:`RunDirectory.results`), with
``OUT/evaluation.yaml``, which records the run, the checkpoint and the overrides, and never
touches ``RUN_DIR/eval/``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from attnlab.checks import check_choice
from attnlab.config import ConfigError, apply_overrides, from_dict, load_yaml, save_yaml, to_dict
from attnlab.experiments.runner import ERROR_FILE, LOCK_FILE, SUMMARY_FILE, run_status
from attnlab.experiments.unit_scores import (
    PREDICTIONS_SUFFIX,
    errors_file_counts_words,
    errors_path,
    read_prediction_errors,
)
from attnlab.io import atomic_append_jsonl, atomic_write_json
from attnlab.metric_names import VALID_LOSS, current_history, read_metrics
from attnlab.training.checkpoint import load_checkpoint
from attnlab.training.environment import (
    ENVIRONMENT_FILE,
    load_average,
    thread_contention,
    training_environment,
)
from attnlab.training.trainer import Trainer

ConfigT = TypeVar("ConfigT")

log = logging.getLogger(__name__)

TRAINED_EPOCHS = "trained_epochs"
"""The key in ``eval/<set>.json`` of how many epochs the run had been trained (its ``metrics.jsonl``
records) when it was evaluated, whichever checkpoint was evaluated: the archive keeps the ``last.pt``
of a finished run that has trained since."""

CHECKPOINTS = ("best", "last", "trained")
"""The checkpoints a run may be evaluated from (:meth:`RunDirectory.checkpoint`)."""

RESUMABLE_KEYS = (
    "training.epochs",
    "training.patience",
    "training.progress",
    "training.checkpoint_every",
    "training.tensorboard",
    "training.device",
)
"""Config keys a resumed run may change: none of them alters the epochs already trained."""

RUN_MARKERS = (LOCK_FILE, "train.log", ENVIRONMENT_FILE, "metrics.jsonl", "checkpoints", ERROR_FILE)
"""What every run writes into its folder before anything else of it (the lock, the log, the
environment record; then the metrics and checkpoints; a failed sweep run's ``error.txt``). A new
run, or ``attnlab train --overwrite``, refuses a folder that holds files but none of these: it was
not made by a run (a project folder with its own ``config.yaml``), and a run would write among,
or delete, its files. Other files a run may hold (an experiment's own, e.g. a language model's
``vocabulary.txt``; ``eval_at/`` of ``scripts/epoch_budget.sh``) do not matter then."""


@dataclass(frozen=True)
class RunDirectory:
    path: Path
    results: Path | None = None
    """Where evaluation results go instead of ``eval/`` (``attnlab evaluate --out``); ``None``:
    ``eval/``."""

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
        """``eval/``, or the folder :attr:`results` names."""
        return self.path / "eval" if self.results is None else self.results

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"

    def checkpoint(self, which: str) -> Path:
        """``checkpoints/<which>.pt``: ``best`` (lowest validation loss), ``last`` (the last
        epoch's) or ``trained`` (a run with ``training.ema_decay``: the last epoch's trained weights,
        where the other two hold averages)."""
        try:
            check_choice("checkpoint", which, CHECKPOINTS)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        path = self.checkpoints / f"{which}.pt"
        if which == "trained" and not path.exists() and self.checkpoint("last").exists():
            raise ConfigError(
                f"{self.path} has no checkpoints/trained.pt: only a run with training.ema_decay keeps "
                "its trained weights beside the averaged ones (best.pt and last.pt hold the weights)"
            )
        return path

    @property
    def resumes_file(self) -> Path:
        return self.path / "resumes.jsonl"

    def check_run_folder(self, action: str) -> None:
        """Refuse a folder that holds files but nothing a run writes (:data:`RUN_MARKERS`; atomic
        writes' ``.*.tmp`` temporaries aside): ``action`` says what would have been done there."""
        if not self.path.is_dir():
            return
        entries = sorted(
            entry.name
            for entry in self.path.iterdir()
            if not (entry.name.startswith(".") and entry.name.endswith(".tmp"))
        )
        if entries and not any(name in RUN_MARKERS for name in entries):
            shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
            raise ConfigError(
                f"{self.path} is not a run directory: it holds {shown} and nothing a run writes "
                f"({', '.join(RUN_MARKERS)}); not {action} there: choose a new or empty run directory"
            )

    def check_free(self, resume: bool) -> None:
        """Refuse to start a new run over a finished or interrupted one unless resuming it, or in a
        folder that holds other files (:meth:`check_run_folder`)."""
        if resume:
            return
        if self.checkpoint("last").exists():
            raise ConfigError(
                f"{self.path} already holds a run; resume it with --resume or choose another run directory"
            )
        self.check_run_folder("starting a run")

    def check_start(self, config: Any, resume: bool) -> dict[str, list[Any]] | None:
        """Before training writes anything: a new run does not replace another (see
        :meth:`check_free`); a resumed one has a saved config from which ``config`` (a config
        dataclass) differs in :data:`RESUMABLE_KEYS` only. Returns the changes of a resume
        (dotted key → ``[saved, new]``), ``None`` for a new run."""
        self.check_free(resume)
        if not resume:
            return None
        if not self.config_file.is_file():
            raise ConfigError(f"no run to resume in {self.path}: {self.config_file} is missing")
        saved = config_items(from_dict(type(config), self.load_config_data(), str(self.config_file)))
        new = config_items(config)
        changes = {key: [saved[key], new[key]] for key in new if saved[key] != new[key]}
        refused = [key for key in changes if key not in RESUMABLE_KEYS]
        refuse_resume_changes(
            self.path, [f"{key} ({changes[key][0]!r} -> {changes[key][1]!r})" for key in refused]
        )
        return changes

    def remove_temporaries(self) -> None:
        """Delete the temporary files of atomic writes that a killed process left behind."""
        for temporary in self.path.rglob(".*.tmp"):
            temporary.unlink(missing_ok=True)

    def record_resume(self, after_epoch: int, changes: Mapping[str, list[Any]]) -> None:
        """Append a record of this resume (when, after which epoch, what changed) to ``resumes.jsonl``."""
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "from_epoch": after_epoch,
            "changes": dict(changes),
        }
        atomic_append_jsonl(self.resumes_file, record)

    @property
    def environment_file(self) -> Path:
        return self.path / ENVIRONMENT_FILE

    def record_environment(self, device: torch.device, from_epoch: int) -> None:
        """Append where this training session runs (:func:`training_environment`) to
        ``environment.jsonl``, and warn where training on the CPU would contend for busy cores
        (:func:`thread_contention`)."""
        environment = training_environment(device, from_epoch)
        atomic_append_jsonl(self.environment_file, environment)
        if device.type == "cpu":
            warning = thread_contention(environment["threads"], environment["cpus"], load_average())
            if warning is not None:
                log.warning(warning)

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

    def start_training(
        self, config: Any, trainer: Trainer, changes: Mapping[str, list[Any]] | None, device: torch.device
    ) -> None:
        """Resume ``trainer`` (``changes`` from :meth:`check_start` is not ``None``), which checks
        ``last.pt``; only then write the config, the session's record in ``environment.jsonl``
        (training on ``device``) and, for a resume, its record in ``resumes.jsonl``."""
        if changes is not None:
            trainer.resume()
            self.remove_temporaries()
        else:
            trainer.initialise()
        self.save_config(config)
        self.record_environment(device, trainer.start_epoch)
        if changes is not None:
            self.record_resume(trainer.start_epoch, changes)
            if changes:
                changed = ", ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())
                log.info("changed on resume (recorded in %s): %s", self.resumes_file.name, changed)

    def write_evaluation(
        self, test_set: str, checkpoint: Path, metrics: Mapping[str, Any], *, data_file: bool = False
    ) -> None:
        """``eval/<test_set>.json``: the metrics of ``checkpoint`` on one test set; on a file from
        outside the run's config (``data_file``), ``eval/files/<test_set>.json``."""
        record = {
            "test_set": test_set,
            "checkpoint": str(checkpoint),
            TRAINED_EPOCHS: self.trained_epochs(),
            **metrics,
        }
        atomic_write_json(self.evaluation_file(test_set, ".json", data_file=data_file), record)

    def trained_epochs(self) -> int:
        """How many epochs the run has trained: its ``metrics.jsonl`` records."""
        return len(read_metrics(self.metrics_file, skip_bad_lines=True))

    def evaluation_file(self, test_set: str, suffix: str, *, data_file: bool = False) -> Path:
        """``eval/<test_set><suffix>``, or ``eval/files/<test_set><suffix>`` for a ``data_file``."""
        folder = self.eval_dir / "files" if data_file else self.eval_dir
        return folder / f"{test_set}{suffix}"

    def write_summary(self, results: Mapping[str, Mapping[str, Any]]) -> None:
        """``eval/summary.json``: the metrics of every test set of one ``train``/``evaluate`` call."""
        atomic_write_json(self.eval_dir / "summary.json", results)


def refuse_resume_changes(run_dir: Path, changed: list[str]) -> None:
    """Raise a :class:`ConfigError` naming the ``changed`` config keys, if any, that resuming the
    run in ``run_dir`` would change but may not."""
    if changed:
        raise ConfigError(
            f"--resume cannot change {', '.join(changed)}: {run_dir} was trained with the values in its "
            f"config.yaml; resuming may change only {', '.join(RESUMABLE_KEYS)} "
            "(train a new run in another --run-dir instead)"
        )


def config_items(config: Any, prefix: str = "") -> dict[str, Any]:
    """A config dataclass as dotted keys → plain values (``training.epochs`` → 50); nested
    dataclasses are followed, other values (lists, free-form mappings) are kept whole."""
    items: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            items.update(config_items(value, f"{prefix}{field.name}."))
        else:
            items[f"{prefix}{field.name}"] = value
    return items


def log_evaluation(checkpoint: Path, test_sets: list[str]) -> None:
    """Say which checkpoint is evaluated (its epoch and validation loss) on which test sets."""
    saved = load_checkpoint(checkpoint)
    history = current_history(saved.get("history") or [])
    validation = history[saved["epoch"] - 1].get(VALID_LOSS) if 0 < saved["epoch"] <= len(history) else None
    loss = f", validation loss {validation:.4f}" if isinstance(validation, float) else ""
    log.info("evaluating %s (epoch %d%s) on %s", checkpoint, saved["epoch"], loss, ", ".join(test_sets))


DATA_PATH_KEYS = (
    "data.corpus",
    "data.root",
    "data.train_file",
    "data.validation_file",
    "data.test_files",
    "data.vocabulary_file",
    "data.cbt_files",
)
"""The config keys that say where a run's data lives: evaluation may change them (a run evaluated
after its data moved) and write its results to the run's ``eval/`` as usual."""

EVALUATION_SECTION = "evaluation"
"""The config section of the evaluation settings (``evaluation.stop_threshold``, …): evaluation may
change any of its keys, with its results written elsewhere (:func:`evaluation_overrides`); every
other key describes what was trained."""

EVALUATION_RECORD = "evaluation.yaml"
"""The file, beside results written elsewhere than ``eval/``, that says what they are the results of."""


def evaluation_overrides(run_dir: str | Path, overrides: Sequence[str]) -> list[str]:
    """The overrides of ``evaluation.*`` keys among ``overrides`` (``key=value``), which may
    otherwise only say where the run's data lives (:data:`DATA_PATH_KEYS`); any other key is a
    :class:`ConfigError` (it would change the trained model)."""
    changed = []
    for override in overrides:
        key = override.split("=", 1)[0].strip()
        if key.startswith(f"{EVALUATION_SECTION}."):
            changed.append(override)
        elif key not in DATA_PATH_KEYS:
            raise ConfigError(
                f"{run_dir}: {override!r} would change what the run was trained with, and a trained "
                f"model cannot be changed; only where its data lives ({', '.join(DATA_PATH_KEYS)}) and "
                f"its evaluation settings ({EVALUATION_SECTION}.KEY=VALUE) may be given"
            )
    return changed


def load_run_for_evaluation(
    run_dir: str | Path,
    parse_config: Callable[[dict[str, Any], str], ConfigT],
    overrides: Sequence[str] = (),
) -> tuple[RunDirectory, ConfigT]:
    """A trained run and its config, with ``overrides`` (``key=value``) applied: where its data
    moved (:data:`DATA_PATH_KEYS`) and other evaluation settings (``evaluation.*``), checked as
    training checks its config's overrides."""
    run = RunDirectory(Path(run_dir))
    changed = evaluation_overrides(run.path, overrides)
    data = run.load_config_data()
    config = parse_config(data, str(run.config_file))
    if not overrides:
        return run, config
    if changed and not dataclasses.is_dataclass(getattr(config, EVALUATION_SECTION, None)):
        raise ConfigError(
            f"evaluating {run.path}: {changed[0]!r}: {data.get('experiment', 'these')} runs have no "
            f"evaluation settings (no {EVALUATION_SECTION} section in {run.config_file})"
        )
    return run, parse_config(apply_overrides(data, list(overrides)), "config")


# --------------------------------------------------------------------------------------------------
# Archiving a run tree's results


ARCHIVED_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "resumes.jsonl",
    ENVIRONMENT_FILE,
    "eval/*.json",
    "eval_at/*/*.json",
    "eval_at/*/trained/*.json",
    "race_seed*.json",
    "aggregate.*",
)
"""What a report reads from a run tree (``attnlab archive`` keeps these, relative to a run or a
sweep's or race's folder): each run's config, history, resumes, training environments and
evaluations (with those kept per epoch budget by ``scripts/epoch_budget.sh``, a weight-averaging
run's trained weights' among them, and the counts of
wrong outputs by kind, ``eval/<test set>.errors.json``), a race's record and a sweep's aggregate.
Checkpoints, logs, predictions and plots are left out."""


def _trained_since_evaluated(run: RunDirectory) -> bool | None:
    """Whether a finished run has trained more epochs than it had when its test sets were evaluated
    (its ``metrics.jsonl`` longer than their ``eval/<set>.json`` record as :data:`TRAINED_EPOCHS`),
    or has been resumed since with a budget past them (:func:`_resumed_past_evaluation`: stopped
    before its first new epoch ended, it would otherwise pass for finished); ``None`` when none of
    them records it (evaluated before evaluation recorded its epochs)."""
    evaluated = epochs_when_evaluated(run)
    if evaluated is None:
        return None
    return run.trained_epochs() > evaluated or _resumed_past_evaluation(run, evaluated)


def _resumed_past_evaluation(run: RunDirectory, evaluated: int) -> bool:
    """Whether ``resumes.jsonl`` records a resume after ``evaluated`` epochs or more that raised
    ``training.epochs`` past them (``scripts/epoch_budget.sh``'s next stage): such a run is to
    train on, stopped rather than finished until it is evaluated again. Unreadable lines are
    skipped."""
    if not run.resumes_file.is_file():
        return False
    for line in run.resumes_file.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or not isinstance(record.get("from_epoch"), int):
            continue
        changes = record.get("changes")
        budget = changes.get("training.epochs") if isinstance(changes, dict) else None
        if (
            record["from_epoch"] >= evaluated
            and isinstance(budget, list)
            and len(budget) == 2
            and isinstance(budget[1], int)
            and budget[1] > evaluated
        ):
            return True
    return False


def epochs_when_evaluated(run: RunDirectory) -> int | None:
    """The most epochs any of the run's own ``eval/<set>.json`` records it had been trained when
    evaluated (:data:`TRAINED_EPOCHS`); ``None`` when none records it."""
    epochs = []
    for path in (run.path / SUMMARY_FILE).parent.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get(TRAINED_EPOCHS), int):
            epochs.append(record[TRAINED_EPOCHS])
    return max(epochs, default=None)


def archive_results(source: Path, destination: Path, *, unfinished_checkpoints: bool = False) -> int:
    """Copy the files of :data:`ARCHIVED_FILES` under ``source`` (a run tree: a recipe's or a
    sweep's ``--out``, or one run) to the same places under ``destination``, replacing what is
    there; returns how many files were written.

    Run directories stay outside the repository (checkpoints are megabytes), and a machine that
    held a campaign can be lost with them. The archive is small enough to keep with the project,
    and a recipe's ``--report-only`` pointed at it rebuilds the same tables and figures; copied back
    into a fresh run tree it lets the recipe skip the finished runs. With
    ``unfinished_checkpoints``, the checkpoints of every run that has not finished (no
    ``eval/summary.json``) are kept too (:data:`CHECKPOINTS`: ``last.pt``, and ``best.pt`` and
    ``trained.pt`` where the run has them), so that it resumes exactly where it was archived and is
    evaluated from the checkpoint its config names (worth it where checkpoints are small: Raffel &
    Ellis's network's is 143 KB), and so are those of a finished run that has trained since its
    evaluation (more epochs in its ``metrics.jsonl`` than its evaluation records, or a resume since
    to a larger budget, :func:`_trained_since_evaluated`: a learning-rate race resumes the rates it
    keeps with more epochs, and their summaries are those of the last round; a run trained in
    stages may be stopped before its next stage's first epoch ends); the archived checkpoints of a run
    that has since finished are deleted, but only where its evaluation records its epochs: for a
    run evaluated before evaluations recorded them only file times can tell (its ``last.pt`` newer
    than its summary is copied), and a checkout or copy of the run tree reorders them, so its
    archived checkpoints are never deleted rather than lose a run that could resume.
    Nothing else is deleted. A predictions file without its errors file beside it (evaluated before
    evaluation wrote one), or with one written before errors files counted the wrong outputs of one
    target word
    (:func:`~attnlab.experiments.unit_scores.errors_file_counts_words`), gets a new one in the
    archive, counted from it (:func:`~attnlab.experiments.unit_scores.read_prediction_errors`), so
    that the report of the archive says how the outputs are wrong as the one of the runs does."""
    source, destination = Path(source), Path(destination)
    if not source.is_dir():
        raise ConfigError(f"{source}: not a directory (expected a run tree to archive)")
    if destination.resolve().is_relative_to(source.resolve()):
        raise ConfigError(f"{destination}: inside {source}; archive it somewhere else")
    kept = {path for pattern in ARCHIVED_FILES for path in source.rglob(pattern) if path.is_file()}
    if unfinished_checkpoints:
        for run in [RunDirectory(path.parent) for path in kept if path.name == "config.yaml"]:
            last = run.checkpoint("last")
            # not run.checkpoint(which): it refuses "trained" for a run without one, and here a
            # checkpoint the run does not have is simply not copied
            checkpoints = [run.checkpoints / f"{which}.pt" for which in CHECKPOINTS]
            if run_status(run.path) == "done":
                trained = _trained_since_evaluated(run)
                if trained is False:
                    for checkpoint in checkpoints:
                        (destination / checkpoint.relative_to(source)).unlink(missing_ok=True)
                    continue
                # No record of its epochs: only file times tell, which a copy reorders, so the
                # archived last.pt is replaced when this one looks newer and never deleted.
                if trained is None and not (
                    last.is_file() and last.stat().st_mtime_ns > (run.path / SUMMARY_FILE).stat().st_mtime_ns
                ):
                    continue
            kept.update(checkpoint for checkpoint in checkpoints if checkpoint.is_file())
    counted = [
        path
        for path in source.rglob(f"eval/*{PREDICTIONS_SUFFIX}")
        if not errors_file_counts_words(errors_path(path))
    ]
    errors = {path: read_prediction_errors(path) for path in counted}  # all read before anything is written
    for path in sorted(kept):
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for path, counts in errors.items():
        target = errors_path(destination / path.relative_to(source))
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target, counts)
    return len(kept) + len(errors)
