"""One training loop for every attnlab system.

A system supplies a :class:`TrainingTask` (its batches, its loss, its validation); the
:class:`Trainer` owns the optimisation (Adam, gradient clipping), seeding, the progress bar,
metrics (``metrics.jsonl``), checkpoints (``checkpoints/best.pt`` by validation loss and
``checkpoints/last.pt`` for resuming, after every epoch and, with ``training.checkpoint_every``,
every that many updates within one) and exact resume: a run interrupted at any point and resumed
from ``last.pt`` ends with the same weights and metrics as an uninterrupted run on the CPU. With
``training.ema_decay`` it validates, keeps and hands to evaluation an exponential moving average
of the weights (:class:`torch.optim.swa_utils.AveragedModel`) while it trains the weights
themselves. With ``training.tensorboard: true`` it also logs the metrics and the task's attention
maps to TensorBoard (:mod:`attnlab.training.tensorboard`).

The trainer tells what it does through :mod:`logging` (logger ``attnlab.training.trainer``; the
CLI shows it on stderr and writes it to ``RUN_DIR/train.log``): one line at the start (what is
trained on what data, parameter count, device, run directory), progress within an epoch (a tqdm
bar with a total on a terminal, a log line every :data:`PROGRESS_LOG_SECONDS` otherwise) and one
line per epoch with the training loss, the validation metrics and the best checkpoint.

Metrics are named in the vocabulary of :mod:`attnlab.metric_names`: a task's validation returns
``loss`` and its other metrics, which the trainer records as ``valid/<metric>`` next to
``train/loss``; a checkpoint of an earlier version (``validation_*`` names) resumes with its history
mapped to these names.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm.auto import tqdm

from attnlab.checks import check_choice
from attnlab.config import ConfigError
from attnlab.io import atomic_write_jsonl
from attnlab.metric_names import (
    PERCENT_METRICS,
    TRAIN_LOSS,
    VALID_LOSS,
    current_history,
    metric_label,
    stop_target,
    valid_name,
    validation_metric,
)
from attnlab.tasks.batching import epoch_generator
from attnlab.training.checkpoint import (
    CheckpointError,
    capture_rng_state,
    check_model_spec,
    load_checkpoint,
    load_model_weights,
    restore_rng_state,
    save_checkpoint,
)
from attnlab.training.convergence import best_epoch, patience_exhausted, targets_reached, training_end
from attnlab.training.tensorboard import TensorBoardLogger, summary_writer_class

log = logging.getLogger(__name__)

PROGRESS_LOG_SECONDS = 30.0
"""Off a terminal (a log file, CI, a cluster job), a progress line at most this often."""

PRECISIONS = ("fp32", "bf16")
"""The values of ``training.precision``."""


@dataclass
class TrainingConfig:
    """Optimisation settings shared by all systems."""

    epochs: int = 50
    batch_size: int = 64
    learning_rate: float = 1e-3
    gradient_clip: float | None = 5.0
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    """Progress within an epoch: a bar with a total on a terminal, a log line every 30 s otherwise
    (false: neither; the line per epoch stays)."""
    tensorboard: bool = False
    """Also log to TensorBoard, in ``RUN_DIR/tensorboard/`` (needs ``pip install 'attnlab[tensorboard]'``):
    the per-epoch metrics (the ``metrics.jsonl`` keys, step = epoch) and the task's attention images."""
    checkpoint_every: int | None = None
    """Also write ``last.pt`` every this many updates within an epoch (null: after each epoch only),
    for epochs too long to lose; a run resumed from one continues with the next update, exactly."""
    patience: int | None = None
    """Early stopping: stop after this many epochs without a lower validation loss (null: train
    all ``epochs``). ``checkpoints/best.pt`` is the epoch with the lowest validation loss."""
    lr_decay: float | None = None
    """Learning-rate decay on plateau: after an epoch whose validation loss is not the lowest so
    far, multiply the learning rate by this factor in (0, 1) (null: a constant learning rate)."""
    stop_at: dict[str, float] | None = None
    """Stopping at a target: stop after the first epoch whose validation metrics reach every value
    given (metric → threshold, ``>=``), e.g. ``{valid/seq_acc: 100.0}`` (null: never). The names
    before issue 24 (``validation_seq_acc``) are read as the current ones, with a warning."""
    stop_at_accuracy: float | None = None
    """``stop_at: {valid/accuracy: X}`` in one key: stop after the first epoch whose validation
    accuracy (percent) reaches this (the memory problems' rule, Raffel & Ellis §2.2; null: never)."""
    init_from: str | None = None
    """Start the run from the weights of this checkpoint (e.g. another run's
    ``checkpoints/best.pt``) instead of the seeded initialisation: a new training — fine-tuning, or
    a second phase with other settings, such as a lower learning rate — whose optimizer, history,
    epochs and random state start afresh. The checkpoint must be of the same model (its spec is
    checked). A resumed run continues from its own ``last.pt`` (null: no initial weights)."""

    ema_decay: float | None = None
    """Weight averaging: after every update the average ``a <- d * a + (1 - d) * w`` of the weights
    ``w``, with ``d`` this decay in (0, 1) and ``a`` starting at the first update's weights (an
    exponential moving average, Polyak & Juditsky 1992's averaging with a forgetting factor: about
    the last ``1 / (1 - d)`` updates count, 1,000 at 0.999). Validation, ``best.pt``, the
    ``model`` weights of ``last.pt`` and hence evaluation read the average; training goes on from
    the weights themselves, which ``last.pt`` also keeps (``training_model``) for resuming, and
    ``trained.pt`` holds as its ``model`` after every epoch, for evaluation (``attnlab evaluate
    --checkpoint trained``). Buffers are copied, not averaged. null: no averaging, the weights as
    trained."""

    precision: str = "fp32"
    """``fp32``: train in single precision. ``bf16``: mixed precision — each update's forward pass
    and loss run under :class:`torch.autocast` with bfloat16 (matrix products in bfloat16; the
    weights, their gradients and Adam's moments in float32; bfloat16 has float32's exponent range,
    so no loss scaling is needed, unlike float16: Kalamkar et al. 2019, "A Study of BFLOAT16 for
    Deep Learning Training"). Validation, evaluation and decoding stay in float32, so reported
    metrics are not rounded. Whether it pays depends on the model and the machine: measure with
    ``benchmarks/bench_training_step.py --variant "bf16: training.precision=bf16"`` (docs/results.md,
    session 63). A CUDA device needs bfloat16 support (Ampere or later)."""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate}")
        if self.gradient_clip is not None and not (
            math.isfinite(self.gradient_clip) and self.gradient_clip > 0
        ):
            # clip_grad_norm_ with a negative norm flips every gradient (ascent); 0 zeroes them
            raise ValueError(
                f"gradient_clip must be a finite number > 0 (the largest gradient norm) or null (no "
                f"clipping), got {self.gradient_clip}"
            )
        if not isinstance(self.tensorboard, bool):
            raise ValueError(f"tensorboard must be true or false, got {self.tensorboard!r}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 or null, got {self.checkpoint_every}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 or null, got {self.patience}")
        if self.lr_decay is not None and not 0 < self.lr_decay < 1:
            raise ValueError(f"lr_decay must be in (0, 1) or null, got {self.lr_decay}")
        check_choice("precision", self.precision, PRECISIONS)
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in (0, 1) or null, got {self.ema_decay}")
        if self.stop_at is not None and self.stop_at_accuracy is not None:
            raise ValueError("give stop_at or stop_at_accuracy, not both")
        if self.stop_at is not None and not self.stop_at:
            raise ValueError("stop_at must name at least one validation metric (or be null)")
        if self.stop_at is not None:
            self.stop_at = {stop_target(str(name), "stop_at"): value for name, value in self.stop_at.items()}
        if self.init_from is not None:
            if not str(self.init_from).strip():
                raise ValueError("init_from must be the path of a checkpoint, or null")
            # Absolute, so that the run's config.yaml names the file wherever it is read from.
            self.init_from = str(Path(self.init_from).expanduser().resolve())

    def stop_targets(self) -> dict[str, float]:
        """Validation metric (``valid/<metric>``) → the value that ends training (``stop_at`` /
        ``stop_at_accuracy``)."""
        if self.stop_at_accuracy is not None:
            return {valid_name("accuracy"): self.stop_at_accuracy}
        return dict(self.stop_at or {})

    def stop_key(self) -> str:
        """The config key that set :meth:`stop_targets`, for messages."""
        return "training.stop_at_accuracy" if self.stop_at_accuracy is not None else "training.stop_at"


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite; the last good checkpoint is kept."""


class TrainingTask(Protocol):
    """What a system gives the trainer.

    A task may also define :meth:`AttentionSampler.attention_samples`; the trainer calls it only
    when ``training.tensorboard`` is on (tasks without it log no images). A task may define
    :meth:`EpochStartHook.start_epoch`, called before each training epoch (also a resumed one).
    """

    def train_batches(self, generator: torch.Generator) -> Iterable[Any]:
        """The epoch's training batches, shuffled with ``generator`` only."""

    def training_loss(self, model: Any, batch: Any) -> torch.Tensor:
        """The mean loss of ``batch`` (a scalar with a graph); ``model`` is the system's
        :class:`~torch.nn.Module`."""

    def validate(self, model: Any) -> dict[str, float]:
        """Validation metrics by their names in :data:`attnlab.metric_names.METRICS`, without a
        prefix (``loss``, ``seq_acc``, …); must contain ``loss``. The trainer records them as
        ``valid/<metric>``."""


class UpdateCounter(Protocol):
    """The optional hook of a :class:`TrainingTask` that gives the progress bar its total."""

    def updates_per_epoch(self) -> int:
        """How many batches :meth:`TrainingTask.train_batches` yields in one epoch (about)."""


class EpochStartHook(Protocol):
    """The optional hook of a :class:`TrainingTask` that sets the model up for an epoch."""

    def start_epoch(self, model: nn.Module, epoch: int) -> None:
        """Called before training epoch ``epoch`` (0-based), after ``model.train()``; a resumed run
        calls it with the epoch it resumes at, so what it sets depends on ``epoch`` only."""


class CarriedStateTask(Protocol):
    """The optional hooks of a :class:`TrainingTask` that carries state from batch to batch (the
    language model's LSTM state and memory across BPTT segments); a checkpoint written within an
    epoch stores it, so that the resumed run continues from the same state."""

    def carried_state(self) -> dict[str, Any]:
        """The state after the last training batch: tensors, numbers and dicts of them."""

    def restore_carried_state(self, state: dict[str, Any]) -> None:
        """Set the state that :meth:`carried_state` returned; called after the epoch's batches up
        to the checkpoint have been drawn again (and skipped)."""


@dataclass
class EpochPosition:
    """How far into an epoch training got: updates done, their summed loss and the task's carried
    state after the last of them (``None``: the task carries none)."""

    updates: int = 0
    loss_sum: float = 0.0
    carried_state: dict[str, Any] | None = None


class AttentionSampler(Protocol):
    """The optional hook of a :class:`TrainingTask` for TensorBoard attention images."""

    def attention_samples(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """A few attention maps of the current model: name → ``[target_len, source_len]`` weights
        in [0, 1] (rows: output steps, columns: source positions). Called after each validation,
        in eval mode under ``torch.no_grad()``; the torch random state is restored afterwards, so
        the hook cannot change training."""


def available_devices() -> list[str]:
    """The device names this machine can train on (``auto`` first)."""
    names = ["auto", "cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        names += ["cuda", *(f"cuda:{index}" for index in range(count))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        names.append("mps")
    return names


def resolve_device(name: str, where: str = "--device") -> torch.device:
    """The device called ``name``; ``auto`` picks CUDA when available, else the CPU.

    An unknown or unavailable device is a :class:`~attnlab.config.ConfigError` that names
    ``where`` (the config key or option) and lists :func:`available_devices`.
    """
    available = available_devices()
    if name == "auto":
        return torch.device("cuda" if "cuda" in available else "cpu")
    listed = f"available: {', '.join(available)}"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{where}: unknown device {name!r}; {listed}") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"{where}: attnlab does not train on {name!r}; {listed}")
    key = device.type if device.index is None else f"{device.type}:{device.index}"
    if device.type != "cpu" and key not in available:
        raise ConfigError(f"{where}: device {name!r} is not available on this machine; {listed}")
    return device


def check_precision(precision: str, device: torch.device, where: str = "training.precision") -> None:
    """Raise a :class:`~attnlab.config.ConfigError` naming ``where`` if ``device`` cannot train in
    ``precision``."""
    if precision == "fp32":
        return
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"{where}: {device} has no bfloat16 support (Ampere or later); use fp32")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"{where}: bf16 trains on cpu or cuda, not {device.type}; use fp32")


def training_autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The context an update's forward pass and loss run in: nothing for ``fp32``, autocast to
    bfloat16 on ``device`` for ``bf16`` (``TrainingConfig.precision``)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


@dataclass(frozen=True)
class RunSummary:
    """What a run trains, for the trainer's first log line."""

    system: str
    """What is trained, e.g. ``lookup (reversed Lookup Tables): recurrent seq2seq, attender shift``."""
    data: dict[str, int]
    """Split → size in ``unit`` (e.g. ``{"train": 8000, "validation": 500}``)."""
    unit: str = "examples"


def stderr_is_terminal() -> bool:
    """Whether standard error is a terminal (then progress is a bar, else periodic log lines)."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


class EpochProgress:
    """Progress within one epoch, in one of three modes: ``bar`` (a tqdm bar with a total, for a
    terminal), ``log`` (a log line at most every :data:`PROGRESS_LOG_SECONDS`, for log files) or
    ``off``."""

    def __init__(self, label: str, total: int | None, done: int, mode: str) -> None:
        self.label = label
        self.total = total
        self.mode = mode
        self.first = done
        self.started = self.last = time.monotonic()
        self.bar = (
            tqdm(total=total, initial=done, desc=label, leave=False, dynamic_ncols=True, unit="update")
            if mode == "bar"
            else None
        )

    def update(self, done: int, loss: float) -> None:
        """``done`` updates of the epoch so far, with this mean training loss."""
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            return
        now = time.monotonic()
        if self.mode != "log" or now - self.last < PROGRESS_LOG_SECONDS:
            return
        self.last = now
        of = f"/{self.total}" if self.total else ""
        percent = f" ({100 * done / self.total:.0f}%)" if self.total else ""
        rate = (done - self.first) / max(now - self.started, 1e-9)
        log.info("%s: %d%s updates%s, loss %.4f, %.1f updates/s", self.label, done, of, percent, loss, rate)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def format_metric(name: str, value: Any) -> str:
    """``seqAcc 12.34%``, ``attnLoss 0.1234``: a metric as the log lines show it."""
    label = metric_label(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{label} {value}"
    if name in PERCENT_METRICS:
        return f"{label} {value:.2f}%"
    return f"{label} {value:.4f}" if abs(value) < 100 else f"{label} {value:.2f}"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def validation_record(metrics: dict[str, Any]) -> dict[str, Any]:
    """A task's validation metrics (``loss``, ``seq_acc``, …) under their ``valid/`` names.

    A name with a prefix (``validation_loss``, ``valid/loss``) or without ``loss`` is a
    :class:`TypeError`: the task does not follow :meth:`TrainingTask.validate`."""
    prefixed = [name for name in metrics if "/" in name or name.startswith("validation_")]
    if prefixed or "loss" not in metrics:
        raise TypeError(
            "TrainingTask.validate must return its metrics without a prefix, 'loss' among them "
            f"(the trainer records them as valid/<metric>); got {', '.join(map(repr, metrics))}"
        )
    return {valid_name(name): value for name, value in metrics.items()}


def make_optimizer(model: nn.Module, learning_rate: float) -> torch.optim.Adam:
    """Adam, as every paper here trains; its fused kernel where the parameters' device has one.

    The fused kernel runs the same update as the default per-parameter loop and is about 4× faster
    on the CPU (7 vs 28 ms per step for the 2.6M parameters of Syntactic Attention, one thread),
    which matters most at small batches: with one example per update (Russin et al.'s setting) the
    default loop was about a third of each update.
    """
    parameters = list(model.parameters())
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
    return torch.optim.Adam(parameters, lr=learning_rate, fused=fused or None)


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        task: TrainingTask,
        config: TrainingConfig,
        run_dir: str | Path,
        model_spec: dict[str, Any],
        *,
        summary: RunSummary | None = None,
        read_model_spec: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``summary`` says what is trained on what data, for the first log line. Training stops
        early as ``config`` says (:meth:`should_stop`); a resumed run that had already stopped
        trains no further. ``read_model_spec`` reads a checkpoint's spec as this version writes it
        before it is compared with ``model_spec`` (the experiment's
        :meth:`~attnlab.experiments.base.Experiment.read_model_spec`: a checkpoint written before a
        model option existed resumes as the option's default)."""
        self.model = model
        self.task = task
        self.config = config
        self.run_dir = Path(run_dir)
        self.model_spec = model_spec
        self.device = next(model.parameters(), torch.empty(0)).device
        check_precision(config.precision, self.device)
        self.read_model_spec = read_model_spec
        self.summary = summary
        self._epoch_updates: int | None = None
        self.optimizer = make_optimizer(model, config.learning_rate)
        self.averaged: AveragedModel | None = None
        if config.ema_decay is not None:
            self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema_decay))
        self.history: list[dict[str, Any]] = []
        self.best_validation_loss = math.inf
        self.start_epoch = 0
        self.resume_position = EpochPosition()
        if config.tensorboard:
            summary_writer_class()  # a missing tensorboard package fails now, not after an epoch

    @property
    def evaluated_model(self) -> nn.Module:
        """The weights that are validated, saved as ``model`` and evaluated: the average with
        ``training.ema_decay`` (its buffers those of the trained model), else the model."""
        if self.averaged is None:
            return self.model
        averaged: nn.Module = self.averaged.module
        with torch.no_grad():
            for copy, buffer in zip(averaged.buffers(), self.model.buffers(), strict=True):
                copy.copy_(buffer)
        return averaged

    @property
    def last_checkpoint(self) -> Path:
        return self.run_dir / "checkpoints" / "last.pt"

    @property
    def best_checkpoint(self) -> Path:
        return self.run_dir / "checkpoints" / "best.pt"

    @property
    def trained_checkpoint(self) -> Path:
        """With ``training.ema_decay``: the trained (not averaged) weights of the last epoch."""
        return self.run_dir / "checkpoints" / "trained.pt"

    def resume(self) -> None:
        """Continue from ``last.pt`` (weights, optimizer, history, RNG state; within an epoch also
        the position in it and the task's carried state). Without ``last.pt`` (a run stopped
        before its first checkpoint) training starts from the first epoch."""
        if not self.last_checkpoint.exists():
            log.info("no checkpoint in %s yet: training from the first epoch", self.run_dir)
            self.initialise()
            return
        checkpoint = self._load_weights(self.last_checkpoint)
        if self.averaged is not None:
            self._restore_average(checkpoint)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.history = current_history(checkpoint["history"])
        self.best_validation_loss = float(checkpoint["best_validation_loss"])
        self.start_epoch = int(checkpoint["epoch"])
        within = checkpoint.get("within_epoch")
        if within is not None:
            self.resume_position = EpochPosition(
                int(within["updates"]), float(within["loss_sum"]), within.get("carried_state")
            )
        restore_rng_state(checkpoint["rng"])
        within_text = f", {self.resume_position.updates} updates into the next" if within is not None else ""
        log.info("resuming %s after epoch %d%s", self.run_dir, self.start_epoch, within_text)

    def _restore_average(self, checkpoint: dict[str, Any]) -> None:
        """From ``last.pt`` of a run with ``training.ema_decay``: its ``model`` (just loaded into
        the model) is the average; the trained weights are ``training_model``."""
        if "training_model" not in checkpoint:
            raise CheckpointError(
                f"{self.last_checkpoint} holds no trained weights beside the average "
                "(training_model): it was not written by a run with training.ema_decay"
            )
        self.averaged.module.load_state_dict(checkpoint["model"])  # type: ignore[union-attr]
        self.averaged.n_averaged.fill_(int(checkpoint["averaged_updates"]))  # type: ignore[union-attr]
        self.model.load_state_dict(checkpoint["training_model"])

    def initialise(self) -> None:
        """Before the first epoch of a run: load the weights of ``init_from``, if the config names
        a checkpoint (of the same model: its spec is checked); nothing else is taken from it."""
        if self.config.init_from is None:
            return
        path = Path(self.config.init_from)
        if not path.is_file():
            raise ConfigError(
                f"training.init_from: checkpoint {path} does not exist (expected a .pt file of a run)"
            )
        checkpoint = self._load_weights(path)
        log.info("initialised from %s (epoch %d of its run)", path, int(checkpoint.get("epoch", 0)))

    def _load_weights(self, path: Path) -> dict[str, Any]:
        """Load the model's weights from checkpoint ``path`` (which must be of this model's spec);
        returns the whole checkpoint."""
        checkpoint = load_checkpoint(path)
        spec = checkpoint.get("model_spec")
        if self.read_model_spec is not None and isinstance(spec, dict):
            check_model_spec(path, {"model_spec": self.read_model_spec(spec)}, self.model_spec)
        else:
            check_model_spec(path, checkpoint, self.model_spec)
        load_model_weights(path, self.model, checkpoint)
        return checkpoint

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def fit(self) -> list[dict[str, Any]]:
        """Train for the remaining epochs (or until :meth:`should_stop`); returns the metrics history."""
        logger: TensorBoardLogger | None = None
        self._log_start()
        try:
            for epoch in range(self.start_epoch, self.config.epochs):
                if self.should_stop():
                    log.info("stopping after epoch %d: %s", epoch, self._stop_reason())
                    break
                started = time.perf_counter()
                train_loss = self._train_epoch(epoch)
                validated = self.evaluated_model
                validated.eval()
                validation = validation_record(self.task.validate(validated))
                self._check_stop_targets(validation)
                record = {
                    "epoch": epoch + 1,
                    TRAIN_LOSS: train_loss,
                    **validation,
                    "seconds": round(time.perf_counter() - started, 3),
                }
                self.history.append(record)
                if self.config.tensorboard:
                    if logger is None:
                        # Steps from this epoch on replace what an interrupted attempt logged.
                        logger = TensorBoardLogger(self.tensorboard_dir, purge_step=epoch + 1)
                    self._log_tensorboard(logger, record)
                improved = validation[VALID_LOSS] < self.best_validation_loss
                if not improved and self.config.lr_decay is not None:
                    for group in self.optimizer.param_groups:
                        group["lr"] *= self.config.lr_decay
                self._save(epoch + 1, improved=improved)
                self._log_epoch(record, improved)
            self._warn_if_unconverged()
        finally:
            if logger is not None:
                logger.close()
        return self.history

    def _log_start(self) -> None:
        """One line: what is trained on what data, its size, the device, epochs, run directory."""
        count = sum(parameter.numel() for parameter in self.model.parameters())
        precision = "" if self.config.precision == "fp32" else ", bf16 mixed precision"
        what = self.summary.system if self.summary is not None else type(self.model).__name__
        data = ""
        if self.summary is not None and self.summary.data:
            sizes = ", ".join(f"{name} {size:,}" for name, size in self.summary.data.items())
            data = f"; data: {sizes} {self.summary.unit}"
        log.info(
            "training %s: %s parameters%s; device %s%s; %s, batch size %d; run directory %s",
            what,
            f"{count:,}",
            data,
            self.device,
            precision,
            "1 epoch" if self.config.epochs == 1 else f"{self.config.epochs} epochs",
            self.config.batch_size,
            self.run_dir,
        )

    def _log_epoch(self, record: dict[str, Any], improved: bool) -> None:
        """One line per epoch: train loss, validation metrics, time, and the best checkpoint."""
        validation = "".join(
            f", {format_metric(metric, value)}"
            for key, value in record.items()
            if (metric := validation_metric(key)) is not None and key != VALID_LOSS
        )
        if improved:
            best = f"new best, saved {self.best_checkpoint}"
        else:
            best = f"best: epoch {best_epoch(self.history)} ({self.best_checkpoint.name})"
        log.info(
            "epoch %d/%d: train loss %.4f; validation loss %.4f%s; %.1f s; %s",
            record["epoch"],
            self.config.epochs,
            record[TRAIN_LOSS],
            record[VALID_LOSS],
            validation,
            record["seconds"],
            best,
        )

    def _warn_if_unconverged(self) -> None:
        """A warning when the epoch cap ended the run before its patience rule would have
        (:mod:`attnlab.training.convergence`): its numbers may be those of a model still learning.
        A run without patience (a fixed-epoch protocol) is not warned of; reports still list it."""
        if self.config.patience is None:
            return
        end = training_end(self.history, self.config.epochs, self.config.patience, self.config.stop_targets())
        if end is not None and end.unconverged:
            log.warning(
                "training.epochs=%d ended this run before it converged (lowest validation loss at "
                "epoch %d); to train it on, resume it with a larger training.epochs",
                end.cap,
                end.best_epoch,
            )

    def _stop_reason(self) -> str:
        if patience_exhausted(self.history, self.config.patience):
            return f"no lower validation loss for {self.config.patience} epochs (training.patience)"
        reached = ", ".join(
            f"{metric} {self.history[-1][metric]:g} >= {value:g}"
            for metric, value in self.config.stop_targets().items()
        )
        return f"{reached} ({self.config.stop_key()})"

    def should_stop(self) -> bool:
        """Whether the history so far ends training: ``config.patience`` epochs without a lower
        validation loss, or the last epoch reached ``config.stop_at`` / ``stop_at_accuracy``."""
        if not self.history:
            return False
        if targets_reached(self.history[-1], self.config.stop_targets()):
            return True
        return patience_exhausted(self.history, self.config.patience)

    def _check_stop_targets(self, validation: dict[str, Any]) -> None:
        """A stopping target on a metric that the task's validation does not report is a
        :class:`~attnlab.config.ConfigError` (it would never stop training)."""
        missing = [metric for metric in self.config.stop_targets() if metric not in validation]
        if missing:
            reported = ", ".join(validation)
            raise ConfigError(
                f"{self.config.stop_key()}: the validation reports no {', '.join(missing)}; "
                f"it reports {reported}"
            )

    def _log_tensorboard(self, logger: TensorBoardLogger, record: dict[str, Any]) -> None:
        """The epoch's metrics and, if the task has the hook, its attention maps (step = epoch)."""
        step = int(record["epoch"])
        logger.log_scalars(step, {key: value for key, value in record.items() if key != "epoch"})
        attention_samples = getattr(self.task, "attention_samples", None)
        if attention_samples is not None:
            rng = capture_rng_state()
            try:
                shown = self.evaluated_model
                shown.eval()
                with torch.no_grad():
                    images = attention_samples(shown)
            finally:
                restore_rng_state(rng)
            logger.log_attention(step, images)
        logger.flush()

    def _train_epoch(self, epoch: int) -> float:
        self.model.train()
        start_epoch = getattr(self.task, "start_epoch", None)
        if start_epoch is not None:
            start_epoch(self.model, epoch)
        batches = iter(self.task.train_batches(epoch_generator(self.config.seed, epoch)))
        position, self.resume_position = self.resume_position, EpochPosition()
        if position.updates:
            self._skip_to(batches, position)
        progress = EpochProgress(
            f"epoch {epoch + 1}/{self.config.epochs}",
            self._updates_per_epoch(),
            position.updates,
            self._progress_mode(),
        )
        total, count = position.loss_sum, position.updates
        every = self.config.checkpoint_every
        try:
            for batch in batches:
                with training_autocast(self.config.precision, self.device):
                    loss = self.task.training_loss(self.model, batch)
                value = float(loss.detach())
                if not math.isfinite(value):
                    raise TrainingDiverged(
                        f"training loss became {value} in epoch {epoch + 1}, batch {count + 1}; "
                        f"stopped. The last good checkpoint is {self.last_checkpoint} "
                        "(try a lower training.learning_rate or a training.gradient_clip)"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if self.config.gradient_clip is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.config.gradient_clip)
                self.optimizer.step()
                if self.averaged is not None:
                    self.averaged.update_parameters(self.model)
                total += value
                count += 1
                progress.update(count, total / count)
                if every is not None and count % every == 0:
                    self._save_within_epoch(epoch, count, total)
        finally:
            progress.close()
        self._epoch_updates = count
        return total / max(count, 1)

    def _progress_mode(self) -> str:
        if not self.config.progress:
            return "off"
        return "bar" if stderr_is_terminal() else "log"

    def _updates_per_epoch(self) -> int | None:
        """The progress total: the task's count if it has the hook, else the last epoch's."""
        counter = getattr(self.task, "updates_per_epoch", None)
        return int(counter()) if counter is not None else self._epoch_updates

    def _skip_to(self, batches: Iterator[Any], position: EpochPosition) -> None:
        """Draw (and drop) the batches a resumed epoch had already trained on, then restore the
        task's carried state."""
        skipped = sum(1 for _ in itertools.islice(batches, position.updates))
        if skipped < position.updates:
            raise CheckpointError(
                f"{self.last_checkpoint} was written after update {position.updates} of its epoch, "
                f"but the epoch now has only {skipped} batches; was the data changed?"
            )
        restore = getattr(self.task, "restore_carried_state", None)
        if restore is not None and position.carried_state is not None:
            restore(position.carried_state)

    def _save_within_epoch(self, epoch: int, updates: int, loss_sum: float) -> None:
        """``last.pt`` in the middle of epoch ``epoch`` (0-based): ``epoch`` epochs finished."""
        within: dict[str, Any] = {"updates": updates, "loss_sum": loss_sum}
        carried_state = getattr(self.task, "carried_state", None)
        if carried_state is not None:
            within["carried_state"] = carried_state()
        self._save_last(self._checkpoint(epoch), within_epoch=within)

    def _save(self, epochs_done: int, improved: bool) -> None:
        validation_loss = self.history[-1][VALID_LOSS]
        if improved:
            self.best_validation_loss = validation_loss
        checkpoint = self._checkpoint(epochs_done)
        if improved:
            save_checkpoint(self.best_checkpoint, checkpoint)
        if self.averaged is not None:
            save_checkpoint(self.trained_checkpoint, {**checkpoint, "model": self.model.state_dict()})
        self._save_last(checkpoint)
        atomic_write_jsonl(self.run_dir / "metrics.jsonl", self.history)

    def _checkpoint(self, epochs_done: int) -> dict[str, Any]:
        return {
            "model_spec": self.model_spec,
            "model": self.evaluated_model.state_dict(),
            "epoch": epochs_done,
            "best_validation_loss": self.best_validation_loss,
            "history": self.history,
        }

    def _save_last(self, checkpoint: dict[str, Any], within_epoch: dict[str, Any] | None = None) -> None:
        """``last.pt``: the checkpoint with what resuming needs (optimizer, RNG, position and,
        with ``training.ema_decay``, the trained weights beside the average)."""
        resumable = {**checkpoint, "optimizer": self.optimizer.state_dict(), "rng": capture_rng_state()}
        if self.averaged is not None:
            resumable["training_model"] = self.model.state_dict()
            resumable["averaged_updates"] = int(self.averaged.n_averaged)
        if within_epoch is not None:
            resumable["within_epoch"] = within_epoch
        save_checkpoint(self.last_checkpoint, resumable)
