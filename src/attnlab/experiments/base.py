"""The one interface every attnlab system implements: :class:`Experiment`.

A system (Lookup Tables, memory problems, language models, SCAN) is a package below
``attnlab.experiments`` whose ``experiment`` module defines ``EXPERIMENT``, an instance of an
:class:`Experiment` subclass. The subclass states what only that system knows: its config schema
(:attr:`Experiment.config_type`), its data, its model and the checkpoint's model spec, its
:class:`~attnlab.training.trainer.TrainingTask`, how one test set is evaluated, and its plots.
Everything else — train / resume / evaluate / which checkpoint / the files of ``eval/`` — is the
generic driver (:mod:`attnlab.experiments.driver`), which :meth:`Experiment.train` and
:meth:`Experiment.evaluate` run. Features that only some systems have are declared as
:class:`Capability` values, which the CLI asks instead of inspecting signatures.
"""

from __future__ import annotations

import enum
import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from attnlab.config import ConfigError, from_dict

if TYPE_CHECKING:
    import torch
    from torch import nn

    from attnlab.experiments.runs import RunDirectory
    from attnlab.training.trainer import RunSummary, TrainingTask

ConfigT = TypeVar("ConfigT")
DataT = TypeVar("DataT")
LoadedT = TypeVar("LoadedT")

Results = dict[str, dict[str, float]]
"""Test set → metrics: what training and evaluation return (and ``eval/summary.json`` holds); the
nested form of the ``test/<test set>/<metric>`` names of :mod:`attnlab.metric_names`."""


class Capability(enum.Enum):
    """Optional features of an experiment; :attr:`Experiment.capabilities` declares its own."""

    EVALUATE_FILES = "evaluate_files"
    """``attnlab evaluate RUN --data FILE…``: evaluate on files outside the run's config
    (:meth:`Experiment.file_test_sets`)."""
    PLOT_STEPS = "plot_steps"
    """``attnlab plot RUN --steps N``: how many steps a plot shows (:attr:`PlotRequest.steps`)."""
    GENERATE = "generate"
    """``attnlab generate RUN``: sample text (:meth:`Experiment.generate_text`,
    :meth:`Experiment.as_text`)."""
    TRANSLATE = "translate"
    """``attnlab translate RUN (--sources S… | --file F | standard input)``: decode given sources,
    as the evaluation decodes its test sets (:meth:`Experiment.translate`)."""


@dataclass(frozen=True)
class PlotRequest:
    """What ``attnlab plot`` asks of a run: which examples of which test set (or of a file)."""

    test_set: str | None = None
    """One of the run's test sets (``None``: the experiment's default one)."""
    data_file: str | None = None
    """A file in the run's data format instead of a test set."""
    indices: tuple[int, ...] = (0,)
    """Which examples (language models: documents)."""
    device_name: str = "auto"
    steps: int | None = None
    """Steps per plot (only with :attr:`Capability.PLOT_STEPS`; ``None``: the experiment's default)."""
    checkpoint: str | None = None
    """``best``, ``last`` or ``trained`` (:data:`~attnlab.experiments.runs.CHECKPOINTS`; ``None``:
    the run's evaluation checkpoint, whose plots go to ``plots/``); a named checkpoint's attention
    plots go to ``plots/<checkpoint>/``, so that they do not replace the evaluated model's."""

    def attention_folder(self, plots_dir: Path) -> Path:
        """Where this request's attention plots go, given the run's ``plots/`` folder."""
        return plots_dir if self.checkpoint is None else plots_dir / self.checkpoint


@dataclass(frozen=True)
class GenerationRequest:
    """What ``attnlab generate`` asks of a run (:attr:`Capability.GENERATE`)."""

    prompt: str = ""
    words: int = 100
    temperature: float = 1.0
    top_k: int | None = None
    samples: int = 1
    seed: int = 0
    checkpoint: str | None = None
    device_name: str = "auto"


@dataclass(frozen=True)
class TranslationRequest:
    """What ``attnlab translate`` asks of a run (:attr:`Capability.TRANSLATE`)."""

    sources: tuple[str, ...]
    """Each source as whitespace-separated tokens."""
    origin: str | None = None
    """The file the sources are the lines of (errors name its lines), if any."""
    checkpoint: str | None = None
    device_name: str = "auto"
    overrides: tuple[str, ...] = ()
    """``evaluation.*`` settings to decode with instead of the run's (e.g. a stop rule)."""


@dataclass(frozen=True)
class Evaluation(Generic[ConfigT, LoadedT]):
    """One evaluation of a checkpoint, as the driver hands it to :meth:`Experiment.evaluate_set`."""

    run: RunDirectory
    """Where the results go (``eval/``)."""
    config: ConfigT
    loaded: LoadedT
    """The experiment's :meth:`~Experiment.load_model` result."""
    device: torch.device
    data_file: bool = False
    """Whether the test sets are given files (results in ``eval/files/``, see
    :meth:`~attnlab.experiments.runs.RunDirectory.evaluation_file`)."""


class UnsupportedCapability(ConfigError):
    """An optional feature was asked of an experiment that does not declare it."""


class Experiment(ABC, Generic[ConfigT, DataT, LoadedT]):
    """One system: its config schema, data, model, training task, evaluation and plots.

    Type parameters: ``ConfigT`` the config dataclass; ``DataT`` what :meth:`training_data` loads
    for a training run; ``LoadedT`` what :meth:`load_model` rebuilds from a checkpoint (the model,
    with its vocabularies where it has some). The driver calls the methods in this order:
    training — :meth:`prepare_config`, :meth:`training_data`, :meth:`build_model`,
    :meth:`training_task`, :meth:`model_spec`, :meth:`run_summary`, :meth:`on_training_start`;
    evaluation — :meth:`evaluation_checkpoint`, :meth:`load_model`, :meth:`trained_test_sets` (right
    after training) or :meth:`test_sets` / :meth:`file_test_sets`, :meth:`evaluate_set` per test set,
    :meth:`finish_evaluation`.
    """

    name: ClassVar[str]
    """The config's ``experiment:`` key, and the name of the system's package."""
    label: ClassVar[str]
    """How messages name its runs (``language-model`` in "applies to language-model runs")."""
    title: ClassVar[str]
    """The heading of its runs' table in the HTML report."""
    config_type: ClassVar[type[Any]]
    """The config dataclass (sections ``data``, ``model``, ``training`` and usually ``evaluation``)."""
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    """The optional features it has (see :class:`Capability`)."""
    percent_metrics: ClassVar[frozenset[str]] = frozenset()
    """Metrics that are percentages beyond the shared ones
    (:data:`attnlab.metric_names.PERCENT_METRICS`: ``seq_acc`` …), for tables and the report's
    accuracy curves."""

    def supports(self, capability: Capability) -> bool:
        """Whether the experiment declares ``capability``."""
        return capability in self.capabilities

    # ------------------------------------------------------------------------------- config

    def parse_config(self, data: dict[str, Any], where: str = "config") -> ConfigT:
        """The typed config of plain ``data`` (strict: unknown keys are errors naming ``where``)."""
        parsed: ConfigT = from_dict(self.config_type, data, where)
        return parsed

    def prepare_config(self, config: ConfigT) -> None:
        """Normalise ``config`` in place before a run starts and saves it (e.g. absolute data
        paths); the default changes nothing."""

    # ------------------------------------------------------------------------------ training

    @abstractmethod
    def training_data(self, config: ConfigT, device: torch.device) -> DataT:
        """Everything training reads (splits, vocabularies), loaded and checked before the model
        is built; bad data raise :class:`~attnlab.config.ConfigError`."""

    @abstractmethod
    def build_model(self, config: ConfigT, data: DataT) -> nn.Module:
        """The untrained model (built after seeding with ``training.seed``)."""

    @abstractmethod
    def model_spec(self, config: ConfigT, data: DataT) -> dict[str, Any]:
        """The checkpoint's model spec: what :meth:`load_model` needs to rebuild the model."""

    def read_model_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's model spec as this version writes it, so that one written before a model
        option existed matches a spec that has the option's default (the trainer compares the
        two before resuming). By default the spec as it is."""
        return spec

    @abstractmethod
    def training_task(self, config: ConfigT, data: DataT, device: torch.device) -> TrainingTask:
        """What the trainer trains on: batches, loss, validation metrics (and optional hooks)."""

    @abstractmethod
    def run_summary(self, config: ConfigT, data: DataT) -> RunSummary:
        """What a run trains on what data, in a few words (the first line of its log)."""

    def on_training_start(self, run: RunDirectory, data: DataT) -> None:
        """Called once the run directory is set up, before the first epoch; writes files that
        belong to the run (the default writes none)."""

    # ---------------------------------------------------------------------------- evaluation

    def evaluation_checkpoint(self, config: ConfigT) -> str:
        """The checkpoint (``best`` or ``last``) a run is evaluated with unless told otherwise:
        by default the config's ``evaluation.checkpoint``."""
        return str(config.evaluation.checkpoint)  # type: ignore[attr-defined]

    @abstractmethod
    def load_model(self, path: Path, device: torch.device, config: ConfigT) -> LoadedT:
        """The model of checkpoint ``path`` in eval mode on ``device`` (with what else it needs,
        e.g. vocabularies); the checkpoint must be of ``config``'s model."""

    @abstractmethod
    def test_sets(self, config: ConfigT, loaded: LoadedT, device: torch.device) -> dict[str, Any]:
        """The run's own test sets, by name, read with the loaded model's vocabularies."""

    def trained_test_sets(self, config: ConfigT, data: DataT, loaded: LoadedT) -> dict[str, Any] | None:
        """The test sets right after training, when :meth:`training_data` already holds them
        (``None``, the default: :meth:`test_sets` loads them)."""
        return None

    def file_test_sets(self, config: ConfigT, loaded: LoadedT, files: Sequence[str]) -> dict[str, Any]:
        """Test sets read from ``files`` (:attr:`Capability.EVALUATE_FILES`), named by their stems."""
        raise UnsupportedCapability(
            f"{self.name} runs evaluate on their own test sets only, not on given files"
        )

    @abstractmethod
    def evaluate_set(
        self, evaluation: Evaluation[ConfigT, LoadedT], name: str, test_set: Any
    ) -> dict[str, Any]:
        """The metrics of one test set by their names in :data:`attnlab.metric_names.METRICS`
        (``seq_acc``, ``perplexity``, …; the ``<metric>`` of ``test/<name>/<metric>``), written to
        ``eval/<name>.json`` by the driver. May write
        per-unit files next to it
        (``evaluation.run.evaluation_file(name, suffix, data_file=evaluation.data_file)``)."""

    def reported_metrics(self, metrics: dict[str, Any]) -> dict[str, float]:
        """The part of :meth:`evaluate_set`'s metrics that training and evaluation return and
        ``eval/summary.json`` holds (by default all of them)."""
        return metrics

    def finish_evaluation(
        self, evaluation: Evaluation[ConfigT, LoadedT], metrics: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """After the run's own test sets (``metrics``: their full metrics): further evaluations
        (test set → metrics, each written to ``eval/<name>.json`` and reported) and files of the
        whole evaluation. The default adds nothing."""
        return {}

    # ----------------------------------------------------------------------- plots, features

    def plot_run(self, run_dir: str | Path, request: PlotRequest) -> list[Path]:
        """``attnlab plot``: the figures of a trained run; returns the files written. By default
        the ``plot_run(run_dir, request)`` of the ``plots`` module beside the experiment's
        module (``attnlab.experiments.<name>.plots``)."""
        package = type(self).__module__.rpartition(".")[0]
        try:
            plots = importlib.import_module(f"{package}.plots")
        except ModuleNotFoundError as error:
            if error.name != f"{package}.plots":
                raise
            raise UnsupportedCapability(f"{self.name} runs have no plots ({package}.plots)") from None
        written: list[Path] = plots.plot_run(run_dir, request)
        return written

    def generate_text(self, run_dir: str | Path, request: GenerationRequest) -> dict[str, Any]:
        """``attnlab generate`` (:attr:`Capability.GENERATE`): ``prompt`` (the words read),
        ``unknown`` (prompt words outside the vocabulary) and ``samples`` (each with ``words``)."""
        raise UnsupportedCapability(f"{self.name} runs do not generate text")

    def as_text(self, words: list[str]) -> str:
        """Generated words as text to show (:attr:`Capability.GENERATE`)."""
        raise UnsupportedCapability(f"{self.name} runs do not generate text")

    def translate(self, run_dir: str | Path, request: TranslationRequest) -> dict[str, Any]:
        """``attnlab translate`` (:attr:`Capability.TRANSLATE`): ``translations`` (each with
        ``source``, ``output``, ``stopped``, ``attention``) and ``unknown`` (source words read as
        ``<unk>``), see :func:`attnlab.evaluation.translation.translate`."""
        raise UnsupportedCapability(f"{self.name} runs do not translate given sources")

    # --------------------------------------------------------------------------- the driver

    def train(self, config: ConfigT, run_dir: str | Path, *, resume: bool = False) -> Results:
        """Train (or resume) a run, then evaluate it on its test sets; returns their metrics
        (:func:`attnlab.experiments.driver.train`)."""
        from attnlab.experiments import driver

        return driver.train(self, config, run_dir, resume=resume)

    def evaluate(
        self,
        run_dir: str | Path,
        *,
        data_files: Sequence[str] | None = None,
        checkpoint: str | None = None,
        device_name: str = "auto",
        overrides: Sequence[str] = (),
        out: str | Path | None = None,
    ) -> Results:
        """Evaluate a trained run on its test sets (moved by ``overrides`` of data paths) or on
        ``data_files``, with its evaluation settings or others (``evaluation.*`` ``overrides``,
        results in ``out``) (:func:`attnlab.experiments.driver.evaluate`)."""
        from attnlab.experiments import driver

        return driver.evaluate(
            self,
            run_dir,
            data_files=data_files,
            checkpoint=checkpoint,
            device_name=device_name,
            overrides=overrides,
            out=out,
        )
