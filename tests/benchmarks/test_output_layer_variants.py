"""The fused output-layer variants of benchmarks/bench_output_layer.py compute the reference's
loss and gradients (``F.linear`` + summed ``F.cross_entropy``), for chunk sizes that do and do not
divide the rows or the vocabulary, and scale their gradients by the incoming one."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(scope="module")
def bench(load_benchmark_module) -> ModuleType:
    return load_benchmark_module("bench_output_layer.py")


def _loss_and_gradients(loss_fn, scale: float) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(13, 5, generator=generator, dtype=torch.float64).requires_grad_()
    weight = torch.randn(97, 5, generator=generator, dtype=torch.float64).requires_grad_()
    bias = torch.randn(97, generator=generator, dtype=torch.float64).requires_grad_()
    targets = torch.randint(0, 97, (13,), generator=generator)
    targets[:3] = torch.tensor([0, 96, 0])  # first and last word, a repeated target
    loss = loss_fn(x, weight, bias, targets)
    (loss * scale).backward()
    return loss.detach(), x.grad, weight.grad, bias.grad


def _reference(x, weight, bias, targets):
    return F.cross_entropy(F.linear(x, weight, bias), targets, reduction="sum")


@pytest.mark.parametrize("variant", ["TokenChunks", "VocabularyChunks"])
@pytest.mark.parametrize("chunk", [1, 4, 13, 20, 97, 200])
def test_fused_variant_matches_reference(bench: ModuleType, variant: str, chunk: int) -> None:
    function = getattr(bench, variant)
    expected = _loss_and_gradients(_reference, scale=0.25)
    got = _loss_and_gradients(lambda *tensors: function.apply(*tensors, chunk), scale=0.25)
    for name, want, have in zip(("loss", "grad x", "grad weight", "grad bias"), expected, got):
        torch.testing.assert_close(
            have, want, msg=lambda m, name=name: f"{variant}, chunk {chunk}, {name}: {m}"
        )
