"""The memory benchmark's eager reference (benchmarks/reference_pooling_network.py) computes the
same function as attnlab's FeedForwardAttentionNetwork from the same weights."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from attnlab.models.pooling_network import FeedForwardAttentionNetwork


@pytest.fixture(scope="module")
def reference_module(load_benchmark_module) -> ModuleType:
    return load_benchmark_module("reference_pooling_network.py")


@pytest.mark.parametrize("pooling", ["attention", "mean"])
@pytest.mark.parametrize("implementation", ["fused", "modular"])
def test_reference_matches_attnlab(reference_module: ModuleType, pooling: str, implementation: str) -> None:
    torch.manual_seed(0)
    model = FeedForwardAttentionNetwork(pooling=pooling, implementation=implementation)  # type: ignore[arg-type]
    reference = reference_module.ReferencePoolingNetwork(pooling=pooling)
    reference_module.load_attnlab_state_dict(reference, model.state_dict())
    assert sum(p.numel() for p in reference.parameters()) == sum(p.numel() for p in model.parameters())
    inputs = torch.randn(3, 40, 2)
    mask = torch.arange(40).unsqueeze(0) >= torch.tensor([40, 33, 21]).unsqueeze(1)
    torch.testing.assert_close(reference(inputs, mask), model(inputs, mask).prediction, atol=1e-6, rtol=1e-5)
