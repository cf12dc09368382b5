"""Attenders with sinusoidal positional encodings (Dubois et al. 2020, §4.2, eq. 4).

* :class:`TransformerAttender`: absolute encodings added to keys and query (Vaswani et al. 2017).
* :class:`TransformerXLAttender`: relative encodings with two learned biases (Dai et al. 2019).

Positions. A source position ``s`` is the index of a key among the *real* (unpadded) keys of its
sequence, ``0 .. n_s - 1`` (:func:`source_positions`); with the usual right padding this is the
tensor index. A query's position ``t`` is the absolute decoding step: ``state["step"] + i`` for
the ``i``-th query of a call, so threading the state through single steps equals one call with
all the steps.

:func:`sinusoidal_encoding` is the one implementation of the sinusoids in attnlab; reuse it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.attention.base import AttentionState
from attnlab.attention.content import ScoringAttender, check_positive, check_same_dims

__all__ = [
    "TransformerAttender",
    "TransformerXLAttender",
    "encode_source_positions",
    "sinusoidal_encoding",
    "source_positions",
    "step_positions",
]

_MAX_WAVELENGTH = 10000.0


def sinusoidal_encoding(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal encodings of (float) ``positions [...]``, shape ``[..., dim]``.

    Vaswani et al. (2017), §3.5: ``p[2i] = sin(x w_i)``, ``p[2i+1] = cos(x w_i)`` with
    ``w_i = 10000^(-2i/dim)``. For an odd ``dim`` the last (cosine) entry is dropped. The
    encodings have the dtype and device of ``positions`` (integer positions give float32).
    """
    if not positions.is_floating_point():
        positions = positions.to(torch.get_default_dtype())
    pairs = (dim + 1) // 2
    exponents = torch.arange(pairs, device=positions.device, dtype=positions.dtype) * (2.0 / dim)
    frequencies = torch.pow(_MAX_WAVELENGTH, -exponents)
    angles = positions.unsqueeze(-1) * frequencies
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)[..., :dim]


def source_positions(keys: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """The index ``s`` of each key among its sequence's real keys, ``[batch, source_len]``.

    Real keys get ``0 .. n_s - 1`` in order (whatever side the padding is on); padded keys get 0.
    Float, with the dtype and device of ``keys``.
    """
    batch, source_len = keys.shape[:2]
    if key_padding_mask is None:
        positions = torch.arange(source_len, device=keys.device, dtype=keys.dtype)
        return positions.expand(batch, source_len)
    real = (~key_padding_mask).to(keys.dtype)
    return (real.cumsum(dim=1) - 1.0) * real


def encode_source_positions(
    keys: torch.Tensor, key_padding_mask: torch.Tensor | None, dim: int
) -> torch.Tensor:
    """Sinusoidal encodings of :func:`source_positions`, ``[batch, source_len, dim]``.

    Encodes the ``source_len`` possible positions once and gathers them, rather than computing
    ``batch x source_len x dim`` sines.
    """
    batch, source_len = keys.shape[:2]
    table = sinusoidal_encoding(torch.arange(source_len, device=keys.device, dtype=keys.dtype), dim)
    if key_padding_mask is None:
        return table.expand(batch, source_len, dim)
    return table[source_positions(keys, key_padding_mask).long()]


def step_positions(state: AttentionState, steps: int, like: torch.Tensor) -> torch.Tensor:
    """Absolute decoding steps ``state["step"] + i`` for ``i < steps``, ``[steps]``, float.

    Built from the Python int ``state["step"]``, so there is no host-device synchronisation.
    """
    start = state["step"]
    return torch.arange(start, start + steps, device=like.device, dtype=like.dtype)


class TransformerAttender(ScoringAttender):
    """Transformer attention with absolute sinusoidal encodings (Dubois et al. 2020, eq. 4, top).

    ``score(k_s, q_t) = (k_s + p_s)^T (q_t + p_t) / sqrt(d)`` where ``p`` are the sinusoidal
    encodings of dimension ``d = key_dim`` (:func:`sinusoidal_encoding`), ``s`` the source position
    and ``t`` the absolute decoding step (``state["step"] + i``). Parameter-free, so it requires
    ``query_dim == key_dim``. As in eq. 4 the encodings are added to the keys and query only for
    scoring: the glimpse is the weighted sum of the unchanged values.

    State: ``"positioned_keys"`` ``[batch, source_len, key_dim]``, ``k_s + p_s`` computed once per
    source.
    """

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        check_same_dims(type(self).__name__, query_dim, key_dim)
        super().__init__(query_dim, key_dim, value_dim)
        self.scale = 1.0 / math.sqrt(key_dim)

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        encodings = encode_source_positions(keys, key_padding_mask, self.key_dim)
        return {"positioned_keys": keys + encodings}

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        steps = step_positions(state, query.size(1), like=query)
        positioned_query = query + sinusoidal_encoding(steps, self.query_dim)  # [B, T, d]
        return torch.bmm(positioned_query * self.scale, state["positioned_keys"].transpose(1, 2))


class TransformerXLAttender(ScoringAttender):
    """Transformer-XL attention with relative encodings (Dai et al. 2019, §3.3; Dubois eq. 4).

    Following Dai et al.'s decomposition (their terms (a)+(c) and (b)+(d))::

        score(k_s, q_t) = [(W_q q_t + u)^T W_k k_s + (W_q q_t + v)^T W_R R_{s-t}] / sqrt(d_a)

    where ``R_{s-t}`` is the sinusoidal encoding (:func:`sinusoidal_encoding`) of the relative
    position ``s - t`` (source position minus absolute decoding step), ``u`` and ``v`` are learned
    biases (initialised to 0) and ``d_a = attention_dim``. Dubois' eq. 4 writes a single bias
    ``b``; we keep Dai's two. The projections have no bias (``u``, ``v`` play that role).

    ``R`` has dimension ``key_dim`` rounded up to an even number (``W_R`` projects it to
    ``attention_dim``). Implementation: since ``R_{s-t}`` is ``R_s`` with each (sin, cos) pair
    rotated by the angle ``-w_i t``, ``z^T R_{s-t} = (rot_t z)^T R_s``; so the source encodings
    ``R_s`` are computed once per source and each step only rotates ``z = W_R^T (W_q q_t + v)``,
    a ``[batch, steps, dim]`` operation, instead of encoding ``batch x steps x source_len``
    offsets.

    State: ``"projected_keys"`` ``[batch, source_len, attention_dim]`` (``W_k k_s``) and
    ``"source_encodings"`` ``[batch, source_len, encoding_dim]`` (``R_s``).

    Options:
        attention_dim: size of the projected query / key space (default ``key_dim``).
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        attention_dim: int | None = None,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.attention_dim = key_dim if attention_dim is None else attention_dim
        check_positive(type(self).__name__, attention_dim=self.attention_dim)
        self.encoding_dim = key_dim + key_dim % 2
        self.scale = 1.0 / math.sqrt(self.attention_dim)
        self.query_layer = nn.Linear(query_dim, self.attention_dim, bias=False)
        self.key_layer = nn.Linear(key_dim, self.attention_dim, bias=False)
        self.position_layer = nn.Linear(self.encoding_dim, self.attention_dim, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(self.attention_dim))
        self.position_bias = nn.Parameter(torch.zeros(self.attention_dim))

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        return {
            "projected_keys": self.key_layer(keys),
            "source_encodings": encode_source_positions(keys, key_padding_mask, self.encoding_dim),
        }

    def score(self, query: torch.Tensor, keys: torch.Tensor, state: AttentionState) -> torch.Tensor:
        projected_query = self.query_layer(query)  # [B, T, A]
        content = torch.bmm(projected_query + self.content_bias, state["projected_keys"].transpose(1, 2))
        # z_t = W_R^T (W_q q_t + v), so that z_t^T R = (W_q q_t + v)^T W_R R.
        position_query = (projected_query + self.position_bias) @ self.position_layer.weight
        steps = step_positions(state, query.size(1), like=query)
        step_encodings = sinusoidal_encoding(steps, self.encoding_dim)
        shifted = shift_encoding_query(position_query, step_encodings)
        position = torch.bmm(shifted, state["source_encodings"].transpose(1, 2))
        return (content + position) * self.scale


def shift_encoding_query(query: torch.Tensor, step_encodings: torch.Tensor) -> torch.Tensor:
    """Rotate ``query [..., steps, 2m]`` so that ``rot(z)^T R_s == z^T R_{s-t}``.

    ``step_encodings [steps, 2m]`` are the sinusoidal encodings of the steps ``t``. With
    ``(a_i, b_i)`` the (sin, cos) pair of ``z`` at frequency ``w_i``::

        a sin(w(s-t)) + b cos(w(s-t))
            = sin(ws) (a cos(wt) + b sin(wt)) + cos(ws) (b cos(wt) - a sin(wt))
    """
    sin_t, cos_t = step_encodings[..., 0::2], step_encodings[..., 1::2]
    a, b = query[..., 0::2], query[..., 1::2]
    return torch.stack((a * cos_t + b * sin_t, b * cos_t - a * sin_t), dim=-1).flatten(-2)
