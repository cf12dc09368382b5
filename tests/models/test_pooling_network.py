"""Tests for the Raffel & Ellis (2015) §2.1 feed-forward attention network."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import fused_pooling
from attnlab.models.pooling_network import FUSED_MIN_LENGTH, FeedForwardAttentionNetwork, PoolingNetworkOutput


def _n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("pooling", "expected"), [("attention", 10_602), ("mean", 10_501)])
def test_parameter_counts_match_paper(pooling: str, expected: int) -> None:
    assert _n_params(FeedForwardAttentionNetwork(pooling=pooling)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("pooling", ["attention", "mean"])
def test_output_shapes(pooling: str) -> None:
    model = FeedForwardAttentionNetwork(pooling=pooling)  # type: ignore[arg-type]
    out = model(torch.randn(4, 37, 2))
    assert isinstance(out, PoolingNetworkOutput)
    assert out.prediction.shape == (4,)
    assert out.weights.shape == (4, 37)
    torch.testing.assert_close(out.weights.sum(dim=1), torch.ones(4))


@pytest.mark.parametrize("pooling", ["attention", "mean"])
def test_padding_matches_unpadded_runs(pooling: str) -> None:
    torch.manual_seed(0)
    model = FeedForwardAttentionNetwork(pooling=pooling)  # type: ignore[arg-type]
    lengths = [30, 17, 5]
    seqs = [torch.randn(n, 2) for n in lengths]
    batch = torch.zeros(len(seqs), max(lengths), 2)
    mask = torch.ones(len(seqs), max(lengths), dtype=torch.bool)
    for i, seq in enumerate(seqs):
        batch[i, : len(seq)] = seq
        mask[i, : len(seq)] = False
    batch[2, 5:] = 123.0  # padding content must not matter
    out = model(batch, mask)
    assert bool((out.weights[mask] == 0).all())
    for i, seq in enumerate(seqs):
        alone = model(seq.unsqueeze(0))
        torch.testing.assert_close(out.prediction[i : i + 1], alone.prediction, atol=1e-6, rtol=0)
        torch.testing.assert_close(out.weights[i, : len(seq)], alone.weights[0], atol=1e-6, rtol=0)


def test_initialisation_statistics() -> None:
    torch.manual_seed(1234)
    model = FeedForwardAttentionNetwork()
    for linear, tol in ((model.input_layer, 0.2), (model.hidden_layer, 0.05)):
        assert bool((linear.bias == 0).all())
        expected = 1.0 / math.sqrt(linear.in_features)
        assert abs(linear.weight.std().item() - expected) < tol * expected
        assert abs(linear.weight.mean().item()) < 3 * expected / math.sqrt(linear.weight.numel())
    assert bool((model.output_layer.bias == 0).all())
    assert bool((model.pooling.bias == 0).all())


@pytest.mark.parametrize("pooling", ["attention", "mean"])
def test_gradients_reach_all_parameters(pooling: str) -> None:
    torch.manual_seed(0)
    model = FeedForwardAttentionNetwork(pooling=pooling)  # type: ignore[arg-type]
    # With leak 0.01 every LReLU passes a nonzero gradient, so each parameter must receive one.
    out = model(torch.randn(8, 20, 2))
    out.prediction.sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert bool(param.grad.abs().sum() > 0), name


def test_wrong_channel_count_raises() -> None:
    model = FeedForwardAttentionNetwork()
    with pytest.raises(ValueError, match="input_dim=2"):
        model(torch.randn(2, 10, 3))
    with pytest.raises(ValueError, match=r"\[batch, time, 2\]"):
        model(torch.randn(10, 2))


def test_invalid_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="pooling"):
        FeedForwardAttentionNetwork(pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hidden_dim"):
        FeedForwardAttentionNetwork(hidden_dim=0)


def test_leaky_rectifier_slope() -> None:
    model = FeedForwardAttentionNetwork(leak=0.01)
    x = torch.tensor([-2.0, 3.0])
    torch.testing.assert_close(model._lrelu(x), torch.tensor([-0.02, 3.0]))


@pytest.mark.parametrize("pooling", ["attention", "mean"])
@pytest.mark.parametrize("implementation", ["fused", "fused_v1"])
def test_fused_and_modular_implementations_agree(pooling: str, implementation: str) -> None:
    torch.manual_seed(0)
    fused = FeedForwardAttentionNetwork(pooling=pooling, implementation=implementation)  # type: ignore[arg-type]
    modular = FeedForwardAttentionNetwork(pooling=pooling, implementation="modular")  # type: ignore[arg-type]
    modular.load_state_dict(fused.state_dict())
    lengths = torch.tensor([300, 260, 21])
    inputs = torch.randn(3, 300, 2)
    mask = torch.arange(300).unsqueeze(0) >= lengths.unsqueeze(1)
    targets = torch.rand(3)
    results = []
    for model in (fused, modular):
        out = model(inputs, mask)
        F.mse_loss(out.prediction, targets).backward()
        results.append((out, [p.grad for p in model.parameters()]))
    (out_f, grads_f), (out_m, grads_m) = results
    torch.testing.assert_close(out_f.prediction, out_m.prediction, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_f.weights, out_m.weights, atol=1e-6, rtol=1e-5)
    for grad_f, grad_m in zip(grads_f, grads_m):
        torch.testing.assert_close(grad_f, grad_m, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["attention", "mean"])
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_fused_training_loss_and_gradients_match_float64(
    pooling: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's loss and every parameter's gradient, float32 fused vs float64 modular. (The
    kept ``fused_v1`` fails this: its float32 running sums drift by more than the tolerance.)"""
    monkeypatch.setenv(fused_pooling.BACKEND_ENV, backend)
    torch.manual_seed(0)
    fused = FeedForwardAttentionNetwork(pooling=pooling, implementation="fused")  # type: ignore[arg-type]
    exact = FeedForwardAttentionNetwork(pooling=pooling, implementation="modular").double()  # type: ignore[arg-type]
    exact.load_state_dict(fused.state_dict())
    lengths = torch.tensor([600, 513, 300, 1])
    inputs = torch.randn(4, 600, 2)
    mask = torch.arange(600).unsqueeze(0) >= lengths.unsqueeze(1)
    targets = torch.rand(4)
    loss = F.mse_loss(fused(inputs, mask).prediction, targets)
    loss.backward()
    loss64 = F.mse_loss(exact(inputs.double(), mask).prediction, targets.double())
    loss64.backward()
    assert abs(loss.item() - loss64.item()) <= 1e-6 * loss64.item()
    for (name, param), param64 in zip(fused.named_parameters(), exact.parameters()):
        error = (param.grad.double() - param64.grad).abs().max() / param64.grad.abs().max()
        assert error <= 1e-4, (name, float(error))


def test_auto_implementation_fuses_only_long_cpu_inputs_without_input_gradients() -> None:
    model = FeedForwardAttentionNetwork()
    assert model._fuse(torch.zeros(2, FUSED_MIN_LENGTH, 2))
    assert not model._fuse(torch.zeros(2, FUSED_MIN_LENGTH - 1, 2))
    assert not model._fuse(torch.zeros(2, FUSED_MIN_LENGTH, 2, requires_grad=True))
    assert not FeedForwardAttentionNetwork(implementation="modular")._fuse(torch.zeros(2, 5000, 2))
    assert FeedForwardAttentionNetwork(implementation="fused")._fuse(torch.zeros(2, 5, 2))


def test_fused_model_falls_back_on_left_padding_and_input_gradients() -> None:
    torch.manual_seed(0)
    fused = FeedForwardAttentionNetwork(implementation="fused")
    modular = FeedForwardAttentionNetwork(implementation="modular")
    modular.load_state_dict(fused.state_dict())
    inputs = torch.randn(2, 30, 2)
    left_padding = torch.zeros(2, 30, dtype=torch.bool)
    left_padding[0, :4] = True
    torch.testing.assert_close(
        fused(inputs, left_padding).prediction, modular(inputs, left_padding).prediction
    )
    needs_grad = inputs.clone().requires_grad_()
    fused(needs_grad).prediction.sum().backward()
    assert needs_grad.grad is not None and needs_grad.grad.abs().sum() > 0


def test_fused_model_rejects_empty_sequences_and_bad_implementation() -> None:
    model = FeedForwardAttentionNetwork(implementation="fused")
    mask = torch.zeros(2, 30, dtype=torch.bool)
    mask[1] = True
    with pytest.raises(ValueError, match=r"empty sequence.*rows \[1\]"):
        model(torch.randn(2, 30, 2), mask)
    with pytest.raises(ValueError, match="implementation must be one of"):
        FeedForwardAttentionNetwork(implementation="fast")  # type: ignore[arg-type]
