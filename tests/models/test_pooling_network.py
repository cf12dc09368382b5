"""Tests for the Raffel & Ellis (2015) §2.1 feed-forward attention network."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.models.pooling_network import FeedForwardAttentionNetwork, PoolingNetworkOutput


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
