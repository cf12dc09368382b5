"""Feed-forward attention pooling and mean pooling (Raffel & Ellis 2015, eqs. 1 and 2)."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention.pooling import FeedForwardAttentionPooling, MeanPooling, PoolingOutput

DIM = 5
LENGTHS = (7, 4, 1, 6)


def _padded_batch(seed: int = 0, pad_value: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 states ``[4, 7, DIM]`` right-padded with ``pad_value`` and the matching mask."""
    generator = torch.Generator().manual_seed(seed)
    t_max = max(LENGTHS)
    states = torch.randn(len(LENGTHS), t_max, DIM, generator=generator, dtype=torch.float64)
    mask = torch.arange(t_max).unsqueeze(0) >= torch.tensor(LENGTHS).unsqueeze(1)
    states = states.masked_fill(mask.unsqueeze(-1), pad_value)
    return states, mask


def _modules() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    attention = FeedForwardAttentionPooling(DIM).double()
    with torch.no_grad():  # a non-trivial bias so that b matters
        attention.bias.fill_(0.3)
    return [attention, MeanPooling()]


@pytest.mark.parametrize("index", [0, 1], ids=["attention", "mean"])
def test_weights_sum_to_one_and_are_zero_on_padding(index: int) -> None:
    module = _modules()[index]
    states, mask = _padded_batch()
    out = module(states, mask)
    assert isinstance(out, PoolingOutput)
    assert out.context.shape == (len(LENGTHS), DIM)
    assert out.weights.shape == mask.shape
    assert torch.all(out.weights[mask] == 0)
    assert torch.all(out.weights[~mask] > 0)
    torch.testing.assert_close(out.weights.sum(dim=1), torch.ones(len(LENGTHS), dtype=torch.float64))


@pytest.mark.parametrize("index", [0, 1], ids=["attention", "mean"])
def test_masking_invariance(index: int) -> None:
    """Each padded row gives the same context and weights as that sequence alone, unpadded."""
    module = _modules()[index]
    states, mask = _padded_batch(pad_value=1e3)
    out = module(states, mask)
    for row, length in enumerate(LENGTHS):
        alone = module(states[row : row + 1, :length])
        torch.testing.assert_close(out.context[row], alone.context[0])
        torch.testing.assert_close(out.weights[row, :length], alone.weights[0])
    # Changing what sits on the padded steps changes nothing.
    other = module(states.masked_fill(mask.unsqueeze(-1), -7.0), mask)
    torch.testing.assert_close(other.context, out.context)


def test_mean_pooling_is_mean_of_real_steps() -> None:
    states, mask = _padded_batch()
    out = MeanPooling()(states, mask)
    for row, length in enumerate(LENGTHS):
        torch.testing.assert_close(out.context[row], states[row, :length].mean(dim=0))
        assert torch.all(out.weights[row, :length] == 1.0 / length)
    assert list(MeanPooling().parameters()) == []


def test_attention_matches_equation_1() -> None:
    module = _modules()[0]
    states, mask = _padded_batch()
    out = module(states, mask)
    for row, length in enumerate(LENGTHS):
        h = states[row, :length]
        e = torch.tanh(h @ module.weight + module.bias)
        alpha = torch.exp(e) / torch.exp(e).sum()
        torch.testing.assert_close(out.weights[row, :length], alpha)
        torch.testing.assert_close(out.context[row], (alpha.unsqueeze(1) * h).sum(dim=0))


def test_gradient_reaches_w_and_b() -> None:
    module = _modules()[0]
    states, mask = _padded_batch()
    target = torch.randn(len(LENGTHS), DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    loss = ((module(states, mask).context - target) ** 2).sum()
    loss.backward()
    assert module.weight.grad is not None and module.weight.grad.abs().sum() > 0
    assert module.bias.grad is not None and module.bias.grad.abs() > 0


def test_initialisation_and_custom_activation() -> None:
    module = FeedForwardAttentionPooling(400)
    assert module.bias.item() == 0.0
    assert 0.03 < module.weight.std().item() < 0.07  # N(0, 1/400): std 0.05
    identity = FeedForwardAttentionPooling(DIM, score_activation=lambda x: x).double()
    states, _ = _padded_batch()
    e = states @ identity.weight + identity.bias
    torch.testing.assert_close(identity(states).weights, torch.softmax(e, dim=1))


@pytest.mark.parametrize("index", [0, 1], ids=["attention", "mean"])
def test_empty_sequence_error_names_rows(index: int) -> None:
    module = _modules()[index]
    states, mask = _padded_batch()
    mask[1] = True
    mask[3] = True
    with pytest.raises(ValueError, match=r"empty sequence.*\[1, 3\]"):
        module(states, mask)
    with pytest.raises(ValueError, match="empty sequence"):
        module(states[:, :0])


@pytest.mark.parametrize("index", [0, 1], ids=["attention", "mean"])
def test_shape_errors(index: int) -> None:
    module = _modules()[index]
    states, mask = _padded_batch()
    with pytest.raises(ValueError, match="states must be"):
        module(states[0], None)
    with pytest.raises(ValueError, match="padding_mask must be"):
        module(states, mask[:, :-1])
    with pytest.raises(ValueError, match="padding_mask must be"):
        module(states, mask.long())
    if index == 0:
        with pytest.raises(ValueError, match="dim=5"):
            module(states[..., :-1])


def test_long_sequences_stay_small() -> None:
    """No [B, T, T] work: T = 10,000 runs instantly on a small batch."""
    states = torch.rand(2, 10_000, 3)
    mask = torch.zeros(2, 10_000, dtype=torch.bool)
    mask[1, 6_000:] = True
    out = FeedForwardAttentionPooling(3)(states, mask)
    assert out.context.shape == (2, 3)
    assert torch.all(out.weights[1, 6_000:] == 0)
