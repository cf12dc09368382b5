"""A memory-lean, cache-resident kernel for "per-step leaky affine layer, then temporal pooling".

Raffel & Ellis (2015, §2.1) compute ``h_t = LReLU(W x_t + b)`` for every step and pool the states
with feed-forward attention (eq. 1, ``a(h_t) = tanh(w · h_t + b_w)``) or the plain mean (eq. 2).
Written as separate PyTorch ops, this builds several ``[B, T, D]`` tensors (the affine output, the
activations, the weighted states and their gradients): at ``B = 100``, ``T = 10,000``, ``D = 100``
each is 400 MB, so a training step streams gigabytes through main memory.

:func:`leaky_affine_pooling` computes the same function and its exact gradient without any
``[T, D]`` tensor: the states are recomputed, a block of time steps at a time, wherever they are
needed (``K + 1`` multiply-adds per state with ``K = 2`` inputs, less than reading a stored state
from memory; the numba backend computes each once per pass). Only ``[B, T]`` tensors (weights,
scores) are saved for backward.

Forward, for one sequence of ``n`` real steps, ``z_t = W̃ x̃_t`` (``x̃_t = [x_t; 1]``,
``W̃ = [W, b]``) and ``h_t = LReLU(z_t)``::

    e_t = tanh(w · h_t + b_w),  p_t = exp(e_t),  alpha_t = p_t / Σ_k p_k,  c = Σ_t p_t h_t / Σ_k p_k

Because ``e_t ∈ [-1, 1]`` (the paper's ``a`` is ``tanh``), ``p_t ∈ [1/e, e]``: the softmax needs no
running maximum, so one streaming pass accumulates ``Σ p_t h_t`` and ``Σ p_t`` (the "online
softmax" without its rescaling). For the mean, ``p_t = 1``.

Backward, given ``g = ∂L/∂c`` and (optionally) ``γ = ∂L/∂alpha``::

    ∂L/∂e_t   = alpha_t (g · h_t + γ_t − g · c − Σ_k alpha_k γ_k)           (softmax Jacobian)
    δ_t       = ∂L/∂e_t · (1 − e_t²)                                         (tanh)
    ∂L/∂w     = Σ_t δ_t h_t,        ∂L/∂b_w = Σ_t δ_t
    ∂L/∂z_t   = S_t ⊙ (alpha_t g + δ_t w),   S_t = LReLU'(z_t) ∈ {1, leak}^D
    ∂L/∂W̃    = Σ_t ∂L/∂z_t x̃_tᵀ

One sweep over a block computes ``g · h_t`` (hence ``δ_t``), a second one ``∂L/∂z_t`` and the three
sums. The numba backend splits ``h = λ z + (1 − λ) max(z, 0)``, so that the linear part of every
sum is taken once per step on the inputs (``Σ_t c_t x̃_t``; :mod:`attnlab.attention._pooling_kernels`).
For the mean, ``alpha_t = 1/n`` and ``δ = 0``; the weights' gradient ``γ`` is dropped (the mean's
weights do not depend on the parameters). Where ``z = 0`` exactly the slope taken is ``leak``
(PyTorch's ``leaky_relu`` makes the same choice).

Precision: every sum over time is taken in float32 over at most one block of steps (128 for numba,
:data:`TORCH_CHUNK` for PyTorch) and then added to a float64 accumulator; sums over the batch are
float64. Gradients are thus right to float32 rounding of their terms at any ``T`` (checked against a
float64 computation in the tests and the benchmark), where a float32 running sum over
``B · T ≈ 10⁶`` terms drifts by ~1e-3 relative.

Two backends compute the same thing:

* ``"numba"`` (:mod:`attnlab.attention._pooling_kernels`): CPU, float32. One sequence per task,
  the batch split over ``torch.get_num_threads()`` threads; the inner loops run over time and
  vectorise, ``tanh`` and ``exp`` included (float32 polynomials within a few ulps). Used by
  default where ``numba`` imports.
* ``"torch"``: PyTorch ops over chunks of :data:`TORCH_CHUNK` time steps for the whole batch at
  once (``[B, chunk, D]`` temporaries, a few MB). Any device and dtype: the path for CUDA, for
  float64 (gradcheck) and for machines without numba.

``backend="auto"`` picks numba for float32 CPU tensors when it is importable, unless the
environment variable :data:`BACKEND_ENV` is set to ``torch`` (or ``numba``, which then must work).

Inputs must be right-padded (every row's real steps come first) and must not require gradients:
the kernel differentiates with respect to the parameters only. :func:`can_use_fused_pooling` says
whether a batch qualifies; callers fall back to the modular ops otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Literal

import torch
import torch.nn.functional as F

from attnlab.checks import check_choice

logger = logging.getLogger(__name__)

Backend = Literal["auto", "numba", "torch"]
BACKENDS: tuple[str, ...] = ("auto", "numba", "torch")
BACKEND_ENV = "ATTNLAB_FUSED_POOLING_BACKEND"
"""Environment variable overriding ``backend="auto"``: ``numba``, ``torch`` or ``auto``."""

TORCH_CHUNK = 512
"""Time steps per chunk of the PyTorch backend (``[B, chunk, D]`` temporaries)."""

_kernels: ModuleType | None = None
_kernels_error: str | None = None


def numba_kernels() -> ModuleType | None:
    """The numba kernel module, or ``None`` (logged once) where numba cannot be imported."""
    global _kernels, _kernels_error
    if _kernels is None and _kernels_error is None:
        try:
            from attnlab.attention import _pooling_kernels

            _kernels = _pooling_kernels
        except Exception as error:  # ImportError, or numba failing to initialise
            _kernels_error = f"{type(error).__name__}: {error}"
            logger.warning("fused pooling: numba unavailable (%s); using the PyTorch backend", _kernels_error)
    return _kernels


def right_padded_lengths(padding_mask: torch.Tensor | None, batch: int, time: int) -> torch.Tensor | None:
    """Each row's number of real steps, or ``None`` if some row's padding is not a suffix."""
    if padding_mask is None:
        return torch.full((batch,), time, dtype=torch.long)
    lengths = (~padding_mask).sum(dim=1)
    suffix = torch.arange(time, device=padding_mask.device).unsqueeze(0) >= lengths.unsqueeze(1)
    if not torch.equal(suffix, padding_mask):
        return None
    return lengths.cpu()


def can_use_fused_pooling(inputs: torch.Tensor, *parameters: torch.Tensor) -> bool:
    """True when :func:`leaky_affine_pooling` applies: inputs without gradient, parameters on one device."""
    return not inputs.requires_grad and all(p.device == inputs.device for p in parameters)


def resolve_backend(backend: str, inputs: torch.Tensor) -> str:
    """``"numba"`` or ``"torch"`` for these inputs (see the module docstring for ``"auto"``)."""
    check_choice("backend", backend, BACKENDS, owner="leaky_affine_pooling")
    if backend == "auto":
        backend = os.environ.get(BACKEND_ENV, "auto") or "auto"
        check_choice(BACKEND_ENV, backend, BACKENDS)
        if backend == "auto":
            usable = inputs.device.type == "cpu" and inputs.dtype == torch.float32
            return "numba" if usable and numba_kernels() is not None else "torch"
    if backend == "numba":
        if inputs.device.type != "cpu" or inputs.dtype != torch.float32:
            raise ValueError(
                f"leaky_affine_pooling: the numba backend takes float32 CPU tensors, got {inputs.dtype} "
                f"on {inputs.device}"
            )
        if numba_kernels() is None:
            raise RuntimeError(f"leaky_affine_pooling: the numba backend is unavailable ({_kernels_error})")
    return backend


_pool: ThreadPoolExecutor | None = None


def _split_rows(kernel: Callable[[int, int], None], lengths: torch.Tensor) -> None:
    """Run ``kernel(first, last)`` over the batch's rows on ``torch.get_num_threads()`` threads, each
    taking a contiguous slice with about the same number of real steps (the kernels release the GIL)."""
    global _pool
    batch = lengths.numel()
    threads = max(1, min(torch.get_num_threads(), batch))
    if threads == 1:
        kernel(0, batch)
        return
    cumulative = torch.cumsum(lengths, 0).to(torch.float64)
    targets = cumulative[-1] * torch.arange(1, threads, dtype=torch.float64) / threads
    cuts = [0, *torch.searchsorted(cumulative, targets).add(1).tolist(), batch]
    if _pool is None or _pool._max_workers < threads:
        _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="attnlab-pooling")
    slices = [(first, last) for first, last in zip(cuts, cuts[1:]) if last > first]
    futures = [_pool.submit(kernel, first, last) for first, last in slices[1:]]
    kernel(*slices[0])  # this thread takes the first slice
    for future in futures:
        future.result()


def _as_numpy(tensor: torch.Tensor) -> Any:
    return tensor.detach().contiguous().numpy()


class _NumbaPooling(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        score_weight: torch.Tensor | None,
        score_bias: torch.Tensor | None,
        leak: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        kernels = numba_kernels()
        assert kernels is not None
        batch, time, _ = inputs.shape
        attention = score_weight is not None
        inputs = inputs.detach().contiguous()
        lengths = lengths.to(torch.int64).contiguous()
        weight_t = weight.detach().t().contiguous()  # [K, D]
        vector = score_weight if attention else bias  # a placeholder for the mean
        # Filled in whole by the kernel: no PyTorch op here that would wake its thread pool.
        context = inputs.new_empty(batch, weight.size(0))
        weights = inputs.new_empty(batch, time)
        scores = inputs.new_empty(batch, time)
        arrays = (inputs.numpy(), lengths.numpy(), weight_t.numpy(), _as_numpy(bias), _as_numpy(vector))
        outputs = (context.numpy(), weights.numpy(), scores.numpy())
        bias_value = float(score_bias) if attention else 0.0
        _split_rows(
            lambda first, last: kernels.pool_forward(
                *arrays, bias_value, leak, attention, *outputs, first, last
            ),
            lengths,
        )
        ctx.save_for_backward(inputs, lengths, weight_t, bias, vector, weights, scores, context)
        ctx.leak, ctx.attention = leak, attention
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        return context, weights

    @staticmethod
    def backward(ctx: Any, grad_context: torch.Tensor | None, grad_weights: torch.Tensor | None):  # type: ignore[override]
        kernels = numba_kernels()
        assert kernels is not None
        inputs, lengths, weight_t, bias, vector, weights, scores, context = ctx.saved_tensors
        batch, _, width = inputs.shape
        dim = weight_t.size(1)
        attention = ctx.attention
        grad_context = context.new_zeros(batch, dim) if grad_context is None else grad_context.contiguous()
        shared = (grad_context * context).sum(dim=1)  # g · c + Σ_k alpha_k γ_k
        weight_grads = grad_weights is not None and attention
        if weight_grads:
            shared = shared + (weights * grad_weights).sum(dim=1)
        else:
            grad_weights = weights  # not read: no [B, T] tensor of zeros to build
        grad_affine = torch.empty(batch, width + 1, dim, dtype=torch.float64)
        grad_score_weight = torch.zeros(batch, dim, dtype=torch.float64)
        grad_score_bias = torch.zeros(batch, dtype=torch.float64)
        arrays = (
            inputs.numpy(), lengths.numpy(), weight_t.numpy(), _as_numpy(bias), _as_numpy(vector),
            ctx.leak, attention, weights.numpy(), scores.numpy(), _as_numpy(grad_context),
            _as_numpy(grad_weights), weight_grads, _as_numpy(shared), grad_affine.numpy(),
            grad_score_weight.numpy(), grad_score_bias.numpy(),
        )  # fmt: skip
        _split_rows(lambda first, last: kernels.pool_backward(*arrays, first, last), lengths)
        dtype = weight_t.dtype
        grad_affine = grad_affine.sum(dim=0)  # [K + 1, D], float64 over the batch
        grad_weight = grad_affine[:width].t().to(dtype).contiguous()
        grad_bias = grad_affine[width].to(dtype)
        if not attention:
            return None, None, grad_weight, grad_bias, None, None, None
        return (
            None, None, grad_weight, grad_bias,
            grad_score_weight.sum(dim=0).to(dtype), grad_score_bias.sum().to(dtype), None,
        )  # fmt: skip


def _chunks(lengths: torch.Tensor) -> list[tuple[int, int]]:
    longest = int(lengths.max())
    return [(start, min(start + TORCH_CHUNK, longest)) for start in range(0, longest, TORCH_CHUNK)]


class _TorchPooling(torch.autograd.Function):
    """The same computation with PyTorch ops, over chunks of time for the whole batch."""

    @staticmethod
    def _chunk(
        inputs: torch.Tensor, lengths: torch.Tensor, start: int, stop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows [B, chunk, K], real [B, chunk])`` of steps ``start:stop``: ``real`` is 1 on real
        steps, 0 on padding, whose inputs are zeroed (their content is arbitrary, maybe not finite)."""
        steps = torch.arange(start, stop, device=inputs.device)
        real = steps.unsqueeze(0) < lengths.unsqueeze(1)
        rows = inputs[:, start:stop].masked_fill(~real.unsqueeze(2), 0.0)
        return rows, real.to(inputs.dtype)

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        score_weight: torch.Tensor | None,
        score_bias: torch.Tensor | None,
        leak: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, time, _ = inputs.shape
        lengths = lengths.to(inputs.device)
        accumulator = inputs.new_zeros(batch, weight.size(0), dtype=torch.float64)  # Σ p_t h_t
        weights = inputs.new_zeros(batch, time)  # p_t, normalised at the end
        scores = inputs.new_zeros(batch, time)
        for start, stop in _chunks(lengths):
            rows, real = _TorchPooling._chunk(inputs, lengths, start, stop)
            states = F.leaky_relu(F.linear(rows, weight, bias), leak)  # h, [B, chunk, D]
            if score_weight is None:
                probs = real
            else:
                score = torch.tanh(torch.matmul(states, score_weight) + score_bias) * real  # e_t, eq. 1
                scores[:, start:stop] = score
                probs = torch.exp(score) * real  # e_t ∈ [-1, 1]: no running maximum needed
            weights[:, start:stop] = probs
            accumulator += torch.bmm(probs.unsqueeze(1), states).squeeze(1).to(torch.float64)
        total = weights.sum(dim=1, dtype=torch.float64)
        context = (accumulator / total.unsqueeze(1)).to(inputs.dtype)
        weights = weights / total.to(inputs.dtype).unsqueeze(1)
        ctx.save_for_backward(inputs, lengths, weight, bias, score_weight, weights, scores, context)
        ctx.leak = leak
        ctx.set_materialize_grads(False)
        return context, weights

    @staticmethod
    def backward(ctx: Any, grad_context: torch.Tensor | None, grad_weights: torch.Tensor | None):  # type: ignore[override]
        inputs, lengths, weight, bias, score_weight, weights, scores, context = ctx.saved_tensors
        leak = ctx.leak
        attention = score_weight is not None
        if grad_context is None:
            grad_context = context.new_zeros(context.shape)
        shared = (grad_context * context).sum(dim=1, keepdim=True)  # g · c + Σ_k alpha_k γ_k
        if attention and grad_weights is not None:
            shared = shared + (weights * grad_weights).sum(dim=1, keepdim=True)
        wide = torch.float64
        grad_weight = weight.new_zeros(weight.shape, dtype=wide)
        grad_bias = bias.new_zeros(bias.shape, dtype=wide)
        grad_score_weight = bias.new_zeros(bias.shape, dtype=wide)
        grad_score_bias = bias.new_zeros((), dtype=wide)
        for start, stop in _chunks(lengths):
            rows, _ = _TorchPooling._chunk(inputs, lengths, start, stop)
            states = F.leaky_relu(F.linear(rows, weight, bias), leak)  # recomputed h, [B, chunk, D]
            alpha = weights[:, start:stop]
            # ∂L/∂z_t = S_t ⊙ (alpha_t g + δ_t w)
            grad_states = alpha.unsqueeze(2) * grad_context.unsqueeze(1)
            if attention:
                upstream = torch.bmm(states, grad_context.unsqueeze(2)).squeeze(2) - shared  # g·h_t − shared
                if grad_weights is not None:
                    upstream = upstream + grad_weights[:, start:stop]
                score = scores[:, start:stop]
                delta = alpha * upstream * (1.0 - score * score)  # δ_t (zero on padding: alpha = 0)
                grad_score_weight += torch.bmm(delta.unsqueeze(1), states).squeeze(1).to(wide).sum(dim=0)
                grad_score_bias += delta.to(wide).sum()
                grad_states = grad_states + delta.unsqueeze(2) * score_weight
            slope = torch.where(states > 0, 1.0, leak).to(inputs.dtype)
            grad_z = grad_states * slope  # [B, chunk, D]
            grad_weight += torch.bmm(grad_z.transpose(1, 2), rows).to(wide).sum(dim=0)
            grad_bias += grad_z.sum(dim=1).to(wide).sum(dim=0)
        dtype = weight.dtype
        grads = (grad_weight.to(dtype), grad_bias.to(dtype))
        if not attention:
            return None, None, *grads, None, None, None
        return None, None, *grads, grad_score_weight.to(dtype), grad_score_bias.to(dtype), None


def check_fused_arguments(
    name: str, inputs: torch.Tensor, lengths: torch.Tensor, score_weight: torch.Tensor | None,
    score_bias: torch.Tensor | None,
) -> None:  # fmt: skip
    """The checks every fused pooling kernel makes (``name`` prefixes the messages)."""
    if (score_weight is None) != (score_bias is None):
        raise ValueError(f"{name}: give both score_weight and score_bias, or neither")
    if inputs.requires_grad:
        raise ValueError(f"{name}: inputs must not require gradients (see can_use_fused_pooling)")
    if inputs.dim() != 3 or lengths.shape != (inputs.size(0),):
        raise ValueError(
            f"{name}: inputs must be [batch, time, width] with lengths [batch], got "
            f"{tuple(inputs.shape)} and {tuple(lengths.shape)}"
        )
    if int(lengths.min()) < 1:
        raise ValueError(f"{name}: every sequence needs at least one real step")
    if int(lengths.max()) > inputs.size(1):
        raise ValueError(f"{name}: a length exceeds the padded time {inputs.size(1)}")


def leaky_affine_pooling(
    inputs: torch.Tensor,
    lengths: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    leak: float,
    score_weight: torch.Tensor | None = None,
    score_bias: torch.Tensor | None = None,
    backend: Backend = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool ``h_t = LReLU(weight · x_t + bias)`` over each row's first ``lengths[row]`` steps.

    ``inputs`` ``[B, T, K]`` (right-padded, no gradient), ``lengths`` long ``[B]`` on the CPU,
    ``weight`` ``[D, K]``, ``bias`` ``[D]``. With ``score_weight`` ``[D]`` and ``score_bias`` (scalar),
    the pooling is feed-forward attention with ``a(h_t) = tanh(score_weight · h_t + score_bias)``
    (Raffel & Ellis eq. 1, §2.1); without them it is the mean over real steps (eq. 2). Returns
    ``(context [B, D], weights [B, T])``, weights exactly zero on padding — the same values as the
    modular :class:`~attnlab.attention.pooling.FeedForwardAttentionPooling` /
    :class:`~attnlab.attention.pooling.MeanPooling` on the materialised states, to float rounding.
    ``backend``: ``"auto"``, ``"numba"`` or ``"torch"`` (module docstring).
    """
    check_fused_arguments("leaky_affine_pooling", inputs, lengths, score_weight, score_bias)
    function = _NumbaPooling if resolve_backend(backend, inputs) == "numba" else _TorchPooling
    return function.apply(inputs, lengths, weight, bias, score_weight, score_bias, float(leak))
