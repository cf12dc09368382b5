"""A toy training task shared by the trainer tests."""

import pytest
import torch
from torch import nn


class ToyRegressionTask:
    """Regression of y = 2x with no optional hooks (tests add them to the instance)."""

    def train_batches(self, generator):
        x = torch.randn(8, 1, generator=generator)
        yield x, 2 * x

    def training_loss(self, model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x), y)

    def validate(self, model):
        with torch.no_grad():
            x = torch.linspace(-1, 1, 5).unsqueeze(1)
            return {"loss": float(nn.functional.mse_loss(model(x), 2 * x)), "note": "text"}


@pytest.fixture
def toy_task() -> ToyRegressionTask:
    return ToyRegressionTask()
