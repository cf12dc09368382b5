"""A memory-lean, cache-friendly kernel for "per-step leaky affine layer, then temporal pooling".

Raffel & Ellis (2015, §2.1) compute ``h_t = LReLU(W x_t + b)`` for every step and pool the states
with feed-forward attention (eq. 1, ``a(h_t) = tanh(w · h_t + b_w)``) or the plain mean (eq. 2).
Written as separate PyTorch ops, this builds several ``[B, T, D]`` tensors (the affine output, the
activations, the weighted states and their gradients): at ``B = 100``, ``T = 10,000``, ``D = 100``
each is 400 MB, so a training step streams gigabytes through main memory.

:func:`leaky_affine_pooling` computes the same function, and its exact gradient, one sequence at a
time. A sequence's states (``T × D``, a few MB) stay in the CPU cache, padding is skipped, and the
backward pass *recomputes* them from the inputs instead of storing them. The only saved tensors
are ``[B, T]``. Peak memory does not grow with ``D · T · B``, only with ``T · D`` for one sequence.

Backward, for one sequence with ``z_t = W̃ x̃_t`` (``x̃_t = [x_t; 1]``, ``W̃ = [W, b]``), ``h_t =
LReLU(z_t)``, ``e_t = tanh(w · h_t + b_w)``, ``alpha = softmax(e)`` and ``c = Σ_t alpha_t h_t``,
given ``g = ∂L/∂c`` and (optionally) ``γ = ∂L/∂alpha``::

    ∂L/∂e_t   = alpha_t (g · h_t + γ_t − g · c − Σ_k alpha_k γ_k)           (softmax Jacobian)
    δ_t       = ∂L/∂e_t · (1 − e_t²)                                         (tanh)
    ∂L/∂w     = Σ_t δ_t h_t,        ∂L/∂b_w = Σ_t δ_t
    ∂L/∂z_t   = S_t ⊙ (alpha_t g + δ_t w),   S_t = LReLU'(z_t) ∈ {1, leak}^D
    ∂L/∂W̃    = Σ_t ∂L/∂z_t x̃_tᵀ
              = g ⊙ (Sᵀ (alpha ⊙ X̃)) + w ⊙ (Sᵀ (δ ⊙ X̃))                   (⊙ broadcast over rows)

and ``S = (1 + leak)/2 + (1 − leak)/2 · sign(h)``, so ``Sᵀ M`` is one matrix product with
``sign(h)`` plus a column sum: the ``[T, D]`` gradient ``∂L/∂z`` is never formed. For the mean,
``alpha_t = 1/n`` and ``δ = 0``. (``sign(h)`` is 0 where ``z = 0`` exactly, which gives the slope
``(1 + leak)/2`` there; this happens with probability zero for continuous inputs.)

Inputs must be right-padded (every row's real steps come first) and must not require gradients:
the kernel differentiates with respect to the parameters only. :func:`can_use_fused_pooling` says
whether a batch qualifies; callers fall back to the modular ops otherwise.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


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


class _LeakyAffinePooling(torch.autograd.Function):
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
        augmented = torch.cat([inputs, inputs.new_ones(batch, time, 1)], dim=2)  # x̃ = [x; 1]
        affine_t = torch.cat([weight, bias.unsqueeze(1)], dim=1).t().contiguous()  # W̃ᵀ, [K+1, D]
        context = inputs.new_empty(batch, weight.size(0))
        weights = inputs.new_zeros(batch, time)
        scores = inputs.new_zeros(batch, time)
        for row, length in enumerate(lengths.tolist()):
            states = F.leaky_relu_(torch.mm(augmented[row, :length], affine_t), leak)  # h, [n, D]
            if score_weight is None:
                alpha = states.new_full((length,), 1.0 / length)
            else:
                score = torch.tanh(torch.mv(states, score_weight).add_(score_bias))  # e_t, eq. 1
                alpha = torch.exp(score)  # e_t in [-1, 1]: no max-subtraction needed
                alpha.div_(alpha.sum())
                scores[row, :length] = score
            torch.mv(states.t(), alpha, out=context[row])
            weights[row, :length] = alpha
        ctx.save_for_backward(augmented, lengths, affine_t, score_weight, weights, scores, context)
        ctx.leak = leak
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        return context, weights

    @staticmethod
    def backward(ctx: Any, grad_context: torch.Tensor | None, grad_weights: torch.Tensor | None):  # type: ignore[override]
        augmented, lengths, affine_t, score_weight, weights, scores, context = ctx.saved_tensors
        leak = ctx.leak
        batch, time, width = augmented.shape
        dim = affine_t.size(1)
        if grad_context is None:
            grad_context = context.new_zeros(batch, dim)
        # The mean's weights (1/n) do not depend on the parameters: their gradient is dropped.
        attention = score_weight is not None
        if attention:
            # g · c + Σ_k alpha_k γ_k, per row: the softmax Jacobian's shared term.
            shared = (grad_context * context).sum(dim=1)
            if grad_weights is not None:
                shared = shared + (weights * grad_weights).sum(dim=1)
            grad_score_weight = torch.zeros_like(score_weight)
            grad_score_bias = score_weight.new_zeros(())
        grad_from_context = affine_t.new_zeros(dim, width)  # Σ_rows g ⊙ Sᵀ(alpha ⊙ X̃)
        grad_from_scores = affine_t.new_zeros(dim, width)  # Σ_rows Sᵀ(δ ⊙ X̃), times w at the end
        half_sum, half_diff = (1.0 + leak) / 2.0, (1.0 - leak) / 2.0
        scaled = augmented.new_empty(time, 2 * width)
        for row, length in enumerate(lengths.tolist()):
            rows = augmented[row, :length]
            states = F.leaky_relu_(torch.mm(rows, affine_t), leak)
            alpha = weights[row, :length]
            block = scaled[:length, : 2 * width if attention else width]
            torch.mul(rows, alpha.unsqueeze(1), out=block[:, :width])
            if attention:
                upstream = torch.mv(states, grad_context[row])  # g · h_t
                if grad_weights is not None:
                    upstream += grad_weights[row, :length]
                score = scores[row, :length]
                delta = alpha * (upstream - shared[row]) * (1.0 - score * score)  # δ_t
                grad_score_weight.addmv_(states.t(), delta)
                grad_score_bias += delta.sum()
                torch.mul(rows, delta.unsqueeze(1), out=block[:, width:])
            products = torch.mm(states.sign_().t(), block)  # sign(h)ᵀ M, [D, width or 2·width]
            products.mul_(half_diff).add_(block.sum(dim=0), alpha=half_sum)  # Sᵀ M
            grad_from_context.addcmul_(products[:, :width], grad_context[row].unsqueeze(1))
            if attention:
                grad_from_scores += products[:, width:]
        grad_affine = grad_from_context
        if attention:
            grad_affine = grad_affine + grad_from_scores * score_weight.unsqueeze(1)
        grad_weight = grad_affine[:, :-1].contiguous()
        grad_bias = grad_affine[:, -1].contiguous()
        if not attention:
            return None, None, grad_weight, grad_bias, None, None, None
        return None, None, grad_weight, grad_bias, grad_score_weight, grad_score_bias, None


def leaky_affine_pooling(
    inputs: torch.Tensor,
    lengths: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    leak: float,
    score_weight: torch.Tensor | None = None,
    score_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool ``h_t = LReLU(weight · x_t + bias)`` over each row's first ``lengths[row]`` steps.

    ``inputs`` ``[B, T, K]`` (right-padded, no gradient), ``lengths`` long ``[B]`` on the CPU,
    ``weight`` ``[D, K]``, ``bias`` ``[D]``. With ``score_weight`` ``[D]`` and ``score_bias`` (scalar),
    the pooling is feed-forward attention with ``a(h_t) = tanh(score_weight · h_t + score_bias)``
    (Raffel & Ellis eq. 1, §2.1); without them it is the mean over real steps (eq. 2). Returns
    ``(context [B, D], weights [B, T])``, weights exactly zero on padding — the same values as the
    modular :class:`~attnlab.attention.pooling.FeedForwardAttentionPooling` /
    :class:`~attnlab.attention.pooling.MeanPooling` on the materialised states, to float rounding.
    """
    if (score_weight is None) != (score_bias is None):
        raise ValueError("leaky_affine_pooling: give both score_weight and score_bias, or neither")
    if inputs.requires_grad:
        raise ValueError(
            "leaky_affine_pooling: inputs must not require gradients (see can_use_fused_pooling)"
        )
    if int(lengths.min()) < 1:
        raise ValueError("leaky_affine_pooling: every sequence needs at least one real step")
    return _LeakyAffinePooling.apply(inputs, lengths, weight, bias, score_weight, score_bias, float(leak))
