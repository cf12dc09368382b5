"""The toy system: a linear model learns the sum of a random vector; MSE on a fixed test set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from attnlab.config import to_dict
from attnlab.experiments.base import Evaluation, Experiment
from attnlab.training.checkpoint import load_model_weights, load_system_checkpoint
from attnlab.training.trainer import RunSummary, TrainingConfig

SYSTEM = "toy/linear_sum"
Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class ToyData:
    size: int = 4
    test_size: int = 64
    seed: int = 0
    updates_per_epoch: int = 20


@dataclass
class ToyModel:
    bias: bool = True


@dataclass
class ToyEvaluation:
    checkpoint: Literal["best", "last"] = "best"


@dataclass
class ToyConfig:
    experiment: Literal["toy"] = "toy"
    data: ToyData = field(default_factory=ToyData)
    model: ToyModel = field(default_factory=ToyModel)
    training: TrainingConfig = field(default_factory=lambda: TrainingConfig(epochs=3, learning_rate=0.05))
    evaluation: ToyEvaluation = field(default_factory=ToyEvaluation)


def examples(data: ToyData, count: int, generator: torch.Generator) -> Batch:
    """``count`` random vectors and their sums."""
    inputs = torch.randn(count, data.size, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)


def mse(model: nn.Module, batch: Batch) -> float:
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(batch[0]), batch[1]))


class ToyTask:
    """The trainer's task: fresh batches every epoch, validation MSE on the test set."""

    def __init__(self, config: ToyConfig, test: Batch) -> None:
        self.config, self.test = config, test

    def train_batches(self, generator: torch.Generator) -> Iterator[Batch]:
        for _ in range(self.config.data.updates_per_epoch):
            yield examples(self.config.data, self.config.training.batch_size, generator)

    def training_loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return nn.functional.mse_loss(model(batch[0]), batch[1])

    def validate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": mse(model, self.test)}


class ToyExperiment(Experiment[ToyConfig, Batch, nn.Linear]):
    name = "toy"
    label = "toy"
    title = "Toy: the sum of a vector"
    config_type = ToyConfig

    def training_data(self, config: ToyConfig, device: torch.device) -> Batch:
        return examples(config.data, config.data.test_size, torch.Generator().manual_seed(config.data.seed))

    def build_model(self, config: ToyConfig, data: Batch) -> nn.Linear:
        return nn.Linear(config.data.size, 1, bias=config.model.bias)

    def model_spec(self, config: ToyConfig, data: Batch) -> dict[str, Any]:
        return {"system": SYSTEM, "model": to_dict(config.model), "size": config.data.size}

    def training_task(self, config: ToyConfig, data: Batch, device: torch.device) -> ToyTask:
        return ToyTask(config, data)

    def run_summary(self, config: ToyConfig, data: Batch) -> RunSummary:
        return RunSummary("toy: the sum of a vector", {"test": config.data.test_size})

    def load_model(self, path: Path, device: torch.device, config: ToyConfig) -> nn.Linear:
        checkpoint, spec = load_system_checkpoint(path, SYSTEM, "toy", to_dict(config.model), device)
        model = nn.Linear(int(spec["size"]), 1, bias=config.model.bias)
        load_model_weights(path, model, checkpoint)
        return model.eval()

    def test_sets(self, config: ToyConfig, loaded: nn.Linear, device: torch.device) -> dict[str, Any]:
        return {"test": self.training_data(config, device)}

    def evaluate_set(
        self, evaluation: Evaluation[ToyConfig, nn.Linear], name: str, test_set: Any
    ) -> dict[str, Any]:
        return {"mse": mse(evaluation.loaded, test_set)}


EXPERIMENT = ToyExperiment()
