"""The CPU dropout of attnlab.models.dropout: nn.Dropout's contract with cheaper masks."""

import math

import pytest
import torch
from torch import nn

from attnlab.models.dropout import LEVELS, Dropout, cpu_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drops_the_rounded_fraction_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    out = Dropout(p).train()(torch.ones(1_000_000))
    rounded = round(p * LEVELS) / LEVELS
    dropped = float((out == 0).float().mean())
    assert abs(dropped - rounded) < 5 * math.sqrt(rounded * (1 - rounded) / 1_000_000)  # 5 sigma
    survivors = out[out != 0]
    torch.testing.assert_close(survivors, torch.full_like(survivors, 1 / (1 - rounded)))
    assert abs(float(out.mean()) - 1.0) < 5 * math.sqrt(rounded / (1 - rounded) / 1_000_000)


def test_the_mask_is_uniform_over_elements_and_not_periodic_in_the_lanes():
    """Each int64 draw feeds four elements: none of the four positions may drop more often."""
    torch.manual_seed(1)
    out = Dropout(0.5).train()(torch.ones(400_000, 4))
    per_lane = (out == 0).float().mean(dim=0)
    torch.testing.assert_close(per_lane, torch.full((4,), 0.5), atol=0.005, rtol=0)


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    out = cpu_dropout(x, 0.25)
    out.backward(torch.ones_like(out))
    kept = out != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    torch.testing.assert_close(out[kept], x[kept] / 0.75)


def test_eval_mode_zero_and_one_and_dtype_and_seeds():
    x = torch.randn(5, 7)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert Dropout(0.3).train()(x.double()).dtype == torch.float64
    torch.manual_seed(3)
    first = Dropout(0.3).train()(torch.ones(1000))
    torch.manual_seed(3)
    assert torch.equal(Dropout(0.3).train()(torch.ones(1000)), first)
    assert isinstance(Dropout(0.3), nn.Dropout) and Dropout(0.3).p == 0.3
