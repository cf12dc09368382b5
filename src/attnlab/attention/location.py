"""The Location Attender (Dubois et al. 2020, §5.1, Figure 3).

A Gaussian attention over the *relative* positions ``r_s = s / (n_s - 1)`` of the real keys, whose
mean is a gated combination of three building blocks::

    omega_t  = GRU(ReLU(W_resize q_t), omega_{t-1})                    (the "weighter")
    sigma_t  = (ReLU(W_sigma omega_t) + min_sigma) / n_s
    rho_t    = a(W_rho omega_t) = [sigmoid(.), softstair(.), sigmoid(.)]
    b_t      = [mean_alpha_{t-1}; 1 / (n_s - 1); 1]
    mu_t     = leaky_clamp(rho_t^T b_t)
    lambda_t = {PDF_{mu_t, sigma_t}(r_s)}_s, normalised over the real positions

``mean_alpha_{t-1} = sum_s alpha_{t-1,s} r_s`` is the mean relative position of the previous
*final* attention (the location attention itself, or the Mix Attender's mixture).

Choices where the paper is silent (documented again on the class):

* ``lambda_t`` is normalised to sum to 1 over the real keys: it is computed as the masked softmax
  of the Gaussian log-density ``-(r_s - mu_t)^2 / (2 sigma_t^2)``; the PDF's normalising constant
  cancels and nothing underflows to a 0/0.
* ``n_s = 1``: ``r_0 = 0`` and the step size ``1 / (n_s - 1)`` is taken to be 1.
* ``omega_0 = 0`` by default (option ``learn_initial_hidden`` makes it a learned vector).
* ``mean_alpha_{-1} = 0`` (the first step has no previous attention; the gate sees position 0).
* Source positions are ranks among the real keys, so any padding layout works.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention.base import (
    Attender,
    AttentionOutput,
    AttentionState,
    weighted_sum,
)
from attnlab.attention.content import advance_state, check_positive
from attnlab.attention.positional import source_positions
from attnlab.checks import check_choice

__all__ = [
    "LocationAttender",
    "LocationSteps",
    "Mixer",
    "gaussian_attention",
    "leaky_clamp",
    "mean_position",
    "padding_bias",
    "softstair",
    "stack_steps",
    "straight_through_clamp",
]

Mixer = Callable[[int, torch.Tensor], torch.Tensor]
"""``mixer(i, lambda_i) -> alpha_i``: turns the location attention of the ``i``-th step of a call
(``[batch, source_len]``) into the final attention whose mean position feeds the next step."""


def softstair(x: torch.Tensor, sharpness: float = 20.0) -> torch.Tensor:
    """The soft staircase ``floor(x) + sigmoid(sharpness (x - 0.5 - floor(x)))`` (Dubois §5.1).

    Approximately integer-valued: on ``[n, n + 1)`` it rises from ``n + sigmoid(-sharpness/2)``
    to ``n + 1 - sigmoid(-sharpness/2)``, crossing ``n + 0.5`` at ``n + 0.5``. It is monotone
    non-decreasing and continuous up to jumps of ``2 sigmoid(-sharpness/2)`` (about ``9e-5`` for
    the paper's sharpness 20) at the integers. ``floor`` has zero gradient; the gradient flows
    through the sigmoid.
    """
    floor = torch.floor(x)
    return floor + torch.sigmoid(sharpness * (x - 0.5 - floor))


def straight_through_softstair(x: torch.Tensor, sharpness: float = 20.0) -> torch.Tensor:
    """:func:`softstair` in the forward pass, the identity's gradient in the backward pass.

    The exact soft staircase has almost no gradient on its plateaus (about ``1e-3`` at an
    integer for sharpness 20), so a step weight that starts on a plateau barely moves. A
    straight-through gradient (Bengio et al. 2013) lets it cross plateaus while the forward
    value stays (nearly) integer.
    """
    return x + (softstair(x, sharpness) - x).detach()


def straight_through_clamp(x: torch.Tensor) -> torch.Tensor:
    """``clamp(x, 0, 1)`` in the forward pass, the identity's gradient in the backward pass.

    With the leaky clamp, a ``mu`` pushed past the end of the source (e.g. two reference points
    summed, ``1 + 0.8``) gets only ``slope`` (0.01) of its gradient back, so a model can park its
    attention there and never leave (issue 6, Reversed Lookup Tables). The straight-through clamp
    (Bengio et al. 2013) keeps the forward value in ``[0, 1]`` and passes the whole gradient.
    """
    return x + (x.clamp(0.0, 1.0) - x).detach()


def leaky_clamp(x: torch.Tensor, slope: float = 0.01) -> torch.Tensor:
    """The identity on ``[0, 1]``, slope ``slope`` outside (Dubois §5.1: "a leaky clamping").

    Equal to the paper's two leaky ReLUs, ``1 - leaky_relu(1 - leaky_relu(x, slope), slope)``,
    computed as ``slope * x + (1 - slope) * clamp(x, 0, 1)`` in two kernels instead of four.
    """
    return torch.lerp(x, x.clamp(0.0, 1.0), 1.0 - slope)


def gaussian_attention(
    mu: torch.Tensor,
    sigma: torch.Tensor,
    relative_positions: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
) -> torch.Tensor:
    """``lambda`` ``[batch, source_len]``: Gaussian PDF at ``relative_positions``, normalised.

    ``mu`` and ``sigma`` are ``[batch]``. Computed as the softmax of the log-density (the PDF's
    normalising constant cancels), so padding gets exactly 0 and real keys sum to 1.
    """
    return _gaussian(
        mu, -0.5 / sigma**2, relative_positions, padding_bias(key_padding_mask, relative_positions)
    )


def padding_bias(key_padding_mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """``-inf`` on padding, 0 elsewhere: added to logits, it gives padding exactly zero weight."""
    if key_padding_mask is None:
        return torch.zeros_like(like)
    return torch.zeros_like(like).masked_fill(key_padding_mask, float("-inf"))


def _gaussian(
    mu: torch.Tensor, neg_half_precision: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Softmax over ``s`` of ``-(r_s - mu)^2 / (2 sigma^2)`` (+ the padding bias), few kernels."""
    distance = positions - mu.unsqueeze(-1)
    logits = torch.addcmul(bias, distance * distance, neg_half_precision.unsqueeze(-1))
    return torch.softmax(logits, dim=-1)


def stack_steps(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Stack per-step tensors ``[batch, ...]`` into ``[batch, steps, ...]`` (a view for 1 step)."""
    if len(tensors) == 1:
        return tensors[0].unsqueeze(1)
    return torch.stack(tensors, dim=1)


def mean_position(weights: torch.Tensor, relative_positions: torch.Tensor) -> torch.Tensor:
    """``sum_s alpha_s r_s``: the mean relative position of ``weights [batch, source_len]``."""
    return torch.linalg.vecdot(weights, relative_positions)


@dataclass
class LocationSteps:
    """What :meth:`LocationAttender.run` returns for a call with ``steps`` queries.

    ``location_attention`` is ``lambda`` and ``attention`` the final attention (``lambda`` itself
    without a mixer), both ``[batch, steps, source_len]``; ``variables`` are the location
    variables (see :class:`LocationAttender`); ``state`` is the next state.
    """

    location_attention: torch.Tensor
    attention: torch.Tensor
    variables: dict[str, torch.Tensor]
    state: AttentionState


@dataclass
class _Weighting:
    """The weighter's outputs for all steps of a call (each ``[batch, steps]``)."""

    sigma: torch.Tensor
    rho_previous: torch.Tensor
    rho_steps: torch.Tensor
    rho_bias: torch.Tensor
    rho_anchor: torch.Tensor | None
    hidden: torch.Tensor  # omega of the last step, [batch, weighter_hidden_dim]


STAIRCASES = {"exact": softstair, "straight_through": straight_through_softstair}
CLAMPS = ("leaky", "straight_through")
WEIGHTERS = ("gru", "feedforward")


def straight_through_gate(logits: torch.Tensor) -> torch.Tensor:
    """A binary gate: ``sigmoid(logits) > 0.5`` in the forward pass, the sigmoid's gradient in the
    backward pass (Bengio et al. 2013). Exactly 0 or 1, so a gated sum such as
    ``mu = rho_previous mean_alpha + steps / (n - 1) + rho_bias`` is exactly "previous position +
    k steps" at every length, not an approximation fitted to the training lengths."""
    soft = torch.sigmoid(logits)
    return soft + ((logits > 0).to(soft.dtype) - soft).detach()


GATES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "straight_through": straight_through_gate,
}
REFERENCES = ("gates", "choice")


def straight_through_one_hot(logits: torch.Tensor) -> torch.Tensor:
    """One-hot of the last dimension's argmax in the forward pass, the softmax's gradient in the
    backward pass (straight-through, Bengio et al. 2013)."""
    soft = torch.softmax(logits, dim=-1)
    hard = F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(soft.dtype)
    return soft + (hard - soft).detach()


class LocationAttender(Attender):
    """Location Attender (Dubois et al. 2020, §5.1, Figure 3; see the module docstring).

    Stateful: the weighter GRU and the mean position of the previous attention carry over steps.
    A call with several query steps loops over them (the recurrence needs it); the resize layer
    and the sigma / rho layers are applied to all steps at once.

    Weighter layers: ``resize`` (``query_dim -> resize_dim``), ``weighter`` (a one-layer GRU),
    ``sigma_layer`` (``-> 1``) and ``rho_layer`` (``-> 3``, outputs in the order
    ``[previous-mean gate, number of steps, bias gate]``).

    Initialisation: PyTorch's default. Nothing special is needed for a sensible start: the small
    initial ``rho`` logits give gates near 0.5 and ``softstair(~0) ~ 0`` steps, so
    ``mu_0 ~ 0.5`` (mid-sentence) and ``sigma_t ~ 0.27 / n_s`` (about a quarter of a word).

    State (flat dict; every tensor is ``[batch, ...]``):

    * ``"step"``, ``"source_lengths"``: the base state;
    * ``"hidden"`` ``[batch, weighter_hidden_dim]``: ``omega_{t-1}`` (``omega_{-1}`` is 0 or the
      learned initial vector);
    * ``"previous_mean"`` ``[batch]``: ``mean_alpha_{t-1}``, initially 0. A Mix Attender
      overwrites it with the mean position of its mixed attention (the ``mixer`` argument of
      :meth:`run`; :meth:`attention_mean` and :meth:`with_previous_mean` do it by hand);
    * ``"relative_positions"`` ``[batch, source_len]``: ``r_s`` (0 on padding); with ``n_s = 1``,
      ``r_0 = 0``;
    * ``"step_size"`` ``[batch]``: ``1 / (n_s - 1)``, and 1 when ``n_s = 1``;
    * ``"inverse_length"`` ``[batch]``: ``1 / n_s``.

    Variables (each ``[batch, steps]``): ``"mu"``, ``"sigma"``, ``"rho_previous"`` (gate on
    ``mean_alpha_{t-1}``), ``"rho_steps"`` (soft-staircase number of steps), ``"rho_bias"`` (gate
    on 1), ``"previous_mean"`` (the ``mean_alpha_{t-1}`` used at step ``t``); and
    ``"location_attention"`` ``[batch, steps, source_len]``.

    Options:
        resize_dim: output size of ``W_resize`` (default 64).
        weighter_hidden_dim: hidden size of the weighter GRU (default 64).
        min_sigma: the paper's ``min_sigma`` (default 0.27), added before dividing by ``n_s``.
        staircase_sharpness: the soft staircase's slope (default 20, the paper's).
        clamp_slope: the leaky clamp's slope outside ``[0, 1]`` (default 0.01).
        clamp_gradient: ``"leaky"`` (the paper's leaky clamp of ``mu``, default) or
            ``"straight_through"``: ``mu`` clamped to ``[0, 1]`` with the identity's gradient
            (:func:`straight_through_clamp`), so a ``mu`` past either end is pulled back.
        learn_initial_hidden: learn ``omega_{-1}`` instead of using zeros (default False; the
            paper does not say, zeros is the usual GRU start).
        weighter: ``"gru"`` (the paper's recurrent weighter, default) or ``"feedforward"``:
            ``omega_t = tanh(W_omega ReLU(W_resize q_t))``, which cannot count steps, so on
            longer inputs than seen in training its gates depend on the query alone (issue 6;
            see docs/results.md, "Beyond the paper: solving the <eos> problem").
        gates: ``"sigmoid"`` (the paper's, default) or ``"straight_through"``: binary gates
            ``rho_previous``, ``rho_bias`` with straight-through gradients
            (:func:`straight_through_gate`).
        content_anchor: add a fourth building block, the mean position of a content attention
            at the same step (``anchors`` of :meth:`run`), with its own gate ``rho_anchor``:
            ``mu_t = ... + rho_anchor_t mean_c_t``. The Mix Attender's ``combination="anchor"``
            uses it, so content finds a landmark (e.g. ``!``) and location steps from it.
        fixed_sigma: ``sigma_t = min_sigma / n_s`` (about a quarter of a word) at every step
            instead of a learned width: the attention stays on one word, so the glimpse cannot
            become a blurred summary of the whole source (a shortcut that does not extrapolate).
        max_sigma: an upper bound on the learned ``sigma_t n_s`` (in words; default none, as in
            the paper), another way to keep the attention from blurring over the source.
        reference: ``"gates"`` (the paper's independent gates, default) or ``"choice"``: exactly
            one reference point — the previous mean, the end (the bias 1), the content anchor or
            the start (0) — picked by a straight-through one-hot over ``rho_previous``,
            ``rho_bias``, ``rho_anchor`` and one more logit, so ``mu`` never sums two positions
            (and is never pushed past the end of the source by doing so).
    """

    stateful = True

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        resize_dim: int = 64,
        weighter_hidden_dim: int = 64,
        min_sigma: float = 0.27,
        staircase_sharpness: float = 20.0,
        clamp_slope: float = 0.01,
        clamp_gradient: str = "leaky",
        learn_initial_hidden: bool = False,
        staircase_gradient: str = "straight_through",
        initial_rho: tuple[float, float, float] | None = (1.0, 1.0, -2.0),
        weighter: str = "gru",
        gates: str = "sigmoid",
        content_anchor: bool = False,
        fixed_sigma: bool = False,
        max_sigma: float | None = None,
        reference: str = "gates",
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        name = type(self).__name__
        check_positive(
            name,
            resize_dim=resize_dim,
            weighter_hidden_dim=weighter_hidden_dim,
            min_sigma=min_sigma,
            staircase_sharpness=staircase_sharpness,
        )
        if not 0.0 <= clamp_slope < 1.0:
            raise ValueError(f"{name}: option clamp_slope must be in [0, 1), got {clamp_slope!r}")
        self.min_sigma = float(min_sigma)
        self.staircase_sharpness = float(staircase_sharpness)
        self.clamp_slope = float(clamp_slope)
        self.resize = nn.Linear(query_dim, resize_dim)
        check_choice("weighter", weighter, WEIGHTERS, owner=name)
        check_choice("gates", gates, GATES, owner=name)
        check_choice("reference", reference, REFERENCES, owner=name)
        check_choice("staircase_gradient", staircase_gradient, STAIRCASES, owner=name)
        check_choice("clamp_gradient", clamp_gradient, CLAMPS, owner=name)
        self.clamp: Callable[[torch.Tensor], torch.Tensor] = (
            functools.partial(leaky_clamp, slope=self.clamp_slope)
            if clamp_gradient == "leaky"
            else straight_through_clamp
        )
        self.gate = GATES[gates]
        self.weighter_hidden_dim = weighter_hidden_dim
        self.weighter: nn.Module = (
            nn.GRU(resize_dim, weighter_hidden_dim, batch_first=True)
            if weighter == "gru"
            else nn.Linear(resize_dim, weighter_hidden_dim)
        )
        self.sigma_layer: nn.Linear | None = None if fixed_sigma else nn.Linear(weighter_hidden_dim, 1)
        self.content_anchor = content_anchor
        if max_sigma is not None and max_sigma < min_sigma:
            raise ValueError(f"{name}: option max_sigma must be >= min_sigma, got {max_sigma!r}")
        self.max_sigma = max_sigma
        self.reference = reference
        # [previous-mean gate, steps, bias gate, (anchor gate), (start logit for reference="choice")]
        outputs = 3 + int(content_anchor) + int(reference == "choice")
        self.rho_layer = nn.Linear(weighter_hidden_dim, outputs)
        self.initial_hidden: nn.Parameter | None = (
            nn.Parameter(torch.zeros(weighter_hidden_dim)) if learn_initial_hidden else None
        )
        self.staircase = STAIRCASES[staircase_gradient]
        if initial_rho is not None:
            if not 3 <= len(initial_rho) <= self.rho_layer.out_features:
                raise ValueError(
                    f"{name}: option initial_rho needs 3 to {self.rho_layer.out_features} values "
                    "(previous-mean gate, steps, bias gate, then the anchor gate with content_anchor "
                    f"and the start logit with reference='choice'), got {initial_rho!r}"
                )
            with torch.no_grad():
                given = torch.tensor(initial_rho, dtype=self.rho_layer.bias.dtype)
                self.rho_layer.bias[: len(given)].copy_(given)

    # ----------------------------------------------------------------------------------- state

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        batch = keys.size(0)
        lengths = lengths.to(keys.dtype)
        step_size = 1.0 / (lengths - 1.0).clamp_min(1.0)
        return {
            "hidden": self._initial_hidden(batch, keys),
            "previous_mean": keys.new_zeros(batch),
            "relative_positions": source_positions(keys, key_padding_mask) * step_size[:, None],
            "step_size": step_size,
            "inverse_length": 1.0 / lengths,
        }

    def _initial_hidden(self, batch: int, keys: torch.Tensor) -> torch.Tensor:
        if self.initial_hidden is None:
            return keys.new_zeros(batch, self.weighter_hidden_dim)
        return self.initial_hidden.to(keys.dtype).expand(batch, -1)

    def attention_mean(self, weights: torch.Tensor, state: AttentionState) -> torch.Tensor:
        """The mean relative position of ``weights [batch, source_len]`` (or ``[batch, steps,
        source_len]``) for the source of ``state``."""
        positions = state["relative_positions"]
        if weights.dim() == 3:
            positions = positions.unsqueeze(1)
        return mean_position(weights, positions)

    @staticmethod
    def with_previous_mean(state: AttentionState, previous_mean: torch.Tensor) -> AttentionState:
        """A copy of ``state`` whose next step builds ``mu`` on ``previous_mean [batch]``."""
        return {**state, "previous_mean": previous_mean}

    # ------------------------------------------------------------------------------- computing

    def _attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> AttentionOutput:
        steps = self.run(query, key_padding_mask, state)
        return AttentionOutput(
            glimpse=weighted_sum(steps.attention, values),
            weights=steps.attention,
            state=steps.state,
            variables=steps.variables,
        )

    def run(
        self,
        query: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
        mixer: Mixer | None = None,
        anchors: torch.Tensor | None = None,
    ) -> LocationSteps:
        """Location attention for ``query [batch, steps, query_dim]``, one step after the other.

        ``mixer(i, lambda_i)`` (default: identity) gives the final attention of step ``i``; its
        mean position is the next step's ``mean_alpha``. The Mix Attender passes its convex
        combination here, so the recurrence follows the mixed attention (Dubois §5.2).
        """
        weighting = self._weigh(query, state)
        positions = state["relative_positions"]
        bias = padding_bias(key_padding_mask, positions)
        neg_half_precision = -0.5 / weighting.sigma**2  # [B, T]
        partial_mu = torch.addcmul(weighting.rho_bias, weighting.rho_steps, state["step_size"][:, None])
        if self.content_anchor:
            if anchors is None:
                raise ValueError(
                    f"{type(self).__name__} with content_anchor=True needs anchors [batch, steps]"
                )
            assert weighting.rho_anchor is not None  # the weighter has an anchor gate
            partial_mu = torch.addcmul(partial_mu, weighting.rho_anchor, anchors)
        previous = state["previous_mean"]
        mus: list[torch.Tensor] = []
        previous_means: list[torch.Tensor] = []
        lambdas: list[torch.Tensor] = []
        finals: list[torch.Tensor] = []
        # Split the per-step inputs once (one op each) instead of slicing them at every step.
        steps = zip(partial_mu.unbind(1), weighting.rho_previous.unbind(1), neg_half_precision.unbind(1))
        for i, (partial, gate, precision) in enumerate(steps):
            mu = self.clamp(torch.addcmul(partial, gate, previous))
            lam = _gaussian(mu, precision, positions, bias)
            final = lam if mixer is None else mixer(i, lam)
            previous_means.append(previous)
            previous = mean_position(final, positions)
            mus.append(mu)
            lambdas.append(lam)
            finals.append(final)
        location_attention = stack_steps(lambdas)
        variables = {
            "mu": stack_steps(mus),
            "sigma": weighting.sigma,
            "rho_previous": weighting.rho_previous,
            "rho_steps": weighting.rho_steps,
            "rho_bias": weighting.rho_bias,
            **(
                {"rho_anchor": weighting.rho_anchor, "anchor": anchors}
                if anchors is not None and weighting.rho_anchor is not None
                else {}
            ),
            "previous_mean": stack_steps(previous_means),
            "location_attention": location_attention,
        }
        next_state = advance_state(state, query.size(1), hidden=weighting.hidden, previous_mean=previous)
        attention = location_attention if mixer is None else stack_steps(finals)
        return LocationSteps(location_attention, attention, variables, next_state)

    def _weigh(self, query: torch.Tensor, state: AttentionState) -> _Weighting:
        """Run the weighter over all steps: ``sigma_t`` and the three activated ``rho_t``."""
        resized = F.relu(self.resize(query))  # [B, T, R]
        if isinstance(self.weighter, nn.GRU):
            # The weighter's input does not depend on the attention, so one fused GRU call covers
            # all steps; only mu's dependence on the previous attention needs a Python loop.
            omega, last = self.weighter(resized, state["hidden"].unsqueeze(0).contiguous())  # [B, T, H]
            hidden = last.squeeze(0)
        else:  # feed-forward weighter: no memory of earlier steps, so no step counter
            omega, hidden = torch.tanh(self.weighter(resized)), state["hidden"]
        if self.sigma_layer is None:
            sigma = omega.new_full(omega.shape[:-1], self.min_sigma)
        else:
            sigma = F.relu(self.sigma_layer(omega).squeeze(-1)) + self.min_sigma
            if self.max_sigma is not None:
                sigma = sigma.clamp(max=self.max_sigma)
        rho = self.rho_layer(omega)  # [B, T, 3 (+1 anchor) (+1 start)]
        if self.reference == "choice":
            # one reference point: previous mean, end (the bias 1), anchor, or start (0)
            choice = straight_through_one_hot(torch.cat([rho[..., :1], rho[..., 2:]], dim=-1))
            gates = [choice[..., 0], choice[..., 1], *([choice[..., 2]] if self.content_anchor else [])]
        else:
            gates = [self.gate(rho[..., 0]), self.gate(rho[..., 2])]
            if self.content_anchor:
                gates.append(self.gate(rho[..., 3]))
        return _Weighting(
            sigma=sigma * state["inverse_length"][:, None],
            rho_previous=gates[0],
            rho_steps=self.staircase(rho[..., 1], self.staircase_sharpness),
            rho_bias=gates[1],
            rho_anchor=gates[2] if self.content_anchor else None,
            hidden=hidden,
        )
