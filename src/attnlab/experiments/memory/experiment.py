"""The long-term memory problems of Raffel & Ellis (2015), §2–2.3: config, training, evaluation.

A :class:`~attnlab.models.pooling_network.FeedForwardAttentionNetwork` (attention or mean pooling)
is trained on the addition or multiplication problem (:mod:`attnlab.tasks.memory_problems`) as in
§2.2: squared error, Adam (β = .9, .999), mini-batches of 100 freshly generated sequences, an
epoch of 1,000 updates, accuracy (``|error| < 0.04``) on a fixed held-out test set of 1,000
sequences after every epoch, and training stopped at 100% test accuracy or after 100 epochs.

Choices where the paper is silent:

* the held-out test set is generated once from ``data.seed`` (with its own generator, so it does
  not depend on ``training.seed``); it serves both as the per-epoch validation set (for the
  stopping rule and ``checkpoints/best.pt``, chosen by lowest test MSE) and for the final
  evaluation, exactly as the paper's "held-out test set" does;
* training batches of epoch ``e`` are drawn from the trainer's per-epoch generator
  (``epoch_generator(training.seed, e)``), so an interrupted run resumes exactly;
* no gradient clipping (``training.gradient_clip: null``), which the paper does not mention;
* the run's result is its *last* checkpoint: training stops at the first epoch with 100% test
  accuracy, and that model is the one the paper reports. (``checkpoints/best.pt``, by lowest test
  error, can be a model of another epoch whose accuracy is a hair below 100%.)

The two-symbol temporal order problem (``data.problem: temporal_order``, Raffel & Ellis §3) uses the
same network with 8 one-hot input channels and 4 logits, trained with cross-entropy; its metrics
add ``accuracy_XX_YY`` and ``accuracy_XY_YX``, the accuracy on the sequences whose two relevant
symbols are equal and on those where only their order tells the classes apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from attnlab.config import ConfigError, from_dict, to_dict
from attnlab.experiments.base import Evaluation, Experiment
from attnlab.models.pooling_network import FeedForwardAttentionNetwork
from attnlab.tasks.memory_problems import (
    MIN_LENGTH,
    TEMPORAL_ORDER_CLASSES,
    TEMPORAL_ORDER_MIN_LENGTH,
    TEMPORAL_ORDER_SYMBOLS,
    AdditionDefinition,
    MemoryBatch,
    Padding,
    generate_memory_batch,
    generate_temporal_order_batch,
    is_correct,
    padded_length,
    pool_the_padding,
    sample_lengths,
)
from attnlab.training.checkpoint import (
    check_model_spec,
    load_model_weights,
    load_system_checkpoint,
)
from attnlab.training.trainer import RunSummary, TrainingConfig

SYSTEM = "memory/feedforward_attention"
TEST_SET = "test"
TEMPORAL_ORDER = "temporal_order"


@dataclass
class MemoryDataConfig:
    """Which problem, which lengths (§2.2 fixed ``[T0, 1.1 T0]``, §2.3 variable ``[50, 10000]``)."""

    problem: Literal["addition", "multiplication", "temporal_order"] = "addition"
    setting: Literal["fixed", "variable"] = "fixed"
    t0: int | None = 100
    test_size: int = 1000
    seed: int = 0
    """Seed of the fixed held-out test set."""
    eval_batch_size: int = 100
    """Test sequences per forward pass (memory only; the metrics do not depend on it)."""
    addition: AdditionDefinition = "hochreiter_schmidhuber"
    """The addition problem's definition (:data:`~attnlab.tasks.memory_problems.ADDITION_DEFINITIONS`):
    Hochreiter & Schmidhuber's, which Raffel & Ellis cite, or the one their §2 text states."""

    padding: Padding = "masked"
    """``masked``: each sequence is pooled over its own steps (eqs. 1-2); ``pooled``: as in the
    authors' code, every fixed-length sequence is zero-padded to ``ceil(1.1 T0)`` steps and those are
    pooled too (:func:`~attnlab.tasks.memory_problems.pool_the_padding`)."""

    def __post_init__(self) -> None:
        if self.padding == "pooled" and (self.setting != "fixed" or self.problem == TEMPORAL_ORDER):
            raise ValueError(
                "padding 'pooled' (the authors' code) applies to the fixed-length addition and "
                "multiplication problems only; the authors' variable-length batches have one length "
                f"each, which the 'masked' default computes the same (got setting {self.setting!r}, "
                f"problem {self.problem!r})"
            )
        if self.setting == "fixed":
            minimum = TEMPORAL_ORDER_MIN_LENGTH if self.problem == TEMPORAL_ORDER else MIN_LENGTH
            if self.t0 is None or self.t0 < minimum:
                raise ValueError(
                    f"t0 must be an integer >= {minimum} for the {self.problem} problem in the 'fixed' "
                    f"setting (lengths are uniform in [T0, 1.1 T0]), got {self.t0!r}"
                )
        elif self.t0 is not None:
            raise ValueError(
                "the 'variable' setting draws lengths from [50, 10000]; set data.t0 to null "
                f"(got t0={self.t0!r})"
            )
        if self.test_size < 1:
            raise ValueError(f"test_size must be >= 1, got {self.test_size}")
        if self.eval_batch_size < 1:
            raise ValueError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")


@dataclass
class PoolingModelConfig:
    """The network of §2.1 (see :class:`~attnlab.models.pooling_network.FeedForwardAttentionNetwork`)."""

    pooling: Literal["attention", "mean"] = "attention"
    hidden_dim: int = 100
    implementation: Literal["auto", "fused", "fused_v1", "modular"] = "auto"
    """Same function, different speed and memory; see :mod:`attnlab.models.pooling_network`."""


@dataclass
class MemoryTrainingConfig(TrainingConfig):
    """The shared :class:`TrainingConfig` with the §2.2 defaults, an epoch length and a stopping rule."""

    epochs: int = 100
    batch_size: int = 100
    learning_rate: float = 1e-3
    gradient_clip: float | None = None
    updates_per_epoch: int = 1000
    """Parameter updates (fresh batches) per epoch; the paper's epoch is 1,000 updates."""
    stop_at_accuracy: float | None = 100.0
    """Stop after the first epoch whose test accuracy (percent) reaches this (the trainer's
    :attr:`~attnlab.training.trainer.TrainingConfig.stop_at_accuracy`); ``null`` never stops."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.updates_per_epoch < 1:
            raise ValueError(f"updates_per_epoch must be >= 1, got {self.updates_per_epoch}")


@dataclass
class MemoryExperimentConfig:
    experiment: Literal["memory"] = "memory"
    data: MemoryDataConfig = field(default_factory=MemoryDataConfig)
    model: PoolingModelConfig = field(default_factory=PoolingModelConfig)
    training: MemoryTrainingConfig = field(default_factory=MemoryTrainingConfig)


# ----------------------------------------------------------------------------------- data


def test_set(data: MemoryDataConfig, device: torch.device) -> list[MemoryBatch]:
    """The fixed held-out test set: ``test_size`` sequences from ``data.seed``, in chunks."""
    generator = torch.Generator().manual_seed(data.seed)
    chunks = []
    for start in range(0, data.test_size, data.eval_batch_size):
        size = min(data.eval_batch_size, data.test_size - start)
        chunks.append(_batch(data, size, generator).to(device))
    return chunks


def _batch(data: MemoryDataConfig, size: int, generator: torch.Generator) -> MemoryBatch:
    lengths = sample_lengths(data.setting, size, generator, data.t0)
    if data.problem == "addition" or data.problem == "multiplication":
        batch = generate_memory_batch(data.problem, size, lengths, generator, addition=data.addition)
        if data.padding == "pooled" and data.t0 is not None:
            batch = pool_the_padding(batch, padded_length(data.t0))
        return batch
    return generate_temporal_order_batch(size, lengths, generator)


# ---------------------------------------------------------------------------------- model


def build_model(model: PoolingModelConfig, problem: str = "addition") -> FeedForwardAttentionNetwork:
    """The §2.1 network; for the temporal order problem with one-hot inputs and class logits."""
    classify = problem == TEMPORAL_ORDER
    input_dim = len(TEMPORAL_ORDER_SYMBOLS) if classify else 2  # (value, marker) per step
    num_classes = len(TEMPORAL_ORDER_CLASSES) if classify else None
    try:
        return FeedForwardAttentionNetwork(
            input_dim,
            model.hidden_dim,
            pooling=model.pooling,
            implementation=model.implementation,
            num_classes=num_classes,
        )
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None


def model_spec(model: PoolingModelConfig, problem: str) -> dict[str, Any]:
    return {"system": SYSTEM, "model": to_dict(model), "problem": problem}


def model_from_checkpoint(
    path: Path, device: torch.device, expected: PoolingModelConfig | None = None
) -> FeedForwardAttentionNetwork:
    """Rebuild the network a checkpoint was written for; with ``expected``, it must be that model."""
    expected_model = None if expected is None else to_dict(expected)
    checkpoint, spec = load_system_checkpoint(
        path, SYSTEM, "memory-problem (feed-forward attention)", expected_model, device
    )
    model_config = from_dict(PoolingModelConfig, spec["model"], f"{path}: model")
    problem = str(spec.get("problem", "addition"))
    model = build_model(model_config, problem)
    check_model_spec(path, checkpoint, model_spec(model_config, problem))
    load_model_weights(path, model, checkpoint)
    return model.to(device).eval()


# ------------------------------------------------------------------------------- training


@torch.no_grad()
def evaluate_memory(model: FeedForwardAttentionNetwork, test: list[MemoryBatch]) -> dict[str, float]:
    """``accuracy`` (percent with ``|error| < 0.04``), ``mse`` and ``examples`` over ``test``.

    For a classifier (the temporal order problem): ``accuracy`` of the argmax, ``cross_entropy``,
    and the accuracy on the XX/YY and on the XY/YX sequences (see the module docstring).
    """
    model.eval()
    if model.num_classes is not None:
        return _evaluate_classifier(model, test)
    squared, correct, count = 0.0, 0, 0
    for batch in test:
        prediction = model(batch.inputs, batch.padding_mask).prediction
        squared += float(F.mse_loss(prediction, batch.targets, reduction="sum"))
        correct += int(is_correct(prediction, batch.targets).sum())
        count += batch.targets.numel()
    return {"accuracy": 100.0 * correct / count, "mse": squared / count, "examples": count}


def _evaluate_classifier(model: FeedForwardAttentionNetwork, test: list[MemoryBatch]) -> dict[str, float]:
    loss, count = 0.0, 0
    hits, targets = [], []
    for batch in test:
        logits = model(batch.inputs, batch.padding_mask).prediction
        loss += float(F.cross_entropy(logits, batch.targets, reduction="sum"))
        hits.append(logits.argmax(dim=1) == batch.targets)
        targets.append(batch.targets)
        count += batch.targets.numel()
    hit, target = torch.cat(hits), torch.cat(targets)
    same = (target == TEMPORAL_ORDER_CLASSES.index("XX")) | (target == TEMPORAL_ORDER_CLASSES.index("YY"))
    metrics = {
        "accuracy": _percent(hit),
        "cross_entropy": loss / count,
        "examples": count,
    }
    for name, rows in (("accuracy_XX_YY", same), ("accuracy_XY_YX", ~same)):
        metrics[name] = _percent(hit[rows]) if bool(rows.any()) else float("nan")
    return metrics


def _percent(hits: torch.Tensor) -> float:
    return 100.0 * int(hits.sum()) / hits.numel()


def memory_loss(model: FeedForwardAttentionNetwork, batch: MemoryBatch) -> torch.Tensor:
    """Squared error (§2.1), or cross-entropy for a classifier."""
    prediction = model(batch.inputs, batch.padding_mask).prediction
    if model.num_classes is not None:
        return F.cross_entropy(prediction, batch.targets)
    return F.mse_loss(prediction, batch.targets)


class MemoryTrainingTask:
    """The :class:`~attnlab.training.trainer.TrainingTask` of the memory problems."""

    def __init__(self, config: MemoryExperimentConfig, test: list[MemoryBatch], device: torch.device):
        self.config = config
        self.test = test
        self.device = device

    def train_batches(self, generator: torch.Generator) -> Iterator[MemoryBatch]:
        """``updates_per_epoch`` fresh batches, generated (on the CPU) from ``generator`` only."""
        for _ in range(self.config.training.updates_per_epoch):
            batch = _batch(self.config.data, self.config.training.batch_size, generator)
            yield batch.to(self.device)

    def updates_per_epoch(self) -> int:
        return self.config.training.updates_per_epoch

    def training_loss(self, model: FeedForwardAttentionNetwork, batch: MemoryBatch) -> torch.Tensor:
        return memory_loss(model, batch)

    def validate(self, model: FeedForwardAttentionNetwork) -> dict[str, float]:
        metrics = evaluate_memory(model, self.test)
        loss = metrics["cross_entropy"] if model.num_classes is not None else metrics["mse"]
        return {"loss": loss, "accuracy": metrics["accuracy"]}


def _summary(config: MemoryExperimentConfig) -> RunSummary:
    """What a run trains (the first line of its log)."""
    data = config.data
    lengths = f"T0 {data.t0}" if data.setting == "fixed" else "lengths 50-10000"
    return RunSummary(
        f"memory: the {data.problem} problem, {lengths}; "
        f"feed-forward network, {config.model.pooling} pooling",
        {
            "train per epoch": config.training.updates_per_epoch * config.training.batch_size,
            "test": data.test_size,
        },
        "sequences",
    )


# ----------------------------------------------------------------------------- experiment


class MemoryExperiment(Experiment[MemoryExperimentConfig, list[MemoryBatch], FeedForwardAttentionNetwork]):
    """The memory problems: one generated held-out test set, which also validates; the *last*
    checkpoint is the run's result (see the module docstring)."""

    name = "memory"
    label = "memory-problem"
    title = "Memory problems (addition, multiplication, temporal order)"
    config_type = MemoryExperimentConfig
    percent_metrics = frozenset({"accuracy", "accuracy_XX_YY", "accuracy_XY_YX"})

    def training_data(self, config: MemoryExperimentConfig, device: torch.device) -> list[MemoryBatch]:
        """The held-out test set (training batches are generated fresh in every epoch)."""
        return test_set(config.data, device)

    def build_model(
        self, config: MemoryExperimentConfig, data: list[MemoryBatch]
    ) -> FeedForwardAttentionNetwork:
        return build_model(config.model, config.data.problem)

    def model_spec(self, config: MemoryExperimentConfig, data: list[MemoryBatch]) -> dict[str, Any]:
        return model_spec(config.model, config.data.problem)

    def training_task(
        self, config: MemoryExperimentConfig, data: list[MemoryBatch], device: torch.device
    ) -> MemoryTrainingTask:
        return MemoryTrainingTask(config, data, device)

    def run_summary(self, config: MemoryExperimentConfig, data: list[MemoryBatch]) -> RunSummary:
        return _summary(config)

    def evaluation_checkpoint(self, config: MemoryExperimentConfig) -> str:
        return "last"

    def load_model(
        self, path: Path, device: torch.device, config: MemoryExperimentConfig
    ) -> FeedForwardAttentionNetwork:
        return model_from_checkpoint(path, device, config.model)

    def trained_test_sets(
        self, config: MemoryExperimentConfig, data: list[MemoryBatch], loaded: FeedForwardAttentionNetwork
    ) -> dict[str, Any]:
        return {TEST_SET: data}

    def test_sets(
        self, config: MemoryExperimentConfig, loaded: FeedForwardAttentionNetwork, device: torch.device
    ) -> dict[str, Any]:
        """The generated test set (the problems read no data, so nothing can have moved)."""
        return {TEST_SET: test_set(config.data, device)}

    def evaluate_set(
        self,
        evaluation: Evaluation[MemoryExperimentConfig, FeedForwardAttentionNetwork],
        name: str,
        test_set: Any,
    ) -> dict[str, Any]:
        return evaluate_memory(evaluation.loaded, test_set)


EXPERIMENT = MemoryExperiment()
