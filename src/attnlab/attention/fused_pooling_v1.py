"""The first fused kernel for "per-step leaky affine layer, then temporal pooling" (kept as ``fused_v1``).

This is the kernel :mod:`attnlab.attention.fused_pooling` replaced (issue 22): one sequence at a
time with PyTorch matrix products, the states ``[T, D]`` of a sequence materialised (forward) and
recomputed (backward), sums over time and over the batch accumulated in float32. It computes the
same function and gradient (the formulas are derived in :mod:`attnlab.attention.fused_pooling`);
``FeedForwardAttentionNetwork(implementation="fused_v1")`` runs it, so that
``benchmarks/bench_memory_problems.py`` can measure the new kernel against it in the same run.
Its float32 accumulation over ``B·T`` terms makes some gradient entries drift by ~1e-3 relative
from a float64 computation at ``T = 10,000`` (``docs/results.md``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnlab.attention.fused_pooling import check_fused_arguments


class _LeakyAffinePoolingV1(torch.autograd.Function):
    @staticmethod
    def forward(
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
                assert score_bias is not None  # given with score_weight
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
    def backward(ctx: Any, grad_context: torch.Tensor | None, grad_weights: torch.Tensor | None):
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


def leaky_affine_pooling_v1(
    inputs: torch.Tensor,
    lengths: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    leak: float,
    score_weight: torch.Tensor | None = None,
    score_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attnlab.attention.fused_pooling.leaky_affine_pooling` as first written (same arguments)."""
    check_fused_arguments("leaky_affine_pooling_v1", inputs, lengths, score_weight, score_bias)
    return _LeakyAffinePoolingV1.apply(inputs, lengths, weight, bias, score_weight, score_bias, float(leak))
