"""Positional schemes for Transformer self-attention (:mod:`attnlab.models.transformer`).

Each scheme tells a Transformer where its tokens are; :data:`POSITIONAL_SCHEMES` names them:

* ``"sinusoidal"``: absolute sinusoidal encodings added to the embeddings (Vaswani et al. 2017,
  §3.5; :func:`attnlab.attention.positional.sinusoidal_encoding`).
* ``"learned"``: a learned table of absolute position embeddings added to the embeddings (Gehring
  et al. 2017; Devlin et al. 2019). It has ``max_positions`` rows and refuses longer sequences.
* ``"relative"``: Shaw et al. (2018) relative position representations: learned embeddings
  ``a_{j-i}`` of the clipped offset ``clip(j - i, -k, k)`` (``k = max_relative_distance``), shared
  by the heads of a layer, added to the keys for scoring, ``e_ij = q_i (k_j + a_{j-i})^T / sqrt(d)``
  (their eq. 4; the value term ``a^V`` is left out, which their ablation found unnecessary).
* ``"transformer_xl"``: Transformer-XL's relative scheme (Dai et al. 2019, §3.3): per head
  ``e_ij = [q_i^T k_j + u^T k_j + (q_i + v)^T W_R R_{i-j}] / sqrt(d)`` with ``R`` the sinusoidal
  encoding (of dimension ``d_model``, rounded up to even) of the offset ``i - j`` and learned
  ``u``, ``v`` (initialised to 0) and ``W_R``. Unlike Shaw's, it is not clipped.
* ``"rope"``: rotary position embeddings (Su et al. 2021): each (even, odd) pair of a head's
  query and key is rotated by the angle ``p theta_i``, ``theta_i = 10000^(-2i/d)``, so
  ``q_m^T k_n`` depends on ``m - n`` only.
* ``"alibi"``: attention with linear biases (Press et al. 2022): ``-m_h |i - j|`` added to the
  scores of head ``h``, with the geometric slopes :func:`alibi_slopes`. In the (bidirectional)
  encoder the distance is ``|i - j|`` (as x-transformers does; Press et al. define the causal case
  only), so an encoder layer cannot tell left from right: reversing the positions of a sequence
  leaves its scores unchanged. In the causal decoder it is ``i - j >= 0``, Press et al.'s.
* ``"none"``: no positional information (NoPE; Kazemnejad et al. 2023). A causal decoder can still
  infer positions from its mask; an encoder without positions sees a bag of words.

Positions are ranks among the real (unpadded) tokens (:func:`attnlab.attention.positional.
source_positions`), so any padding layout gives the same encodings to the real tokens.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.attention.positional import sinusoidal_encoding
from attnlab.checks import check_choice

__all__ = [
    "ABSOLUTE_SCHEMES",
    "POSITIONAL_SCHEMES",
    "AbsolutePositions",
    "SelfAttentionPositions",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
]

POSITIONAL_SCHEMES = ("sinusoidal", "learned", "relative", "transformer_xl", "rope", "alibi", "none")
ABSOLUTE_SCHEMES = ("sinusoidal", "learned")


class PositionTableError(ValueError):
    """A sequence longer than a ``learned`` position table: an input the trained model cannot read
    (bad input, not a bug; the command line reports it as one line)."""


def check_scheme(scheme: str) -> None:
    check_choice("positional", scheme, POSITIONAL_SCHEMES)


def alibi_slopes(heads: int) -> torch.Tensor:
    """The ALiBi head slopes of Press et al. (2022, §3 and their code), ``[heads]``.

    For ``n`` a power of 2: the geometric sequence ``2^(-8/n), 2^(-16/n), ..., 2^(-8)``. Otherwise
    the slopes of the largest power of two ``m < n`` followed by every other slope of ``2m``, the
    first ``n - m`` of them.
    """
    if heads < 1:
        raise ValueError(f"heads must be >= 1, got {heads}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if heads & (heads - 1) == 0:
        return torch.tensor(power_of_two(heads))
    closest = 2 ** math.floor(math.log2(heads))
    return torch.tensor(power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest])


def alibi_bias(
    slopes: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor
) -> torch.Tensor:
    """``-m_h |i - j|`` ``[batch, heads, queries, keys]`` for positions ``[batch, queries]``,
    ``[batch, keys]`` (in a causal decoder every unmasked ``j <= i``, so this is ``-m_h (i - j)``)."""
    distance = (query_positions.unsqueeze(-1) - key_positions.unsqueeze(-2)).abs()  # [B, Q, K]
    return -slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [batch, heads, steps, dim]`` at ``positions [batch, steps]`` (Su et al. 2021, eq. 34).

    The pair ``(x_2i, x_2i+1)`` turns by ``p theta_i`` with ``theta_i = 10000^(-2i/dim)``: the
    sinusoids of :func:`sinusoidal_encoding`, so ``rope(q, m)^T rope(k, n) = q^T R_(n-m) k``.
    ``dim`` must be even.
    """
    encodings = sinusoidal_encoding(positions.to(x.dtype), x.size(-1)).unsqueeze(1)  # [B, 1, T, D]
    sin, cos = encodings[..., 0::2], encodings[..., 1::2]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class AbsolutePositions(nn.Module):
    """Absolute encodings added to token embeddings: ``sinusoidal`` or ``learned`` (else nothing)."""

    def __init__(self, scheme: str, dim: int, max_positions: int) -> None:
        super().__init__()
        check_scheme(scheme)
        self.scheme, self.dim, self.max_positions = scheme, dim, max_positions
        self.table = nn.Embedding(max_positions, dim) if scheme == "learned" else None
        if self.table is not None:
            nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, embedded: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``embedded [batch, steps, dim]`` plus the encodings of ``positions [batch, steps]``."""
        if self.scheme == "sinusoidal":
            return embedded + sinusoidal_encoding(positions.to(embedded.dtype), self.dim)
        if self.table is not None:
            longest = positions.size(1) if positions.numel() == 0 else int(positions.max()) + 1
            if longest > self.max_positions:
                raise PositionTableError(
                    f"positional='learned' has a table of max_positions={self.max_positions} "
                    f"positions, and a sequence needs position {longest - 1}; raise max_positions "
                    "(untrained rows) or use a relative scheme (relative, rope, alibi, none)"
                )
            return embedded + self.table(positions.long())
        return embedded


class SelfAttentionPositions(nn.Module):
    """What a scheme does inside one self-attention layer: RoPE rotates queries and keys; ALiBi,
    Shaw's relative embeddings and Transformer-XL's terms add a bias to the scores. Absolute schemes
    and ``none`` do nothing."""

    slopes: torch.Tensor

    def __init__(self, scheme: str, heads: int, head_dim: int, max_relative_distance: int = 16) -> None:
        super().__init__()
        check_scheme(scheme)
        if scheme == "rope" and head_dim % 2:
            raise ValueError(f"positional='rope' needs an even head dimension, got {head_dim}")
        if max_relative_distance < 0:
            raise ValueError(f"max_relative_distance must be >= 0, got {max_relative_distance}")
        self.scheme, self.head_dim, self.max_distance = scheme, head_dim, max_relative_distance
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)
        self.relative = (
            nn.Embedding(2 * max_relative_distance + 1, head_dim) if scheme == "relative" else None
        )
        self.encoding_dim = heads * head_dim + (heads * head_dim) % 2
        if scheme == "transformer_xl":
            self.content_bias = nn.Parameter(torch.zeros(heads, head_dim))  # u
            self.position_bias = nn.Parameter(torch.zeros(heads, head_dim))  # v
            self.position_layer = nn.Linear(self.encoding_dim, heads * head_dim, bias=False)  # W_R

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Queries or keys ``[batch, heads, steps, head_dim]`` at ``positions [batch, steps]``."""
        return apply_rope(x, positions) if self.scheme == "rope" else x

    def score_bias(
        self,
        query: torch.Tensor,
        query_positions: torch.Tensor,
        key_positions: torch.Tensor,
        keys: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """The bias ``[batch, heads, queries, keys]`` added to ``q k^T / sqrt(d)``, or ``None``.

        ``keys [batch, heads, keys, head_dim]`` are needed by ``transformer_xl`` only (its ``u^T k_j``).
        """
        if self.scheme == "transformer_xl":
            if keys is None:
                raise ValueError("positional='transformer_xl' needs the keys for its content bias u")
            return self._transformer_xl_bias(query, query_positions, key_positions, keys)
        if self.scheme == "alibi":
            return alibi_bias(self.slopes.to(query.dtype), query_positions, key_positions)
        if self.relative is not None:
            return self._relative_bias(query, query_positions, key_positions)
        return None

    def _relative_bias(
        self, query: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor
    ) -> torch.Tensor:
        """Shaw et al.'s ``q_i^T a_{clip(j - i)} / sqrt(d)``: each query is scored once against the
        table of the ``2 * max_relative_distance + 1`` distance embeddings and each pair's score is
        gathered from those, so no ``[B, Q, K, D]`` tensor of embeddings is built (nor, backward,
        scattered into the table). Same numbers; the bias's forward and backward take 4.6–4.9× less
        CPU at SCAN's shapes (benchmarks/bench_relative_bias.py), a SCAN update 1.0–1.1× (within
        the noise of a busy box; docs/results.md, session 43)."""
        assert self.relative is not None
        by_distance = query @ self.relative.weight.T  # [B, H, Q, 2 * max_distance + 1]
        index = self.relative_index(query_positions, key_positions)
        return pair_scores(by_distance, index) / math.sqrt(self.head_dim)

    def relative_index(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """``[B, Q, K]``: each pair's row of the ``relative`` table, its distance ``j - i`` clipped
        to ``±max_relative_distance`` and shifted to start at 0 (Shaw et al.'s ``clip``)."""
        offsets = key_positions.unsqueeze(-2) - query_positions.unsqueeze(-1)
        return offsets.long().clamp(-self.max_distance, self.max_distance) + self.max_distance

    def _transformer_xl_bias(
        self,
        query: torch.Tensor,
        query_positions: torch.Tensor,
        key_positions: torch.Tensor,
        keys: torch.Tensor,
    ) -> torch.Tensor:
        """Dai et al.'s terms (b) + (c) + (d): ``u^T k_j + (q_i + v)^T W_R R_{i-j}``, scaled.

        ``R`` is encoded once per distinct offset ``i - j`` (a table of ``N`` rows; integer
        positions give ``N <= Q + K - 1``) and projected, ``W_R R`` (``[N, H, D]``, as Dai et al.'s
        code projects its ``r``), each query is scored against that table and each pair's term is
        gathered from those scores, so no ``[B, Q, K, E]`` tensor of encodings is built. Same
        numbers. Until session 62 the queries were projected into the encodings' width instead,
        ``(W_R,h^T (q_i + v_h))^T R``: ``E / D`` (8 at SCAN's sizes) times the arithmetic for the
        same scores (``benchmarks/bench_training_step.py --xl-queries-projected``)."""
        heads, dim = self.content_bias.shape
        content = torch.einsum("hd,bhkd->bhk", self.content_bias, keys).unsqueeze(2)  # [B, H, 1, K]
        distinct, index = distinct_offsets(query_positions, key_positions, query.dtype)
        encodings = self.position_layer(sinusoidal_encoding(distinct, self.encoding_dim))  # W_R R
        by_offset = torch.einsum(  # [B, H, Q, N]
            "bhqd,nhd->bhqn", query + self.position_bias.unsqueeze(1), encodings.view(-1, heads, dim)
        )
        position = pair_scores(by_offset, index)
        return (content + position) / math.sqrt(dim)


def distinct_offsets(
    query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct offsets ``i - j`` of ``query_positions [B, Q]`` and ``key_positions [B, K]``,
    ``[N]``, and each pair's row among them, ``[B, Q, K]``. Integer positions give every integer
    from the least offset to the greatest (no sort); fractional ones the sorted distinct values."""
    offsets = (query_positions.unsqueeze(-1) - key_positions.unsqueeze(-2)).to(dtype)  # i - j
    if not torch.equal(offsets, offsets.round()):
        return torch.unique(offsets, return_inverse=True)
    low = int(offsets.min())
    distinct = torch.arange(low, int(offsets.max()) + 1, dtype=dtype, device=offsets.device)
    return distinct, (offsets - low).long()


def pair_scores(by_row: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``[B, H, Q, K]``: each query–key pair's score, taken from the queries' scores against a table
    ``by_row [B, H, Q, N]`` at the pair's row ``index [B, Q, K]`` (the same for every head)."""
    return by_row.gather(-1, index.unsqueeze(1).expand(-1, by_row.size(1), -1, -1))
