"""The feed-forward attention network of Raffel & Ellis (2015), §2.1.

For an input sequence ``x_1 … x_T`` (``x_t ∈ R^2`` for the addition / multiplication problems,
see :class:`attnlab.tasks.memory_problems.MemoryBatch`) and ``D = 100`` hidden units::

    h_t = LReLU(W_xh x_t + b_xh)        W_xh ∈ R^{D×2},  b_xh ∈ R^D      (§2.1, each step alone)
    c   = sum_t alpha_t h_t              attention, eq. 1 with a(h_t) = tanh(W_hc h_t + b_hc)
        | (1/T) sum_t h_t                or the unweighted mean, eq. 2
    s   = LReLU(W_cs c + b_cs)           W_cs ∈ R^{D×D},  b_cs ∈ R^D      (§2.1)
    y   = LReLU(W_sy s + b_sy)           W_sy ∈ R^{1×D},  b_sy ∈ R        (§2.1)

Interpretations:

* ``LReLU(x) = max(x, .01)`` in the paper is the leaky rectifier of Maas et al. (2013), i.e.
  ``x`` for ``x > 0`` and ``0.01 x`` otherwise (slope ``leak``), not a clamp at 0.01.
* "a Gaussian distribution with mean zero and, for a matrix W ∈ R^{M×N}, a standard deviation of
  1/sqrt(N)": every weight matrix is drawn from N(0, std = 1/sqrt(fan_in)) (fan_in = N, the
  number of columns / inputs); all biases are zero. The attention row ``W_hc`` is initialised the
  same way by :class:`~attnlab.attention.pooling.FeedForwardAttentionPooling`.
* The output nonlinearity on ``y`` is kept, as written in §2.1.

Parameter counts with the defaults (``D = 100``): 10,602 with attention, 10,501 with the mean —
the numbers given in §2.2.

Two implementations of the same function (``implementation=``):

* ``"modular"``: the per-step ``Linear`` builds ``h`` as a ``[B, T, D]`` tensor, and the reusable
  pooling modules of :mod:`attnlab.attention.pooling` pool it (nothing of shape ``[B, T, T]``).
* ``"fused"``: :func:`attnlab.attention.fused_pooling.leaky_affine_pooling` computes the per-step
  layer and the pooling a block of time steps at a time and recomputes ``h`` in the backward pass,
  so no ``[B, T, D]`` tensor exists: at ``T = 10,000`` it is tens of times faster on a CPU and needs
  a few MB instead of gigabytes (``benchmarks/bench_memory_problems.py``). On the CPU it runs numba
  kernels on ``torch.get_num_threads()`` threads (a PyTorch fallback elsewhere). It applies when
  the inputs need no gradient and padding is on the right; otherwise the modular path runs.
* ``"fused_v1"``: the first fused kernel (:mod:`attnlab.attention.fused_pooling_v1`, one sequence
  at a time with PyTorch ops), kept so that the benchmark can measure the new one against it.
* ``"auto"`` (default): fused on the CPU for sequences of at least :data:`FUSED_MIN_LENGTH` steps,
  where it pays off; modular otherwise (short sequences, and CUDA, where the loop over sequences
  would launch many small kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention.fused_pooling import (
    can_use_fused_pooling,
    leaky_affine_pooling,
    right_padded_lengths,
)
from attnlab.attention.fused_pooling_v1 import leaky_affine_pooling_v1
from attnlab.attention.pooling import FeedForwardAttentionPooling, MeanPooling, check_pooling_inputs
from attnlab.checks import check_choice, check_int

Pooling = Literal["attention", "mean"]
POOLINGS: tuple[str, ...] = ("attention", "mean")
Implementation = Literal["auto", "fused", "fused_v1", "modular"]
IMPLEMENTATIONS: tuple[str, ...] = ("auto", "fused", "fused_v1", "modular")

FUSED_MIN_LENGTH = 256
"""``implementation="auto"`` uses the fused kernel on the CPU from this padded length on."""


@dataclass
class PoolingNetworkOutput:
    """``prediction``: float ``[B]`` (the scalar output ``y`` per sequence), or ``[B, num_classes]``
    logits for a classifier; ``weights``: ``[B, T]``, the temporal weights ``alpha_t`` (eq. 1) or
    ``1/T`` (eq. 2); exactly zero on padding."""

    prediction: torch.Tensor
    weights: torch.Tensor


def _gaussian_init_(linear: nn.Linear) -> None:
    """§2.1: weights ~ N(0, std = 1/sqrt(fan_in)), biases zero."""
    with torch.no_grad():
        linear.weight.normal_(0.0, 1.0 / math.sqrt(linear.in_features))
        linear.bias.zero_()


class FeedForwardAttentionNetwork(nn.Module):
    """Raffel & Ellis (2015) §2.1: per-step LReLU layer, temporal pooling, LReLU layer, scalar output.

    ``pooling="attention"`` uses feed-forward attention (eq. 1, ``a(h_t) = tanh(W_hc h_t + b_hc)``);
    ``pooling="mean"`` the unweighted mean (eq. 2). ``forward(inputs [B, T, input_dim],
    padding_mask [B, T] | None)`` returns :class:`PoolingNetworkOutput`; ``True`` in ``padding_mask``
    marks padding, which gets weight zero, so a padded sequence gives the same prediction as alone.

    ``num_classes`` (default ``None``: the paper's scalar regression output) turns the last layer
    into ``num_classes`` logits without the output rectifier, for classification tasks such as the
    temporal order problem of §3.
    """

    def __init__(
        self,
        input_dim: int = 2,
        hidden_dim: int = 100,
        *,
        pooling: Pooling = "attention",
        leak: float = 0.01,
        implementation: Implementation = "auto",
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("input_dim", input_dim), ("hidden_dim", hidden_dim)):
            check_int(name, value, owner="FeedForwardAttentionNetwork")
        check_choice("pooling", pooling, POOLINGS, owner="FeedForwardAttentionNetwork")
        if not isinstance(leak, (int, float)) or isinstance(leak, bool) or not 0.0 <= leak < 1.0:
            raise ValueError(f"FeedForwardAttentionNetwork: leak must be a float in [0, 1), got {leak!r}")
        check_choice("implementation", implementation, IMPLEMENTATIONS, owner="FeedForwardAttentionNetwork")
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
        ):
            raise ValueError(
                f"FeedForwardAttentionNetwork: num_classes must be None or an int >= 2, got {num_classes!r}"
            )
        self.implementation = implementation
        self.num_classes = num_classes
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.pooling_kind = pooling
        self.leak = float(leak)
        self.input_layer = nn.Linear(input_dim, hidden_dim)  # W_xh, b_xh
        self.pooling: FeedForwardAttentionPooling | MeanPooling
        if pooling == "attention":
            self.pooling = FeedForwardAttentionPooling(hidden_dim)  # W_hc, b_hc (eq. 1)
        else:
            self.pooling = MeanPooling(hidden_dim)  # eq. 2, no parameters
        self.hidden_layer = nn.Linear(hidden_dim, hidden_dim)  # W_cs, b_cs
        self.output_layer = nn.Linear(hidden_dim, num_classes or 1)  # W_sy, b_sy
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """§2.1 initialisation: N(0, std = 1/sqrt(fan_in)) weights, zero biases (all layers)."""
        for linear in (self.input_layer, self.hidden_layer, self.output_layer):
            _gaussian_init_(linear)
        if isinstance(self.pooling, FeedForwardAttentionPooling):
            self.pooling.reset_parameters()

    def _lrelu(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.leak)

    def forward(self, inputs: torch.Tensor, padding_mask: torch.Tensor | None = None) -> PoolingNetworkOutput:
        if inputs.dim() != 3 or inputs.size(-1) != self.input_dim:
            raise ValueError(
                f"FeedForwardAttentionNetwork: inputs must be [batch, time, {self.input_dim}] "
                f"(input_dim={self.input_dim} channels), got shape {tuple(inputs.shape)}"
            )
        context, weights = self._pool(inputs, padding_mask)  # c [B, D], alpha [B, T]
        hidden = self._lrelu(self.hidden_layer(context))  # s, [B, D]
        if self.num_classes is not None:
            return PoolingNetworkOutput(prediction=self.output_layer(hidden), weights=weights)  # logits
        prediction = self._lrelu(self.output_layer(hidden)).squeeze(-1)  # y, [B]
        return PoolingNetworkOutput(prediction=prediction, weights=weights)

    def _fuse(self, inputs: torch.Tensor) -> bool:
        if self.implementation == "modular":
            return False
        if self.implementation == "auto" and (
            inputs.device.type != "cpu" or inputs.size(1) < FUSED_MIN_LENGTH
        ):
            return False
        return can_use_fused_pooling(inputs, *self.parameters())

    def _pool(
        self, inputs: torch.Tensor, padding_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(c, alpha)``: from the fused kernel when it applies (and padding is on the right), else
        from the per-step layer and the pooling module."""
        if self._fuse(inputs):
            check_pooling_inputs(type(self).__name__, inputs, padding_mask)
            lengths = right_padded_lengths(padding_mask, inputs.size(0), inputs.size(1))
            if lengths is not None:
                scores = {}
                if isinstance(self.pooling, FeedForwardAttentionPooling):
                    scores = {"score_weight": self.pooling.weight, "score_bias": self.pooling.bias}
                v1 = self.implementation == "fused_v1"
                kernel = leaky_affine_pooling_v1 if v1 else leaky_affine_pooling
                return kernel(
                    inputs, lengths, self.input_layer.weight, self.input_layer.bias, leak=self.leak, **scores
                )
        pooled = self.pooling(self._lrelu(self.input_layer(inputs)), padding_mask)  # over h_t, [B, T, D]
        return pooled.context, pooled.weights

    def extra_repr(self) -> str:
        return (
            f"input_dim={self.input_dim}, hidden_dim={self.hidden_dim}, "
            f"pooling={self.pooling_kind!r}, leak={self.leak}, implementation={self.implementation!r}"
            + ("" if self.num_classes is None else f", num_classes={self.num_classes}")
        )
