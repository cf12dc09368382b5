"""The fused leaky-affine pooling kernel gives the modular ops' values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from attnlab.attention.fused_pooling import leaky_affine_pooling, right_padded_lengths
from attnlab.attention.pooling import FeedForwardAttentionPooling, MeanPooling


def _parameters(dim: int, width: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    return {
        "weight": torch.randn(dim, width, dtype=dtype, requires_grad=True),
        "bias": torch.randn(dim, dtype=dtype, requires_grad=True),
        "score_weight": (0.5 * torch.randn(dim, dtype=dtype)).requires_grad_(),
        "score_bias": torch.tensor(0.3, dtype=dtype, requires_grad=True),
    }


def _batch(lengths: list[int], width: int, dtype: torch.dtype = torch.float32):
    torch.manual_seed(4)
    time = max(lengths)
    inputs = torch.randn(len(lengths), time, width, dtype=dtype)
    mask = torch.arange(time).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    inputs[mask] = 77.0  # padding content must not matter
    return inputs, mask


def _modular(inputs, mask, params, attention: bool, leak: float):
    states = F.leaky_relu(F.linear(inputs, params["weight"], params["bias"]), leak)
    if attention:
        scores = {"weight": params["score_weight"], "bias": params["score_bias"]}
        out = functional_call(FeedForwardAttentionPooling(states.size(-1)), scores, (states, mask))
    else:
        out = MeanPooling()(states, mask)
    return out.context, out.weights


def _fused(inputs, mask, params, attention: bool, leak: float):
    lengths = right_padded_lengths(mask, inputs.size(0), inputs.size(1))
    scores = {"score_weight": params["score_weight"], "score_bias": params["score_bias"]} if attention else {}
    return leaky_affine_pooling(inputs, lengths, params["weight"], params["bias"], leak=leak, **scores)


@pytest.mark.parametrize("attention", [True, False])
@pytest.mark.parametrize("use_weights_in_loss", [False, True])
def test_values_and_gradients_match_modular_ops(attention: bool, use_weights_in_loss: bool) -> None:
    inputs, mask = _batch([40, 13, 1, 27], width=3)
    grads = []
    outputs = []
    for implementation in (_modular, _fused):
        params = _parameters(dim=8, width=3)
        context, weights = implementation(inputs, mask, params, attention, 0.1)
        torch.manual_seed(5)
        loss = (context * torch.randn_like(context)).sum()
        if use_weights_in_loss:
            loss = loss + (weights * torch.randn_like(weights)).sum()
        loss.backward()
        outputs.append((context.detach(), weights.detach()))
        names = ["weight", "bias"] + (["score_weight", "score_bias"] if attention else [])
        grads.append([params[name].grad for name in names])
    torch.testing.assert_close(outputs[0][0], outputs[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outputs[0][1], outputs[1][1], atol=1e-6, rtol=1e-5)
    assert bool((outputs[1][1][mask] == 0).all())
    for modular, fused in zip(*grads):
        torch.testing.assert_close(fused, modular, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention", [True, False])
def test_gradcheck_in_double_precision(attention: bool) -> None:
    inputs, mask = _batch([6, 4], width=2, dtype=torch.float64)
    lengths = right_padded_lengths(mask, 2, 6)
    params = _parameters(dim=5, width=2, dtype=torch.float64)
    names = ["weight", "bias"] + (["score_weight", "score_bias"] if attention else [])

    def function(*tensors: torch.Tensor) -> torch.Tensor:
        named = dict(zip(names, tensors))
        context, weights = leaky_affine_pooling(inputs, lengths, leak=0.2, **named)  # type: ignore[arg-type]
        return context.sum() + (weights * torch.linspace(0, 1, 6, dtype=torch.float64)).sum()

    assert torch.autograd.gradcheck(function, tuple(params[name] for name in names))


def test_right_padded_lengths() -> None:
    mask = torch.tensor([[False, False, True], [False, False, False]])
    assert right_padded_lengths(mask, 2, 3).tolist() == [2, 3]
    assert right_padded_lengths(None, 2, 3).tolist() == [3, 3]
    left_padded = torch.tensor([[True, False, False], [False, False, False]])
    assert right_padded_lengths(left_padded, 2, 3) is None


def test_bad_arguments_are_rejected() -> None:
    params = _parameters(dim=4, width=2)
    inputs = torch.randn(2, 5, 2)
    lengths = torch.tensor([5, 3])
    with pytest.raises(ValueError, match="both score_weight and score_bias"):
        leaky_affine_pooling(
            inputs, lengths, params["weight"], params["bias"], leak=0.1, score_weight=params["score_weight"]
        )
    with pytest.raises(ValueError, match="must not require gradients"):
        leaky_affine_pooling(inputs.requires_grad_(), lengths, params["weight"], params["bias"], leak=0.1)
    with pytest.raises(ValueError, match="at least one real step"):
        leaky_affine_pooling(
            torch.randn(2, 5, 2), torch.tensor([5, 0]), params["weight"], params["bias"], leak=0.1
        )
