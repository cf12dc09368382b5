"""The Mix Attender (Dubois et al. 2020, §5.2, Figure 5).

A convex combination of a content attention ``c_t`` (eq. 2–3) and the Location Attender's
``lambda_t`` (§5.1)::

    alpha_t = gamma_t lambda_t + (1 - gamma_t) c_t,    gamma_t = sigmoid(W_gamma q_t)

The location attender's ``mean_alpha_{t-1}`` building block is the mean relative position of the
*mixed* attention ``alpha_{t-1}``: that is what lets the noisy-start task work (content attention
finds the token after "!", then location attention continues from there with "+1 step").
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlab.attention.base import (
    Attender,
    AttentionOutput,
    AttentionState,
    construct,
    prefixed_state,
    unprefixed_state,
    weighted_sum,
)
from attnlab.attention.content import CONTENT_ATTENDERS, ScoringAttender, advance_state
from attnlab.attention.location import GATES, LocationAttender
from attnlab.checks import check_choice

__all__ = ["CONTENT_ATTENDERS", "MixAttender"]

COMBINATIONS = ("mix", "anchor")


class MixAttender(Attender):
    """Mix Attender (Dubois et al. 2020, §5.2): ``alpha_t = gamma_t lambda_t + (1 - gamma_t) c_t``.

    ``gamma_t = sigmoid(W_gamma q_t)`` (``mix_layer``, ``query_dim -> 1``, default init) is the
    weight of the location attention: ``gamma -> 1`` gives the Location Attender's ``lambda_t``,
    ``gamma -> 0`` the content attention. The content attention is computed for all steps of a
    call at once; the location recurrence then loops over the steps, each step's
    ``mean_alpha_{t-1}`` being the mean relative position of the previous *mixed* attention.

    State: a flat dict (as the base class documents), the sub-attenders' states stored under
    prefixed keys: ``"step"`` and ``"source_lengths"`` (shared with both sub-attenders), the
    Location Attender's own keys as ``"location.<key>"`` (``"location.hidden"``,
    ``"location.previous_mean"``, ``"location.relative_positions"``, ``"location.step_size"``,
    ``"location.inverse_length"``) and the content attender's as ``"content.<key>"`` (e.g.
    ``"content.projected_keys"`` for the additive one). ``"location.previous_mean"`` holds the
    mean position of the last mixed attention.

    Variables: all of the Location Attender's (``"mu"``, ``"sigma"``, ``"rho_previous"``,
    ``"rho_steps"``, ``"rho_bias"``, ``"previous_mean"``, ``"location_attention"``) plus
    ``"mix_weight"`` (``gamma_t``, ``[batch, steps]``) and ``"content_attention"``
    (``[batch, steps, source_len]``).

    Options:
        content: the content attender, one of ``"additive"``, ``"multiplicative"`` (default, as it
            needs no ``query_dim == key_dim``) and ``"scaled_dot"``.
        content_options: keyword options of the content attender (e.g. ``{"hidden_dim": 32}``).
        location_options: keyword options of the :class:`LocationAttender`.
        mix_gate: ``"sigmoid"`` (the paper's, default) or ``"straight_through"``: ``gamma_t`` is
            exactly 0 or 1 (pure content or pure location attention) with the sigmoid's gradient,
            so no residue of content attention shifts the location recurrence on long inputs.
        combination: ``"mix"`` (the paper's convex combination, default) or ``"anchor"``: the
            content attention is not mixed in but anchors the location attention — its mean
            position is a fourth gated building block of ``mu_t`` (the Location Attender's
            ``content_anchor``), so one step can read "the word after ``!``" exactly, at any
            length. There is no ``mix_layer`` in this mode.
    """

    stateful = True

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        content: str = "multiplicative",
        content_options: dict[str, Any] | None = None,
        location_options: dict[str, Any] | None = None,
        mix_gate: str = "sigmoid",
        combination: str = "mix",
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if content not in CONTENT_ATTENDERS:
            raise ValueError(
                f"{type(self).__name__}: unknown content attender {content!r}; "
                f"choose one of {sorted(CONTENT_ATTENDERS)}"
            )
        self.content_name = content
        self.content: ScoringAttender = construct(
            CONTENT_ATTENDERS[content], query_dim, key_dim, value_dim, content_options
        )
        check_choice("combination", combination, COMBINATIONS, owner=type(self).__name__)
        check_choice("mix_gate", mix_gate, GATES, owner=type(self).__name__)
        self.combination = combination
        if combination == "anchor":
            location_options = {**(location_options or {}), "content_anchor": True}
        self.location: LocationAttender = construct(
            LocationAttender, query_dim, key_dim, value_dim, location_options
        )
        self.mix_layer: nn.Linear | None = nn.Linear(query_dim, 1) if combination == "mix" else None
        self.mix_gate = GATES[mix_gate]

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        return {
            **prefixed_state("location", self.location._init_state(keys, key_padding_mask, lengths)),
            **prefixed_state("content", self.content._init_state(keys, key_padding_mask, lengths)),
        }

    def _attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> AttentionOutput:
        content_state = unprefixed_state("content", state)
        location_state = unprefixed_state("location", state)
        content_attention = self.content.attention(query, keys, key_padding_mask, content_state)
        if self.combination == "anchor":
            # the content attention's mean position is one more building block of mu; the
            # attention is the location attention alone
            anchors = self.location.attention_mean(content_attention, location_state)
            steps = self.location.run(query, key_padding_mask, location_state, anchors=anchors)
            mixing: dict[str, torch.Tensor] = {}
        else:
            assert self.mix_layer is not None
            mix_weight = self.mix_gate(self.mix_layer(query)).squeeze(-1)  # [B, T]
            contents = content_attention.unbind(1)
            gammas = mix_weight.unsqueeze(-1).unbind(1)

            def mix(i: int, location_attention: torch.Tensor) -> torch.Tensor:
                # gamma * lambda + (1 - gamma) * content, in one kernel; in the location
                # attention's dtype, which autocast (training.precision=bf16) may not give the others
                dtype = location_attention.dtype
                return torch.lerp(contents[i].to(dtype), location_attention, gammas[i].to(dtype))

            steps = self.location.run(query, key_padding_mask, location_state, mix)
            mixing = {"mix_weight": mix_weight}
        next_state = advance_state(
            state,
            query.size(1),
            **prefixed_state("location", steps.state),
            **prefixed_state("content", advance_state(content_state, query.size(1))),
        )
        variables = {**steps.variables, **mixing, "content_attention": content_attention}
        return AttentionOutput(
            glimpse=weighted_sum(steps.attention, values),
            weights=steps.attention,
            state=next_state,
            variables=variables,
        )
