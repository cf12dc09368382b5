"""Temporal pooling of a state sequence into one vector (Raffel & Ellis 2015, §1.3 and §2.1).

These modules embed a whole sequence ``h_1 … h_T`` into a single context vector ``c``. They have no
query, so they are *not* seq2seq attenders and do not subclass
:class:`attnlab.attention.base.Attender`; they share a small interface of their own:

``forward(states [batch, time, dim], padding_mask: bool [batch, time] | None = None) -> PoolingOutput``

with the project's conventions: batch first, ``True`` in ``padding_mask`` marks padding, padded steps
get a weight of exactly zero, and every sequence needs at least one real step.

Memory. Both modules work on sequences of ten thousand steps: the only tensors they create are a
few of shape ``[batch, time]`` (scores, weights) besides the ``[batch, dim]`` context; the
``[batch, time, dim]`` input is never copied. The context is a batched matrix-vector product
``alpha^T H``. Padded states are multiplied by an exact zero weight, so they must be finite (they
need not be zero).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.base import check_padding_mask, check_sizes, masked_softmax
from attnlab.checks import check_int


@dataclass
class PoolingOutput:
    """The pooled context ``c`` (``[batch, dim]``) and the weights ``alpha`` (``[batch, time]``)."""

    context: torch.Tensor
    weights: torch.Tensor


def check_pooling_inputs(
    name: str, states: torch.Tensor, padding_mask: torch.Tensor | None, dim: int | None = None
) -> None:
    """Shape / dtype checks of anything pooled over time (``[batch, time, dim]`` with at least one
    step, a valid padding mask); rejects all-padding rows by index."""
    if states.dim() != 3 or (dim is not None and states.size(-1) != dim):
        expected = "dim" if dim is None else f"dim={dim}"
        raise ValueError(f"{name}: states must be [batch, time, {expected}], got {tuple(states.shape)}")
    if not states.is_floating_point():  # integer weights 1/T would round to 0
        raise ValueError(f"{name}: states must be floating point, got {states.dtype}")
    if states.size(1) == 0:
        raise ValueError(f"{name}: states have time length 0 (empty sequence); there is nothing to pool")
    if padding_mask is not None:
        check_padding_mask(name, padding_mask, states.shape[:2], "padding_mask")


def _pool(weights: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """``c = sum_t alpha_t h_t`` as ``[B, 1, T] @ [B, T, D] -> [B, D]`` (no ``[B, T, D]`` temporary)."""
    return torch.bmm(weights.unsqueeze(1), states).squeeze(1)


class FeedForwardAttentionPooling(nn.Module):
    """Feed-forward attention (Raffel & Ellis 2015, eq. 1, with ``a`` from §2.1).

    For each state alone (no query, no recurrence)::

        e_t     = a(h_t) = tanh(w · h_t + b)        (§2.1: W_hc ∈ R^{1×D}, b_hc ∈ R)
        alpha_t = exp(e_t) / sum_k exp(e_k)          (eq. 1, softmax over the real steps only)
        c       = sum_t alpha_t h_t                  (eq. 1)

    ``score_activation`` replaces ``tanh`` if given (any elementwise callable). Initialisation
    follows §2.1: ``w`` has entries drawn from N(0, 1/D) (std ``1/sqrt(N)`` for a matrix in
    ``R^{M×N}``), ``b`` is zero.

    Parameters: ``weight`` (``[input_dim]``, the row ``W_hc``) and ``bias`` (scalar ``b_hc``).
    """

    def __init__(
        self,
        input_dim: int,
        *,
        score_activation: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
    ) -> None:
        super().__init__()
        check_int("input_dim", input_dim, owner="FeedForwardAttentionPooling")
        self.input_dim = input_dim
        self.score_activation = score_activation
        self.weight = nn.Parameter(torch.empty(input_dim))
        self.bias = nn.Parameter(torch.empty(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """§2.1: Gaussian weights with standard deviation ``1/sqrt(D)``, zero bias."""
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0 / math.sqrt(self.input_dim))
            self.bias.zero_()

    def scores(self, states: torch.Tensor) -> torch.Tensor:
        """The unnormalised scores ``e_t = a(h_t)``, ``[batch, time]`` (computed from each state alone)."""
        return self.score_activation(torch.matmul(states, self.weight) + self.bias)

    def forward(self, states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> PoolingOutput:
        check_pooling_inputs(type(self).__name__, states, padding_mask, self.input_dim)
        scores = self.scores(states)  # [B, T]
        weights = masked_softmax(scores.unsqueeze(1), padding_mask).squeeze(1)  # [B, T]
        return PoolingOutput(context=_pool(weights, states), weights=weights)

    def extra_repr(self) -> str:
        activation = getattr(self.score_activation, "__name__", repr(self.score_activation))
        return f"input_dim={self.input_dim}, score_activation={activation}"


class MeanPooling(nn.Module):
    """Unweighted temporal mean (Raffel & Ellis 2015, eq. 2): ``c = (1/T) sum_t h_t``.

    With padding, ``T`` is each sequence's own number ``n`` of real steps: the weights are ``1/n``
    on real steps and exactly ``0`` on padding, so a padded batch gives the same context as the
    unpadded sequences. No parameters. ``input_dim``, if given, is checked against the input.
    """

    def __init__(self, input_dim: int | None = None) -> None:
        super().__init__()
        check_sizes(type(self).__name__, input_dim=input_dim)
        self.input_dim = input_dim

    def forward(self, states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> PoolingOutput:
        check_pooling_inputs(type(self).__name__, states, padding_mask, self.input_dim)
        batch, time = states.shape[:2]
        if padding_mask is None:
            weights = states.new_full((batch, time), 1.0 / time)
        else:
            real = (~padding_mask).to(states.dtype)  # [B, T]
            weights = real / real.sum(dim=1, keepdim=True)
        return PoolingOutput(context=_pool(weights, states), weights=weights)

    def extra_repr(self) -> str:
        return "" if self.input_dim is None else f"input_dim={self.input_dim}"
