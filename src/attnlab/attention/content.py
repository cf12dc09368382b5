"""Content attenders: weights from a match score between each key and the query.

Dubois et al. (2020), §4.1, eq. 2–3::

    gamma_t = softmax_s(score(k_s, q_t))
    score(k_s, q_t) = u^T tanh(W_k k_s + W_q q_t)   Additive (Bahdanau et al. 2015)
                    = k_s^T W q_t                   Multiplicative (Luong et al. 2015, "general")
                    = k_s^T q_t / sqrt(d)           Scaled dot product (Vaswani et al. 2017)

The extracted eq. 3 writes the additive score as ``u^T tanh([W k_s; W q_t])`` (a concatenation);
we use Bahdanau's original form, the sum of the two projections inside the tanh, which is the
usual reading and the one the paper's baselines cite.

These attenders only depend on the current query, so a call with ``steps`` queries is computed in
one batched pass; the only state that changes between steps is the step counter.

This module also holds the helpers shared by every attender module: :class:`ScoringAttender`
(attenders whose weights are a masked softmax of a score, eq. 2) and :func:`advance_state`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.attention.base import (
    Attender,
    AttentionOutput,
    AttentionState,
    masked_softmax,
    weighted_sum,
)

__all__ = [
    "CONTENT_ATTENDERS",
    "AdditiveAttender",
    "MultiplicativeAttender",
    "ScaledDotAttender",
    "ScoringAttender",
    "advance_state",
    "check_positive",
    "check_same_dims",
]


def advance_state(state: AttentionState, steps: int, **updates: object) -> AttentionState:
    """A new state dict: ``state`` with ``"step"`` advanced by ``steps`` and ``updates`` applied.

    The input dict is never mutated, so a caller may keep (and re-use) an earlier state.
    """
    new_state = dict(state)
    new_state.update(updates)
    new_state["step"] = state["step"] + steps
    return new_state


def check_positive(owner: str, **values: float) -> None:
    """Raise a ``ValueError`` naming ``owner`` for every option that is not strictly positive."""
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{owner}: option {name} must be > 0, got {value!r}")


class ScoringAttender(Attender):
    """An attender whose weights are the masked softmax of a ``[batch, steps, source_len]`` score.

    Dubois et al. (2020), eq. 2. Subclasses implement :meth:`score`; :meth:`attention` returns the
    weights without computing a glimpse (the Mix Attender uses it for its content part).
    """

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        """Unnormalised scores ``[batch, steps, source_len]`` for ``query [batch, steps, dim]``."""
        raise NotImplementedError

    def attention(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> torch.Tensor:
        """The weights ``[batch, steps, source_len]``: exactly 0 on padding, summing to 1."""
        return masked_softmax(self.score(query, keys, state), key_padding_mask)

    def _attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> AttentionOutput:
        weights = self.attention(query, keys, key_padding_mask, state)
        return AttentionOutput(
            glimpse=weighted_sum(weights, values),
            weights=weights,
            state=advance_state(state, query.size(1)),
        )


class AdditiveAttender(ScoringAttender):
    """Additive attention (Bahdanau et al. 2015; Dubois et al. 2020, eq. 2–3, "Additive").

    ``score(k_s, q_t) = u^T tanh(W_k k_s + W_q q_t + b)``. ``W_k`` has no bias (``W_q``'s bias
    ``b`` already covers it) and ``u`` has none (a constant does not change a softmax).

    State: ``"projected_keys"`` ``[batch, source_len, hidden_dim]``, ``W_k k_s`` computed once per
    source in :meth:`initial_state`.

    Options:
        hidden_dim: size of the tanh layer (default ``key_dim``).
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        hidden_dim: int | None = None,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.hidden_dim = key_dim if hidden_dim is None else hidden_dim
        check_positive(type(self).__name__, hidden_dim=self.hidden_dim)
        self.key_layer = nn.Linear(key_dim, self.hidden_dim, bias=False)
        self.query_layer = nn.Linear(query_dim, self.hidden_dim)
        self.energy_layer = nn.Linear(self.hidden_dim, 1, bias=False)

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        return {"projected_keys": self.key_layer(keys)}

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        projected_keys = state["projected_keys"].unsqueeze(1)  # [B, 1, S, H]
        projected_query = self.query_layer(query).unsqueeze(2)  # [B, T, 1, H]
        return self.energy_layer(torch.tanh(projected_keys + projected_query)).squeeze(-1)


class MultiplicativeAttender(ScoringAttender):
    """Multiplicative ("general") attention (Luong et al. 2015; Dubois et al. 2020, eq. 2–3).

    ``score(k_s, q_t) = k_s^T W q_t`` with ``W: query_dim -> key_dim`` and no bias (Luong's form;
    a bias ``b`` would only add the key-dependent term ``k_s^T b``).

    State: only the base ``"step"`` / ``"source_lengths"``.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.query_layer = nn.Linear(query_dim, key_dim, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        return torch.bmm(self.query_layer(query), keys.transpose(1, 2))


class ScaledDotAttender(ScoringAttender):
    """Scaled dot-product attention (Vaswani et al. 2017; Dubois et al. 2020, eq. 2–3).

    ``score(k_s, q_t) = k_s^T q_t / sqrt(d)`` with ``d = key_dim``. Parameter-free, so it requires
    ``query_dim == key_dim``.

    State: only the base ``"step"`` / ``"source_lengths"``.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        check_same_dims(type(self).__name__, query_dim, key_dim)
        super().__init__(query_dim, key_dim, value_dim)
        self.scale = 1.0 / math.sqrt(key_dim)

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        return torch.bmm(query * self.scale, keys.transpose(1, 2))


def check_same_dims(owner: str, query_dim: int, key_dim: int) -> None:
    """Raise a ``ValueError`` unless ``query_dim == key_dim`` (needed by parameter-free scores)."""
    if query_dim != key_dim:
        raise ValueError(
            f"{owner} compares queries and keys directly, so it needs query_dim == key_dim; "
            f"got query_dim={query_dim}, key_dim={key_dim}"
        )


CONTENT_ATTENDERS: dict[str, type[ScoringAttender]] = {
    "additive": AdditiveAttender,
    "multiplicative": MultiplicativeAttender,
    "scaled_dot": ScaledDotAttender,
}
"""The content attenders by name, for attenders that contain one (Mix, Shift)."""
