"""benchmarks/bench_training_step.py times an update as the trainer runs it: a variant with
``training.precision=bf16`` runs its forward passes under bfloat16 autocast, one without in float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

BENCHMARKS_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize(
    ("override", "autocast"), [("training.precision=fp32", False), ("training.precision=bf16", True)]
)
def test_a_variant_updates_in_its_precision(load_benchmark_module, monkeypatch, override, autocast):
    monkeypatch.syspath_prepend(str(BENCHMARKS_DIR))  # the script imports its sibling bench_relative_bias
    bench = load_benchmark_module("bench_training_step.py")
    variant = bench.build(
        "v", "lookup_transformer", ["data.long_size=10", "data.interpolation_size=10", override], 2
    )
    seen = []
    loss = variant.task.training_loss

    def recording(model, batch):
        seen.append(torch.is_autocast_enabled("cpu"))
        return loss(model, batch)

    variant.task.training_loss = recording
    before = [parameter.detach().clone() for parameter in variant.model.parameters()]
    assert bench.one_round(variant) > 0
    assert seen == [autocast, autocast]
    assert any(not torch.equal(a, b) for a, b in zip(before, variant.model.parameters(), strict=True))
    assert all(parameter.dtype == torch.float32 for parameter in variant.model.parameters())
