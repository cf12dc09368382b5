"""Numba kernels behind :func:`attnlab.attention.fused_pooling.leaky_affine_pooling` on the CPU.

Importing this module needs ``numba`` (a library dependency; its LLVM ships in the ``llvmlite``
wheel, so nothing is compiled with a system compiler). The kernels are compiled on first use and
cached on disk (``cache=True``); :mod:`attnlab.attention.fused_pooling` falls back to its PyTorch
implementation where this module cannot be imported.

Layout and order of work (the kernels process rows ``first:last`` of the batch, one sequence at a
time; the caller splits the batch over threads):

* a block of a sequence's inputs is copied, transposed, into a ``[K, BLOCK]`` buffer, so that
  every inner loop runs over *time* with unit stride and a fixed trip count: it vectorises fully
  (16 float32 lanes with AVX-512) whatever ``K`` and ``D`` are;
* time is cut into blocks of :data:`BLOCK` steps; within a block, for each hidden unit ``d`` the
  pre-activation ``z_{t,d} = b_d + Σ_k W_{d,k} x_{k,t}`` is recomputed into a ``BLOCK``-long
  buffer (``K + 1`` multiply-adds per step, cheaper than storing ``h``), so the working set is a
  few KB and never leaves L1;
* sums over time are taken in float32 within a block (at most ``BLOCK`` terms, split over the
  vector lanes) and added to float64 accumulators between blocks; sums over the batch are taken in
  float64 by the caller. The rounding error of a gradient entry is therefore a few float32 ulps of
  its terms' magnitude, independent of ``T`` and ``B`` — a float32 recursive sum over the
  ``B·T ≈ 10⁶`` terms would drift by ~1e-3 relative (measured, docs/results.md).
"""

from __future__ import annotations

import math

import numba
import numpy as np

BLOCK = 256
"""Time steps per block: the float32 partial sums span at most this many steps. A compile-time
constant, so the inner loops have a fixed trip count (a partial last block is zero-padded)."""

# Reassociation lets LLVM vectorise the reductions over time; no "fast" flags that assume finite
# values (nnan/ninf), so a NaN in the inputs still comes out as NaN.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
# nogil: the caller runs slices of the batch on its own threads (numba's threading layers would
# bring a second OpenMP pool that spins beside PyTorch's).
_OPTIONS = {"cache": True, "fastmath": _FASTMATH, "nogil": True}


@numba.njit(inline="always", fastmath=_FASTMATH, cache=True)
def _load_block(block: np.ndarray, x: np.ndarray, start: int, size: int) -> None:
    """Copy steps ``start : start + size`` of ``x`` ``[T, K]`` into ``block`` ``[K, BLOCK]``, zeros after."""
    for k in range(x.shape[1]):
        for t in range(size):
            block[k, t] = x[start + t, k]
        for t in range(size, BLOCK):
            block[k, t] = 0.0


@numba.njit(inline="always", fastmath=_FASTMATH, cache=True)
def _preactivation(z: np.ndarray, block: np.ndarray, weight_t: np.ndarray, bias: np.ndarray, d: int) -> None:
    """``z[t] = b_d + Σ_k W_{d,k} x_{k,t}`` for the block's steps (one fused loop for ``K = 2``)."""
    width = block.shape[0]
    b_d = bias[d]
    if width == 2:  # the paper's (value, marker) inputs
        w_0, w_1 = weight_t[0, d], weight_t[1, d]
        for t in range(BLOCK):
            z[t] = b_d + w_0 * block[0, t] + w_1 * block[1, t]
    else:
        for t in range(BLOCK):
            z[t] = b_d
        for k in range(width):
            w_k = weight_t[k, d]
            for t in range(BLOCK):
                z[t] += w_k * block[k, t]


@numba.njit(**_OPTIONS)
def pool_forward(
    inputs: np.ndarray,  # [B, T, K] float32
    lengths: np.ndarray,  # [B] int64
    weight_t: np.ndarray,  # [K, D] float32 (W transposed)
    bias: np.ndarray,  # [D] float32
    score_weight: np.ndarray,  # [D] float32 (unused for the mean)
    score_bias: float,
    leak: float,
    attention: bool,
    context: np.ndarray,  # out [B, D] float32
    weights: np.ndarray,  # out [B, T] float32, zero past each length
    scores: np.ndarray,  # out [B, T] float32: e_t, zero past each length and for the mean
    first: int,
    last: int,
) -> None:
    width = inputs.shape[2]
    dim = weight_t.shape[1]
    leak32 = np.float32(leak)
    for row in range(first, last):
        length = lengths[row]
        x = inputs[row]
        accumulator = np.zeros(dim, np.float64)  # Σ_t p_t h_t
        total = 0.0  # Σ_t p_t
        block = np.empty((width, BLOCK), np.float32)
        z = np.empty(BLOCK, np.float32)
        logits = np.empty(BLOCK, np.float32)
        probs = np.zeros(BLOCK, np.float32)  # p_t, zero past the length
        for start in range(0, length, BLOCK):
            size = min(BLOCK, length - start)
            _load_block(block, x, start, size)
            if attention:
                for t in range(BLOCK):
                    logits[t] = np.float32(score_bias)
                for d in range(dim):
                    _preactivation(z, block, weight_t, bias, d)
                    v = score_weight[d]
                    for t in range(BLOCK):
                        logits[t] += v * (z[t] if z[t] > 0 else leak32 * z[t])  # w · h_t
                block_total = np.float32(0.0)
                for t in range(size):
                    e = math.tanh(logits[t])  # e_t = a(h_t), eq. 1 with a = tanh (§2.1)
                    scores[row, start + t] = e
                    # e_t ∈ [-1, 1], so exp(e_t) ∈ [1/e, e]: the softmax needs no running maximum.
                    p = math.exp(e)
                    probs[t] = p
                    weights[row, start + t] = p  # normalised at the end
                    block_total += p
                total += block_total
            else:
                for t in range(size):
                    probs[t] = np.float32(1.0)
                total += size
            for t in range(size, BLOCK):
                probs[t] = 0.0
            for d in range(dim):
                _preactivation(z, block, weight_t, bias, d)
                partial = np.float32(0.0)
                for t in range(BLOCK):
                    partial += probs[t] * (z[t] if z[t] > 0 else leak32 * z[t])
                accumulator[d] += partial
        for d in range(dim):
            context[row, d] = accumulator[d] / total
        if attention:
            scale = np.float32(1.0 / total)
            for t in range(length):
                weights[row, t] *= scale
        else:
            mean = np.float32(1.0 / length)
            for t in range(length):
                weights[row, t] = mean
                scores[row, t] = 0.0
        for t in range(length, weights.shape[1]):  # the outputs arrive uninitialised
            weights[row, t] = 0.0
            scores[row, t] = 0.0


@numba.njit(**_OPTIONS)
def pool_backward(
    inputs: np.ndarray,  # [B, T, K] float32
    lengths: np.ndarray,  # [B] int64
    weight_t: np.ndarray,  # [K, D] float32
    bias: np.ndarray,  # [D] float32
    score_weight: np.ndarray,  # [D] float32
    leak: float,
    attention: bool,
    weights: np.ndarray,  # [B, T] float32, alpha_t
    scores: np.ndarray,  # [B, T] float32, e_t
    grad_context: np.ndarray,  # [B, D] float32, g
    grad_weights: np.ndarray,  # [B, T] float32, γ (zeros when unused)
    shared: np.ndarray,  # [B] float32, g · c + Σ_k alpha_k γ_k
    grad_affine: np.ndarray,  # out [B, K + 1, D] float64: per-row Σ_t ∂L/∂z_t x̃_tᵀ, transposed
    grad_score_weight: np.ndarray,  # out [B, D] float64: per-row Σ_t δ_t h_t
    grad_score_bias: np.ndarray,  # out [B] float64: per-row Σ_t δ_t
    first: int,
    last: int,
) -> None:
    width = inputs.shape[2]
    dim = weight_t.shape[1]
    leak32 = np.float32(leak)
    one = np.float32(1.0)
    for row in range(first, last):
        length = lengths[row]
        x = inputs[row]
        g = grad_context[row]
        block = np.empty((width, BLOCK), np.float32)
        z = np.empty(BLOCK, np.float32)
        upstream = np.empty(BLOCK, np.float32)
        coef_g = np.zeros(BLOCK, np.float32)  # alpha_t: ∂L/∂z_t = S_t ⊙ (alpha_t g + δ_t w)
        coef_w = np.zeros(BLOCK, np.float32)  # δ_t; both zero past the length
        out_affine = grad_affine[row]
        out_score = grad_score_weight[row]
        out_affine[:] = 0.0
        out_score[:] = 0.0
        delta_total = 0.0
        for start in range(0, length, BLOCK):
            size = min(BLOCK, length - start)
            _load_block(block, x, start, size)
            for t in range(size):
                coef_g[t] = weights[row, start + t]
            for t in range(size, BLOCK):
                coef_g[t] = 0.0
            if attention:
                for t in range(BLOCK):
                    upstream[t] = -shared[row]
                for d in range(dim):  # upstream_t += g · h_t
                    _preactivation(z, block, weight_t, bias, d)
                    g_d = g[d]
                    for t in range(BLOCK):
                        upstream[t] += g_d * (z[t] if z[t] > 0 else leak32 * z[t])
                block_delta = np.float32(0.0)
                for t in range(size):
                    e = scores[row, start + t]
                    delta = coef_g[t] * (upstream[t] + grad_weights[row, start + t]) * (one - e * e)  # δ_t
                    coef_w[t] = delta
                    block_delta += delta
                for t in range(size, BLOCK):
                    coef_w[t] = 0.0
                delta_total += block_delta
            for d in range(dim):
                _preactivation(z, block, weight_t, bias, d)
                g_d = g[d]
                v = score_weight[d] if attention else np.float32(0.0)
                partial_bias = np.float32(0.0)
                partial_score = np.float32(0.0)
                partial_0 = np.float32(0.0)
                partial_1 = np.float32(0.0)
                for t in range(BLOCK):
                    positive = z[t] > 0
                    h = z[t] if positive else leak32 * z[t]
                    dz = (one if positive else leak32) * (coef_g[t] * g_d + coef_w[t] * v)  # ∂L/∂z_{t,d}
                    partial_score += coef_w[t] * h
                    partial_bias += dz
                    if width == 2:
                        partial_0 += dz * block[0, t]
                        partial_1 += dz * block[1, t]
                    else:
                        z[t] = dz
                if width == 2:
                    out_affine[0, d] += partial_0
                    out_affine[1, d] += partial_1
                else:
                    for k in range(width):
                        partial = np.float32(0.0)
                        for t in range(BLOCK):
                            partial += z[t] * block[k, t]
                        out_affine[k, d] += partial
                out_affine[width, d] += partial_bias
                out_score[d] += partial_score
        grad_score_bias[row] = delta_total
