"""The trainer's optimizer: Adam with the fused kernel, the same update as the default loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.training.trainer import TrainingConfig, make_optimizer


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 5) -> None:
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        inputs = torch.randn(8, 4, generator=generator)
        optimizer.zero_grad(set_to_none=True)
        model(inputs).pow(2).mean().backward()
        optimizer.step()


def test_cpu_optimizer_is_fused_adam_with_the_default_update():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    twin = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    twin.load_state_dict(model.state_dict())
    initial = [p.detach().clone() for p in model.parameters()]
    optimizer = make_optimizer(model, 0.01)
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.defaults["fused"] is True
    assert optimizer.defaults["lr"] == 0.01
    _train(model, optimizer)
    _train(twin, torch.optim.Adam(twin.parameters(), lr=0.01))
    for trained, reference, start in zip(model.parameters(), twin.parameters(), initial, strict=True):
        assert not torch.equal(trained, start)
        torch.testing.assert_close(trained, reference, rtol=1e-5, atol=1e-6)


def test_optimizer_state_round_trips_through_a_state_dict():
    model = nn.Linear(4, 2)
    optimizer = make_optimizer(model, 0.001)
    _train(model, optimizer, steps=2)
    restored = make_optimizer(model, 0.001)
    restored.load_state_dict(optimizer.state_dict())
    assert restored.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


@pytest.mark.parametrize("value", [0.0, -1e-3, float("nan"), float("inf")])
def test_a_learning_rate_that_is_not_a_finite_positive_number_is_refused(value):
    with pytest.raises(ValueError, match=r"learning_rate must be a finite number > 0, got"):
        TrainingConfig(learning_rate=value)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_gradient_clip_that_would_not_clip_is_refused(value):
    """A negative max norm makes clip_grad_norm_ flip every gradient (ascent), 0 zeroes them, NaN
    and inf leave training to diverge without naming the key."""
    with pytest.raises(ValueError, match=r"gradient_clip must be a finite number > 0 .* or null"):
        TrainingConfig(gradient_clip=value)
    assert TrainingConfig(gradient_clip=None).gradient_clip is None
