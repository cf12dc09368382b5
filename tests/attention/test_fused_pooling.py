"""The fused leaky-affine pooling kernel gives the modular ops' values and gradients.

Both backends (numba, the default on the CPU, and the PyTorch fallback) and the kept first kernel
(``fused_v1``) are checked in float32 against the modular ops run in float64: every gradient tensor
within :data:`GRAD_TOLERANCE` of the float64 one, relative to its largest entry (the tolerance of
``benchmarks/bench_memory_problems.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from attnlab.attention import fused_pooling
from attnlab.attention.fused_pooling import leaky_affine_pooling, resolve_backend, right_padded_lengths
from attnlab.attention.fused_pooling_v1 import leaky_affine_pooling_v1
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


def _fused(inputs, mask, params, attention: bool, leak: float, backend: str = "auto"):
    lengths = right_padded_lengths(mask, inputs.size(0), inputs.size(1))
    scores = {"score_weight": params["score_weight"], "score_bias": params["score_bias"]} if attention else {}
    if backend == "v1":
        return leaky_affine_pooling_v1(inputs, lengths, params["weight"], params["bias"], leak=leak, **scores)
    return leaky_affine_pooling(
        inputs, lengths, params["weight"], params["bias"], leak=leak, backend=backend, **scores
    )


GRAD_TOLERANCE = 1e-4
NAMES = ["weight", "bias", "score_weight", "score_bias"]


def _loss_and_gradients(implementation, inputs, mask, attention, use_weights, dtype, dim=16, **options):
    """A loss that uses the context (and the weights) with fixed random coefficients, and the
    parameters' gradients, all in ``dtype``."""
    params = {  # drawn in float32, so that both precisions start from the same values
        name: value.detach().to(dtype).requires_grad_()
        for name, value in _parameters(dim=dim, width=inputs.size(-1)).items()
    }
    context, weights = implementation(inputs.to(dtype), mask, params, attention, 0.01, **options)
    generator = torch.Generator().manual_seed(6)
    loss = (context * torch.randn(context.shape, generator=generator).to(dtype)).sum()
    if use_weights:
        loss = loss + (weights * torch.randn(weights.shape, generator=generator).to(dtype)).sum()
    loss.backward()
    names = NAMES if attention else NAMES[:2]
    return context.detach(), weights.detach(), {name: params[name].grad for name in names}


def _relative_errors(grads: dict[str, torch.Tensor], exact: dict[str, torch.Tensor]) -> dict[str, float]:
    """``max|g - g64| / max|g64|`` per tensor."""
    return {
        name: float((grads[name].double() - exact[name]).abs().max() / exact[name].abs().max())
        for name in exact
    }


def _assert_float64_close(grads: dict[str, torch.Tensor], exact: dict[str, torch.Tensor]) -> None:
    errors = _relative_errors(grads, exact)
    assert max(errors.values()) <= GRAD_TOLERANCE, errors


def _long_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Lengths across block boundaries (128 steps for numba, 512 for the PyTorch chunks): 1, less than
    a block, a block and a partial one, exact blocks, a partial fifth block; padding holding values
    that must not matter."""
    inputs, mask = _batch([700, 1, 255, 256, 513, 64], width=2)
    inputs[0, -1] = 0.0
    inputs[1, 5] = float("inf")
    inputs[2, 255:] = float("nan")
    return inputs, mask


@pytest.mark.parametrize("backend", ["numba", "torch", "v1"])
@pytest.mark.parametrize("attention", [True, False])
@pytest.mark.parametrize("use_weights", [False, True])
def test_float32_kernels_match_float64_modular_ops(backend: str, attention: bool, use_weights: bool) -> None:
    inputs, mask = _long_batch()
    if backend == "v1":
        inputs = inputs.nan_to_num(posinf=5.0)  # the first kernel needs finite padding
    context64, weights64, exact = _loss_and_gradients(
        _modular, inputs.nan_to_num(posinf=5.0), mask, attention, use_weights, torch.float64
    )
    context, weights, grads = _loss_and_gradients(
        _fused, inputs, mask, attention, use_weights, torch.float32, backend=backend
    )
    torch.testing.assert_close(context.double(), context64, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.double(), weights64, atol=1e-8, rtol=1e-5)
    assert bool((weights[mask] == 0).all())
    _assert_float64_close(grads, exact)


@pytest.mark.parametrize("attention", [True, False])
def test_numba_kernels_with_an_odd_number_of_units(attention: bool) -> None:
    """The numba kernels sweep two units at a time for K = 2; an odd last unit goes alone."""
    inputs, mask = _long_batch()
    inputs = inputs.nan_to_num(posinf=5.0)
    context64, weights64, exact = _loss_and_gradients(
        _modular, inputs, mask, attention, True, torch.float64, dim=7
    )
    context, weights, grads = _loss_and_gradients(
        _fused, inputs, mask, attention, True, torch.float32, dim=7, backend="numba"
    )
    torch.testing.assert_close(context.double(), context64, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.double(), weights64, atol=1e-8, rtol=1e-5)
    _assert_float64_close(grads, exact)


@pytest.mark.parametrize("name", NAMES)
def test_the_float64_check_catches_a_wrong_sign(name: str) -> None:
    inputs, mask = _long_batch()
    inputs = inputs.nan_to_num(posinf=5.0)
    _, _, exact = _loss_and_gradients(_modular, inputs, mask, True, True, torch.float64)
    _, _, grads = _loss_and_gradients(_fused, inputs, mask, True, True, torch.float32, backend="numba")
    _assert_float64_close(grads, exact)
    grads[name] = -grads[name]  # the mistake a derivation most easily makes
    with pytest.raises(AssertionError):
        _assert_float64_close(grads, exact)


def test_the_float64_check_catches_a_wrong_slope() -> None:
    inputs, mask = _long_batch()
    inputs = inputs.nan_to_num(posinf=5.0)
    _, _, exact = _loss_and_gradients(_modular, inputs, mask, True, False, torch.float64)
    # The same kernel with the rectifier's slope off by 1e-3: its gradients must fail the check.
    params = _parameters(dim=16, width=2)
    context, _ = _fused(inputs, mask, params, True, 0.011, backend="numba")
    generator = torch.Generator().manual_seed(6)
    (context * torch.randn(context.shape, generator=generator)).sum().backward()
    with pytest.raises(AssertionError):
        _assert_float64_close({name: params[name].grad for name in NAMES}, exact)


@pytest.mark.parametrize("attention", [True, False])
def test_numba_backend_gives_the_same_bits_on_two_threads(attention: bool) -> None:
    inputs, mask = _long_batch()
    previous = torch.get_num_threads()
    results = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        try:
            results.append(
                _loss_and_gradients(_fused, inputs, mask, attention, True, torch.float32, backend="numba")
            )
        finally:
            torch.set_num_threads(previous)
    (context_1, weights_1, grads_1), (context_2, weights_2, grads_2) = results
    assert torch.equal(context_1, context_2) and torch.equal(weights_1, weights_2)
    assert all(torch.equal(grads_1[name], grads_2[name]) for name in grads_1)


def test_numba_tanh_and_exp_polynomials_are_within_a_few_ulps() -> None:
    """The kernels' vectorisable float32 ``tanh`` and ``exp`` (on ``[-1, 1]``) against float64."""
    kernels = pytest.importorskip("attnlab.attention._pooling_kernels")
    import numba
    import numpy as np

    @numba.njit(error_model="numpy", fastmath=kernels._FASTMATH)  # as in the kernels
    def evaluate(values, tanh, exp):
        for i in range(values.size):
            tanh[i] = kernels._tanh(values[i])
            exp[i] = kernels._exp_unit(max(min(values[i], np.float32(1.0)), np.float32(-1.0)))

    values = np.concatenate(
        [np.linspace(-12, 12, 200_001), np.logspace(-12, 1, 20_001), -np.logspace(-12, 1, 20_001)]
    ).astype(np.float32)
    tanh, exp = np.empty_like(values), np.empty_like(values)
    evaluate(values, tanh, exp)
    exact_tanh = np.tanh(values.astype(np.float64))
    exact_exp = np.exp(np.clip(values, -1, 1).astype(np.float64))
    ulps = lambda got, exact: np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32))  # noqa: E731
    assert ulps(tanh, exact_tanh).max() <= 8 and np.abs(tanh).max() <= 1.0
    assert ulps(exp, exact_exp).max() <= 4
    special = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
    evaluate(special, tanh[:4], exp[:4])
    assert np.isnan(tanh[0]) and np.isnan(exp[0])  # a NaN score stays NaN
    assert tanh[1] > 0.9999997 and tanh[2] < -0.9999997 and tanh[3] == 0.0


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu32, cpu64 = torch.zeros(1, 2, 2), torch.zeros(1, 2, 2, dtype=torch.float64)
    assert resolve_backend("auto", cpu32) == "numba"
    assert resolve_backend("auto", cpu64) == "torch"  # the numba kernels are float32
    assert resolve_backend("torch", cpu32) == "torch"
    with pytest.raises(ValueError, match="float32 CPU"):
        resolve_backend("numba", cpu64)
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("cuda", cpu32)
    monkeypatch.setenv(fused_pooling.BACKEND_ENV, "torch")
    assert resolve_backend("auto", cpu32) == "torch"
    assert resolve_backend("numba", cpu32) == "numba"  # an explicit argument wins
    monkeypatch.setenv(fused_pooling.BACKEND_ENV, "fast")
    with pytest.raises(ValueError, match=fused_pooling.BACKEND_ENV):
        resolve_backend("auto", cpu32)
    monkeypatch.delenv(fused_pooling.BACKEND_ENV)
    # A machine where numba cannot be imported: auto falls back, an explicit request says why.
    monkeypatch.setattr(fused_pooling, "_kernels", None)
    monkeypatch.setattr(fused_pooling, "_kernels_error", "ImportError: No module named 'numba'")
    assert resolve_backend("auto", cpu32) == "torch"
    with pytest.raises(RuntimeError, match="No module named 'numba'"):
        resolve_backend("numba", cpu32)


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
        context, weights = leaky_affine_pooling(inputs, lengths, leak=0.2, backend="torch", **named)  # type: ignore[arg-type]
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
    with pytest.raises(ValueError, match="exceeds the padded time"):
        leaky_affine_pooling(
            torch.randn(2, 5, 2), torch.tensor([6, 2]), params["weight"], params["bias"], leak=0.1
        )
