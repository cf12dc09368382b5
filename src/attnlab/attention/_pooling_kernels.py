"""Numba kernels behind :func:`attnlab.attention.fused_pooling.leaky_affine_pooling` on the CPU.

Importing this module needs ``numba`` (a library dependency; its LLVM ships in the ``llvmlite``
wheel, so nothing is compiled with a system compiler). The kernels are compiled on first use and
cached on disk (``cache=True``); :mod:`attnlab.attention.fused_pooling` falls back to its PyTorch
implementation where this module cannot be imported.

Layout and order of work (the kernels process rows ``first:last`` of the batch, one sequence at a
time; the caller splits the batch over threads, and each call allocates its own buffers, so two
threads share nothing they write but their own rows of the outputs):

* time is cut into blocks of :data:`BLOCK` steps. A block of a sequence's inputs is copied,
  transposed, into a ``[K, BLOCK]`` buffer (zeros past the length), so that every inner loop runs
  over *time* with unit stride and a fixed trip count: it vectorises fully (16 float32 lanes with
  AVX-512) whatever ``K`` and ``D`` are;
* the rectifier is split into a linear part and a ReLU, ``h = λ z + (1 − λ) r`` with
  ``r = max(z, 0)`` and ``λ`` the leak. Every sum of ``h`` against per-step scalars then splits
  into a sum of ``z = W̃ x̃`` — linear, so taken once per *step* on the inputs (``Σ_t c_t x̃_t``,
  then one dot product per unit) — and a sum of ``r``; a sum of ``∂L/∂z = S ⊙ q`` with
  ``S = λ + (1 − λ)[z > 0]`` likewise into a plain sum and a masked one;
* each pass computes a block's ``r`` once, into a thread-local ``[D, BLOCK]`` buffer
  (51 KB for ``D = 100``, in the core's L2): the forward pass writes it while it sums the scores
  ``w · h_t``, then takes ``e_t = tanh(·)``, ``p_t = exp(e_t)`` for the block and reads the buffer
  for ``Σ_t p_t r_t``; the backward pass writes it while it sums ``g · h_t`` (hence ``δ_t``), then
  reads it for the masked sums of ``∂L/∂W̃`` and for ``Σ_t δ_t r_t``. So each state is computed
  twice per training step (once per pass), at ``K + 1`` multiply-adds plus a max;
* ``tanh`` and ``exp`` are vectorisable float32 polynomials (:func:`_tanh`, :func:`_exp_unit`),
  a few ulps from the correctly rounded values (libm's scalar calls cost more than the rest of
  the forward pass). ``error_model="numpy"``: numba's default checks every float division for
  zero and branches out of the loop, which keeps the rational ``tanh`` scalar;
* loops are written out flat, one helper call per *block*: an inlined helper that takes arrays,
  called once per unit, costs a reference-count round trip (~30 ns, as much as the unit's loop);
* sums over time are taken in float32 within a block (at most ``BLOCK`` terms, split over the
  vector lanes) and added to float64 accumulators between blocks; sums over the batch are taken in
  float64 by the caller. The rounding error of a gradient entry is therefore a few float32 ulps of
  its terms' magnitude, independent of ``T`` and ``B`` — a float32 recursive sum over the
  ``B·T ≈ 10⁶`` terms would drift by ~1e-3 relative (measured, docs/results.md).
"""

from __future__ import annotations

import numba
import numpy as np

BLOCK = 128
"""Time steps per block: the float32 partial sums span at most this many steps, and the block's
rectified states (``D × BLOCK`` floats) stay in L2. A compile-time constant, so the inner loops
have a fixed trip count (a partial last block is zero-padded). Measured at ``D = 100``: 64 steps
were slower (a horizontal reduction and loop set-up per unit for half the steps), 256 no faster."""

# Reassociation lets LLVM vectorise the reductions over time; no "fast" flags that assume finite
# values (nnan/ninf), so a NaN in the inputs still comes out as NaN.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
# nogil: the caller runs slices of the batch on its own threads (numba's threading layers would
# bring a second OpenMP pool that spins beside PyTorch's).
# error_model="numpy": a float division by zero gives inf/NaN instead of raising, so a loop that
# divides has no branch out of it and vectorises (the tanh's rational function).
_OPTIONS = {"cache": True, "fastmath": _FASTMATH, "nogil": True, "error_model": "numpy"}
_INLINE = {"inline": "always", "cache": True, "fastmath": _FASTMATH, "error_model": "numpy"}

_TANH_CLAMP = np.float32(7.90531110763549805)  # tanh is 1 - 2e-7 there


@numba.njit(**_INLINE)
def _tanh(x: np.float32) -> np.float32:
    """float32 ``tanh`` as a [13/6] rational function of the input clamped to ±7.9 (the
    approximation Eigen uses): within 6 ulps, |value| ≤ 1, NaN stays NaN; vectorises."""
    x = _TANH_CLAMP if x > _TANH_CLAMP else x  # comparisons, not min/max: a NaN passes through
    x = -_TANH_CLAMP if x < -_TANH_CLAMP else x
    x2 = x * x
    p = np.float32(-2.76076847742355e-16)
    p = p * x2 + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    q = np.float32(1.19825839466702e-06)
    q = q * x2 + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return x * p / q


@numba.njit(**_INLINE)
def _exp_unit(e: np.float32) -> np.float32:
    """float32 ``exp(e)`` for ``e ∈ [-1, 1]`` (the range of ``tanh``): ``exp(e/2)²`` with the
    degree-8 Taylor polynomial of ``exp(e/2)``, within 3 ulps; vectorises."""
    h = np.float32(0.5) * e
    p = np.float32(1 / 40320)
    p = p * h + np.float32(1 / 5040)
    p = p * h + np.float32(1 / 720)
    p = p * h + np.float32(1 / 120)
    p = p * h + np.float32(1 / 24)
    p = p * h + np.float32(1 / 6)
    p = p * h + np.float32(0.5)
    p = p * h + np.float32(1.0)
    p = p * h + np.float32(1.0)
    return p * p


@numba.njit(**_INLINE)
def _load_block(block: np.ndarray, x: np.ndarray, start: int, size: int) -> None:
    """Copy steps ``start : start + size`` of ``x`` ``[T, K]`` into ``block`` ``[K, BLOCK]``, zeros after."""
    for k in range(x.shape[1]):
        for t in range(size):
            block[k, t] = x[start + t, k]
        for t in range(size, BLOCK):
            block[k, t] = 0.0


@numba.njit(**_INLINE)
def _rectified_states(
    states: np.ndarray, block: np.ndarray, weight_t: np.ndarray, bias: np.ndarray,
    coefficient: np.ndarray, linear: np.ndarray, sums: np.ndarray,
) -> None:  # fmt: skip
    """``states[d, t] = r_{t,d} = max(z_{t,d}, 0)`` with ``z_{t,d} = b_d + Σ_k W_{d,k} x_{k,t}``, and
    ``sums[t] = linear · x̃_t + Σ_d coefficient_d r_{t,d}``, for the block's steps.

    Written out flat, one call per block: a helper called per unit would cost a reference-count
    round trip per call (~30 ns, as much as the unit's whole loop)."""
    width = block.shape[0]
    for t in range(BLOCK):
        sums[t] = linear[width]
    for k in range(width):
        c_k = linear[k]
        for t in range(BLOCK):
            sums[t] += c_k * block[k, t]
    dim = states.shape[0]
    if width == 2:  # the paper's (value, marker) inputs: one fused loop, two units per sweep
        for d in range(0, dim, 2):
            e = min(d + 1, dim - 1)  # an odd last unit is paired with itself, its twin weighted 0
            b_d, w_0, w_1, c = bias[d], weight_t[0, d], weight_t[1, d], coefficient[d]
            b_e, v_0, v_1 = bias[e], weight_t[0, e], weight_t[1, e]
            c_e = coefficient[e] if e > d else np.float32(0.0)
            for t in range(BLOCK):
                x_0, x_1 = block[0, t], block[1, t]
                z = b_d + w_0 * x_0 + w_1 * x_1
                r = z if z > 0 else np.float32(0.0)
                y = b_e + v_0 * x_0 + v_1 * x_1
                q = y if y > 0 else np.float32(0.0)
                states[d, t] = r
                states[e, t] = q
                sums[t] += c * r + c_e * q
    else:
        for d in range(states.shape[0]):
            b_d = bias[d]
            for t in range(BLOCK):
                states[d, t] = b_d
            for k in range(width):
                w_k = weight_t[k, d]
                for t in range(BLOCK):
                    states[d, t] += w_k * block[k, t]
            c = coefficient[d]
            for t in range(BLOCK):
                r = states[d, t] if states[d, t] > 0 else np.float32(0.0)
                states[d, t] = r
                sums[t] += c * r


@numba.njit(**_INLINE)
def _add_input_sums(sums: np.ndarray, block: np.ndarray, coef: np.ndarray) -> None:
    """``sums[k] += Σ_t coef_t x̃_{k,t}`` (float32 over the block, float64 across blocks)."""
    width = block.shape[0]
    for k in range(width):
        partial = np.float32(0.0)
        for t in range(BLOCK):
            partial += coef[t] * block[k, t]
        sums[k] += partial
    partial = np.float32(0.0)
    for t in range(BLOCK):
        partial += coef[t]
    sums[width] += partial


@numba.njit(**_INLINE)
def _affine_dot(weight_t: np.ndarray, bias: np.ndarray, d: int, sums: np.ndarray) -> float:
    """``W̃_d · sums`` in float64: ``Σ_k W_{d,k} sums_k + b_d sums_K``."""
    width = weight_t.shape[0]
    value = float(bias[d]) * sums[width]
    for k in range(width):
        value += float(weight_t[k, d]) * sums[k]
    return float(value)


@numba.njit(**_INLINE)
def _masked_sums(
    sums: np.ndarray, states: np.ndarray, block: np.ndarray, coef_g: np.ndarray, coef_w: np.ndarray,
    g: np.ndarray, v: np.ndarray, masked: np.ndarray,
) -> None:  # fmt: skip
    """For the block and every unit ``d``, with ``q_{t,d} = alpha_t g_d + δ_t w_d`` (``∂L/∂z_{t,d} =
    S_{t,d} q_{t,d}``): ``sums[k, d] += Σ_t [z_{t,d} > 0] q_{t,d} x̃_{k,t}`` (``k ≤ K``, the last
    one the constant 1) and ``sums[K + 1, d] += Σ_t δ_t r_{t,d}``; ``states`` holds ``r``."""
    width = block.shape[0]
    if width == 2:  # one fused loop (a test on the width inside it would keep it scalar)
        for d in range(states.shape[0]):
            g_d, v_d = g[d], v[d]
            partial_0 = np.float32(0.0)
            partial_1 = np.float32(0.0)
            partial_bias = np.float32(0.0)
            partial_score = np.float32(0.0)
            for t in range(BLOCK):
                r = states[d, t]
                q = coef_g[t] * g_d + coef_w[t] * v_d
                q = q if r > 0 else np.float32(0.0)
                partial_0 += q * block[0, t]
                partial_1 += q * block[1, t]
                partial_bias += q
                partial_score += coef_w[t] * r
            sums[0, d] += partial_0
            sums[1, d] += partial_1
            sums[2, d] += partial_bias
            sums[3, d] += partial_score
    else:
        for d in range(states.shape[0]):
            g_d, v_d = g[d], v[d]
            partial_bias = np.float32(0.0)
            partial_score = np.float32(0.0)
            for t in range(BLOCK):
                r = states[d, t]
                q = coef_g[t] * g_d + coef_w[t] * v_d
                q = q if r > 0 else np.float32(0.0)
                masked[t] = q
                partial_bias += q
                partial_score += coef_w[t] * r
            for k in range(width):
                partial = np.float32(0.0)
                for t in range(BLOCK):
                    partial += masked[t] * block[k, t]
                sums[k, d] += partial
            sums[width, d] += partial_bias
            sums[width + 1, d] += partial_score


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
    ramp = 1.0 - leak
    # w · h_t = λ (Σ_d w_d W̃_d) · x̃_t + Σ_d (1 − λ) w_d r_{t,d}
    linear = np.zeros(width + 1, np.float64)
    score_ramp = np.empty(dim, np.float32)
    for d in range(dim):
        v = float(score_weight[d])
        score_ramp[d] = ramp * v
        for k in range(width):
            linear[k] += leak * v * weight_t[k, d]
        linear[width] += leak * v * bias[d]
    linear[width] += score_bias
    score_linear = linear.astype(np.float32)
    block = np.empty((width, BLOCK), np.float32)
    states = np.empty((dim, BLOCK), np.float32)  # r, this thread's buffer
    logits = np.empty(BLOCK, np.float32)
    probs = np.zeros(BLOCK, np.float32)  # p_t, zero past the length
    accumulator = np.empty(dim, np.float64)  # Σ_t p_t r_t
    input_sums = np.empty(width + 1, np.float64)  # Σ_t p_t x̃_t; the last entry is Σ_t p_t
    for row in range(first, last):
        length = lengths[row]
        x = inputs[row]
        accumulator[:] = 0.0
        input_sums[:] = 0.0
        for start in range(0, length, BLOCK):
            size = min(BLOCK, length - start)
            _load_block(block, x, start, size)
            if attention:
                _rectified_states(states, block, weight_t, bias, score_ramp, score_linear, logits)
                # Two loops of one array each: a loop that reads one and writes two is left scalar.
                for t in range(BLOCK):
                    logits[t] = _tanh(logits[t])  # e_t, eq. 1 (a = tanh)
                for t in range(BLOCK):
                    # e_t ∈ [-1, 1], so exp(e_t) ∈ [1/e, e]: the softmax needs no running maximum.
                    probs[t] = _exp_unit(logits[t])
                for t in range(size, BLOCK):
                    probs[t] = 0.0
                for t in range(size):
                    scores[row, start + t] = logits[t]
                    weights[row, start + t] = probs[t]  # normalised at the end
            else:
                for t in range(size):
                    probs[t] = np.float32(1.0)
                for t in range(size, BLOCK):
                    probs[t] = 0.0
                _rectified_states(states, block, weight_t, bias, score_ramp, score_linear, logits)
            for d in range(dim):
                partial = np.float32(0.0)
                for t in range(BLOCK):
                    partial += probs[t] * states[d, t]
                accumulator[d] += partial
            _add_input_sums(input_sums, block, probs)
        total = input_sums[width]
        for d in range(dim):  # Σ_t p_t h_t = λ W̃_d · Σ_t p_t x̃_t + (1 − λ) Σ_t p_t r_t
            pooled = leak * _affine_dot(weight_t, bias, d, input_sums) + ramp * accumulator[d]
            context[row, d] = pooled / total
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
    grad_weights: np.ndarray,  # [B, T] float32, γ (read only when weight_grads)
    weight_grads: bool,  # False: γ = 0
    shared: np.ndarray,  # [B] float32, g · c + Σ_k alpha_k γ_k
    grad_affine: np.ndarray,  # out [B, K + 1, D] float64: per-row Σ_t ∂L/∂z_t x̃_tᵀ, transposed
    grad_score_weight: np.ndarray,  # out [B, D] float64: per-row Σ_t δ_t h_t
    grad_score_bias: np.ndarray,  # out [B] float64: per-row Σ_t δ_t
    first: int,
    last: int,
) -> None:
    width = inputs.shape[2]
    dim = weight_t.shape[1]
    ramp = 1.0 - leak
    one = np.float32(1.0)
    block = np.empty((width, BLOCK), np.float32)
    states = np.empty((dim, BLOCK), np.float32)  # r, this thread's buffer
    upstream = np.empty(BLOCK, np.float32)
    masked = np.empty(BLOCK, np.float32)  # [z_{t,d} > 0] q_{t,d}, for K ≠ 2
    coef_g = np.zeros(BLOCK, np.float32)  # alpha_t: ∂L/∂z_t = S_t ⊙ (alpha_t g + δ_t w)
    coef_w = np.zeros(BLOCK, np.float32)  # δ_t; both zero past the length
    grad_ramp = np.empty(dim, np.float32)
    score_coef = score_weight if attention else np.zeros(dim, np.float32)  # w; δ = 0 for the mean
    grad_linear = np.empty(width + 1, np.float32)
    alpha_sums = np.empty(width + 1, np.float64)  # Σ_t alpha_t x̃_t
    delta_sums = np.empty(width + 1, np.float64)  # Σ_t δ_t x̃_t; the last entry is Σ_t δ_t
    ramp_sums = np.empty((width + 2, dim), np.float64)  # Σ_t [z > 0] q_t x̃_t; then Σ_t δ_t r_t
    for row in range(first, last):
        length = lengths[row]
        x = inputs[row]
        g = grad_context[row]
        # g · h_t = λ (Σ_d g_d W̃_d) · x̃_t + Σ_d (1 − λ) g_d r_{t,d}
        linear = np.zeros(width + 1, np.float64)
        for d in range(dim):
            grad_ramp[d] = ramp * g[d]
            for k in range(width):
                linear[k] += leak * g[d] * weight_t[k, d]
            linear[width] += leak * g[d] * bias[d]
        for k in range(width + 1):
            grad_linear[k] = linear[k]
        alpha_sums[:] = 0.0
        delta_sums[:] = 0.0
        ramp_sums[:] = 0.0
        for start in range(0, length, BLOCK):
            size = min(BLOCK, length - start)
            _load_block(block, x, start, size)
            for t in range(size):
                coef_g[t] = weights[row, start + t]
            for t in range(size, BLOCK):
                coef_g[t] = 0.0
            _add_input_sums(alpha_sums, block, coef_g)
            if attention:
                _rectified_states(states, block, weight_t, bias, grad_ramp, grad_linear, upstream)
                offset = -shared[row]
                for t in range(size):
                    e = scores[row, start + t]
                    gamma = grad_weights[row, start + t] if weight_grads else np.float32(0.0)
                    up = upstream[t] + gamma + offset  # ∂L/∂e_t / alpha_t
                    coef_w[t] = coef_g[t] * up * (one - e * e)  # δ_t
                for t in range(size, BLOCK):
                    coef_w[t] = 0.0
                _add_input_sums(delta_sums, block, coef_w)
            else:
                _rectified_states(states, block, weight_t, bias, grad_ramp, grad_linear, upstream)
            _masked_sums(ramp_sums, states, block, coef_g, coef_w, g, score_coef, masked)
        out_affine = grad_affine[row]
        for d in range(dim):
            # Σ_t S_t q_t x̃_t = λ (g_d Σ_t alpha_t x̃_t + w_d Σ_t δ_t x̃_t) + (1 − λ) Σ_t [z > 0] q_t x̃_t
            g_d = float(g[d])
            v = float(score_weight[d]) if attention else 0.0
            for k in range(width + 1):
                linear = g_d * alpha_sums[k] + v * delta_sums[k]
                out_affine[k, d] = leak * linear + ramp * ramp_sums[k, d]
            # Σ_t δ_t h_t = λ W̃_d · Σ_t δ_t x̃_t + (1 − λ) Σ_t δ_t r_t
            grad_score_weight[row, d] = (
                leak * _affine_dot(weight_t, bias, d, delta_sums) + ramp * ramp_sums[width + 1, d]
            )
        grad_score_bias[row] = delta_sums[width]
