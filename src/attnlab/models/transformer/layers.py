"""The layers of :class:`~attnlab.models.transformer.TransformerSeq2Seq`: self-attention under any
positional scheme (with optional counting heads), cross-attention whose heads are scaled dot products
or attnlab attenders, the feed-forward block, the encoder and decoder layers (pre- or post-norm), and
the heads of the stop's own (``stop_layers="separate"``). The equations and the choices are in the
model's module docstring (:mod:`attnlab.models.transformer.model`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.attention import Attender, AttentionState, build_attender
from attnlab.attention.positions import (
    SelfAttentionPositions,
)
from attnlab.attention.shift import ShiftAttender, attend_heads, can_attend_together, heads_initial_state
from attnlab.models.dropout import Dropout
from attnlab.models.seq2seq import LocalEncoder
from attnlab.models.transformer.options import DOT


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, T, H*D]`` → ``[B, H, T, D]``."""
    batch, steps, _ = x.shape
    return x.view(batch, steps, heads, -1).transpose(1, 2)


def _padded_dot_weights(query: torch.Tensor, keys: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention ``[B, H, T, S]`` of ``query [B, H, T, D]`` over ``keys [B, H, S,
    D]``, zero on the source's padding (``padding_mask [B, S]``, ``True`` there)."""
    scores = query @ keys.transpose(-1, -2) / math.sqrt(query.size(-1))
    return torch.softmax(scores.masked_fill(padding_mask[:, None, None, :], float("-inf")), dim=-1)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, D]`` → ``[B, T, H*D]``."""
    batch, heads, steps, dim = x.shape
    return x.transpose(1, 2).reshape(batch, steps, heads * dim)


@dataclass
class SelfCache:
    """A decoder layer's keys and values so far (positions rotated in for RoPE)."""

    keys: torch.Tensor  # [B, H, t, D]
    values: torch.Tensor  # [B, H, t, D]
    positions: torch.Tensor  # [B, t]


COUNTING_BIAS = -3.0
"""The initial bias of a counting head's scores: ``sigmoid(-3) ≈ 0.05``, so that at the start of
training a step's sum over its keys stays small at every length."""


class SelfAttention(nn.Module):
    """Multi-head self-attention with a positional scheme; causal or with key padding.

    ``hide_start``: a causal step after position 0 does not read position 0 (the decoder's
    ``<sos>``; ``decoder_hides_start`` of :class:`TransformerSeq2Seq`).

    ``counting_heads``: the last that many heads are *counting heads*: their weights are
    ``sigmoid(s_tj + b_h)`` (``b_h`` a learned bias per head, from :data:`COUNTING_BIAS`) instead
    of a softmax over the keys, so a step's glimpse is a sum, ``Σ_j sigmoid(s_tj + b_h) v_j``, that
    grows with the number of keys the head selects rather than a mean that does not (masked keys
    weigh 0). ``decoder_counting_heads`` of :class:`TransformerSeq2Seq` says why."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        scheme: str,
        dropout: float,
        max_relative_distance: int,
        hide_start: bool = False,
        counting_heads: int = 0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if not 0 <= counting_heads <= heads:
            raise ValueError(f"counting heads must be between 0 and the {heads} heads, got {counting_heads}")
        self.heads, self.head_dim = heads, d_model // heads
        self.hide_start = hide_start
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.positions = SelfAttentionPositions(scheme, heads, self.head_dim, max_relative_distance)
        self.dropout = Dropout(dropout)
        self.counting_heads = counting_heads
        self.counting_bias = (
            nn.Parameter(torch.full((counting_heads,), COUNTING_BIAS)) if counting_heads else None
        )

    def xavier_init_(self, zero_bias: bool = True) -> None:
        """``linear_init="xavier"``: the query, key and value projections, the output and
        Transformer-XL's position projection (:func:`xavier_`)."""
        xavier_(self.qkv, parts=3, zero_bias=zero_bias)
        xavier_(self.out, zero_bias=zero_bias)
        if self.positions.scheme == "transformer_xl":
            xavier_(self.positions.position_layer, zero_bias=zero_bias)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        *,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: SelfCache | None = None,
    ) -> tuple[torch.Tensor, SelfCache]:
        """``x [B, T, D]`` at ``positions [B, T]``; with ``cache``, the new steps follow the cached ones."""
        query, keys, values = (_split_heads(part, self.heads) for part in self.qkv(x).chunk(3, dim=-1))
        query = self.positions.rotate(query, positions)
        keys = self.positions.rotate(keys, positions)
        key_positions = positions
        if cache is not None:
            keys = torch.cat([cache.keys, keys], dim=2)
            values = torch.cat([cache.values, values], dim=2)
            key_positions = torch.cat([cache.positions, positions], dim=1)
        scores = query @ keys.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, H, T, K]
        bias = self.positions.score_bias(query, positions, key_positions, keys)
        if bias is not None:
            scores = scores + bias
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if causal:
            future = key_positions.unsqueeze(1) > positions.unsqueeze(2)  # [B, T, K]
            if self.hide_start:  # position 0 is read by itself only
                future = future | ((key_positions == 0).unsqueeze(1) & (positions > 0).unsqueeze(2))
            scores = scores.masked_fill(future.unsqueeze(1), float("-inf"))
        weights = self.dropout(self._weights(scores))
        return self.out(_merge_heads(weights @ values)), SelfCache(keys, values, key_positions)

    def _weights(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores [B, H, T, K]`` (``-inf`` where masked) → a softmax over the keys for the
        attending heads, ``sigmoid(score + bias)`` for the counting heads (0 where masked)."""
        if self.counting_bias is None:
            return torch.softmax(scores, dim=-1)
        attending = self.heads - self.counting_heads
        counted = torch.sigmoid(scores[:, attending:] + self.counting_bias[:, None, None])
        return torch.cat([torch.softmax(scores[:, :attending], dim=-1), counted], dim=1)


@dataclass
class CrossState:
    """A decoder layer's projected memory and the state of each attender head."""

    keys: torch.Tensor  # [B, H, S, D]
    values: torch.Tensor  # [B, H, S, D]
    padding_mask: torch.Tensor  # [B, S]
    attender_keys: torch.Tensor  # [B, H, S, D]: the keys the attender heads read
    attender_states: dict[int, AttentionState] = field(default_factory=dict)
    shift_state: AttentionState | None = None  # the Shift Attender heads run together, if any


class CrossAttention(nn.Module):
    """Multi-head cross-attention whose heads are ``"dot"`` or attnlab attenders (module docstring).

    ``attender_keys="embeddings"`` gives the attender heads keys projected from the source's token
    embeddings (no position, no context) instead of from the encoder's output; ``"local"`` keys
    from a window of three token embeddings (:class:`~attnlab.models.seq2seq.LocalEncoder`: the
    word and its neighbours, no position). ``embedding_values`` projects every head's values from
    the source's token embeddings (no position, no context) instead of from the encoder's output:
    the last layer's values under ``semantic_output`` (module docstring); with ``shared_values``
    every head reads the same projection of them (``head_dim`` wide) and the output projection reads
    the heads' mean glimpse (``semantic_heads="shared"``), or with ``gated_heads`` their glimpses
    weighted by a softmax over the heads of a projection of the step's input ``x``
    (``semantic_heads="gated"``).
    """

    def __init__(
        self,
        d_model: int,
        heads: list[str],
        options: dict[str, dict[str, Any]],
        dropout: float,
        attender_keys: str = "memory",
        embedding_values: bool = False,
        shared_values: bool = False,
        gated_heads: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if shared_values and not embedding_values:
            raise ValueError(
                "shared_values are the embedding values of every head: they need embedding_values"
            )
        if gated_heads and not shared_values:
            raise ValueError(
                "gated_heads weighs the heads' glimpses of shared values: it needs shared_values"
            )
        self.heads, self.head_dim = len(heads), d_model // len(heads)
        self.shared_values = shared_values
        self.head_gate = nn.Linear(d_model, self.heads) if gated_heads else None
        self.kinds = list(heads)
        self.query = nn.Linear(d_model, d_model, bias=bias)
        self.key_value = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.embedding_key = nn.Linear(d_model, d_model) if attender_keys == "embeddings" else None
        self.local_key = LocalEncoder(d_model, d_model, window=3) if attender_keys == "local" else None
        value_dim = self.head_dim if shared_values else d_model
        self.embedding_value = nn.Linear(d_model, value_dim) if embedding_values else None
        self.out = nn.Linear(value_dim, d_model, bias=bias)
        self.dropout = Dropout(dropout)
        dim = self.head_dim
        self.dot_heads = [h for h, kind in enumerate(heads) if kind == DOT]
        self.attenders = nn.ModuleDict(
            {
                str(h): build_attender(kind, dim, dim, dim, **options.get(kind, {}))
                for h, kind in enumerate(heads)
                if kind != DOT
            }
        )
        # Shift Attender heads that walk alike run as one batch (shift.attend_heads: the same
        # numbers, one walk instead of one per head); the other attender heads run one by one.
        shift_heads = [h for h, kind in enumerate(heads) if kind == "shift"]
        together = len(shift_heads) > 1 and can_attend_together([self._attender(h) for h in shift_heads])
        self.shift_heads = shift_heads if together else []
        self.single_heads = [int(name) for name in self.attenders if int(name) not in self.shift_heads]

    def xavier_init_(self, zero_bias: bool = True) -> None:
        """``linear_init="xavier"``: the query, key and value projections and the output
        (:func:`xavier_`)."""
        xavier_(self.query, zero_bias=zero_bias)
        xavier_(self.key_value, parts=2, zero_bias=zero_bias)
        xavier_(self.out, zero_bias=zero_bias)

    def start(
        self,
        memory: torch.Tensor,
        padding_mask: torch.Tensor,
        embedded: torch.Tensor | None = None,
        value_embedded: torch.Tensor | None = None,
    ) -> CrossState:
        """The projected ``memory [B, S, D]`` and each attender head's initial state; ``embedded``:
        the source's scaled token embeddings, needed with ``attender_keys`` ``"embeddings"`` or
        ``"local"`` and with ``embedding_values``; ``value_embedded``: other token embeddings that
        ``embedding_values`` reads instead (``semantic_embeddings="separate"``)."""
        keys, values = (_split_heads(part, self.heads) for part in self.key_value(memory).chunk(2, dim=-1))
        from_embeddings = (self.embedding_key, self.local_key, self.embedding_value)
        if embedded is None and any(module is not None for module in from_embeddings):
            raise ValueError("keys or values from the embeddings need the source's token embeddings")
        if self.embedding_value is not None and embedded is not None:
            read = self.embedding_value(embedded if value_embedded is None else value_embedded)
            if self.shared_values:  # one value a word, read by every head
                values = read.unsqueeze(1).expand(-1, self.heads, -1, -1)
            else:
                values = _split_heads(read, self.heads)
        if self.local_key is not None and embedded is not None:
            attender_keys = _split_heads(self.local_key(embedded, padding_mask), self.heads)
        elif self.embedding_key is not None and embedded is not None:
            attender_keys = _split_heads(self.embedding_key(embedded), self.heads)
        else:
            attender_keys = keys
        states = {
            h: self._attender(h).initial_state(attender_keys[:, h], padding_mask) for h in self.single_heads
        }
        shift_state = None
        if self.shift_heads:
            shift_state = heads_initial_state(
                self._shift_attenders(), attender_keys[:, self.shift_heads], padding_mask
            )
        return CrossState(keys, values, padding_mask, attender_keys, states, shift_state)

    def _attender(self, head: int) -> Attender:
        attender = self.attenders[str(head)]
        assert isinstance(attender, Attender)
        return attender

    def call_heads_one_by_one(self) -> None:
        """From now on, call every attender head on its own, the Shift Attender heads too: the same
        numbers, slower (what running them together is tested against and timed beside)."""
        self.shift_heads, self.single_heads = [], sorted(int(name) for name in self.attenders)

    def _shift_attenders(self) -> list[ShiftAttender]:
        attenders = [self._attender(h) for h in self.shift_heads]
        assert all(isinstance(attender, ShiftAttender) for attender in attenders)
        return attenders  # type: ignore[return-value]

    def forward(self, x: torch.Tensor, state: CrossState) -> tuple[torch.Tensor, torch.Tensor, CrossState]:
        """``x [B, T, D]`` → output ``[B, T, D]``, weights ``[B, H, T, S]`` and the next state."""
        query = _split_heads(self.query(x), self.heads)
        glimpses: list[torch.Tensor | None] = [None] * self.heads
        weights: list[torch.Tensor | None] = [None] * self.heads
        if self.dot_heads:
            index = self.dot_heads
            dot_weights = _padded_dot_weights(query[:, index], state.keys[:, index], state.padding_mask)
            dot_glimpses = self.dropout(dot_weights) @ state.values[:, index]
            for i, h in enumerate(index):
                glimpses[h], weights[h] = dot_glimpses[:, i], dot_weights[:, i]
        next_states = dict(state.attender_states)
        shift_state = state.shift_state
        if self.shift_heads:
            assert shift_state is not None
            index = self.shift_heads
            together = attend_heads(
                self._shift_attenders(),
                query[:, index],
                state.attender_keys[:, index],
                state.values[:, index],
                state.padding_mask,
                shift_state,
            )
            for i, h in enumerate(index):
                glimpses[h], weights[h] = together.glimpse[:, i], together.weights[:, i]
            shift_state = together.state
        for h in self.single_heads:
            attended = self._attender(h)(
                query[:, h],
                state.attender_keys[:, h],
                state.values[:, h],
                state.padding_mask,
                state.attender_states[h],
            )
            glimpses[h], weights[h], next_states[h] = attended.glimpse, attended.weights, attended.state
        stacked = torch.stack(glimpses, dim=1)  # type: ignore[arg-type]
        if self.head_gate is not None:  # [B, T, H] → a weight a head, each step
            gate = torch.softmax(self.head_gate(x), dim=-1).transpose(1, 2).unsqueeze(-1)
            output = self.out((gate * stacked).sum(dim=1))
        else:
            output = self.out(stacked.mean(dim=1) if self.shared_values else _merge_heads(stacked))
        all_weights = torch.stack(weights, dim=1)  # type: ignore[arg-type]
        return (
            output,
            all_weights,
            CrossState(
                state.keys, state.values, state.padding_mask, state.attender_keys, next_states, shift_state
            ),
        )


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__(nn.Linear(d_model, ff_dim), nn.ReLU(), Dropout(dropout), nn.Linear(ff_dim, d_model))

    def xavier_init_(self, zero_bias: bool = True) -> None:
        """``linear_init="xavier"``: both layers, the first with ReLU's gain (:func:`xavier_`)."""
        xavier_(self[0], gain=nn.init.calculate_gain("relu"), zero_bias=zero_bias)
        xavier_(self[3], zero_bias=zero_bias)


class _Block(nn.Module):
    """What the encoder and decoder layers share: the placement of their layer normalisations."""

    def __init__(self, dropout: float, norm: str) -> None:
        super().__init__()
        self.pre_norm = norm == "pre"
        self.dropout = Dropout(dropout)

    def _branch_input(self, x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """What a sub-layer reads: ``LN(x)`` before it (pre-norm), else ``x``."""
        return norm(x) if self.pre_norm else x

    def _add(self, x: torch.Tensor, branch: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """The residual sum ``x + dropout(branch)``, normalised after it in post-norm."""
        total = x + self.dropout(branch)
        return total if self.pre_norm else norm(total)


class EncoderLayer(_Block):
    def __init__(
        self,
        d_model: int,
        heads: int,
        ff_dim: int,
        dropout: float,
        scheme: str,
        distance: int,
        norm: str = "pre",
        attention_bias: bool = True,
    ):
        super().__init__(dropout, norm)
        self.attention_norm, self.ff_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads, scheme, dropout, distance, bias=attention_bias)
        self.ff = FeedForward(d_model, ff_dim, dropout)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attention(
            self._branch_input(x, self.attention_norm), positions, key_padding_mask=padding_mask
        )
        x = self._add(x, attended, self.attention_norm)
        return self._add(x, self.ff(self._branch_input(x, self.ff_norm)), self.ff_norm)


class DecoderLayer(_Block):
    def __init__(
        self,
        d_model: int,
        heads: list[str],
        ff_dim: int,
        dropout: float,
        scheme: str,
        distance: int,
        options: dict[str, dict[str, Any]],
        attender_keys: str = "memory",
        norm: str = "pre",
        hide_start: bool = False,
        embedding_values: bool = False,
        shared_values: bool = False,
        gated_heads: bool = False,
        counting_heads: int = 0,
        attention_bias: bool = True,
    ):
        super().__init__(dropout, norm)
        self.self_norm, self.cross_norm, self.ff_norm = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_attention = SelfAttention(
            d_model, len(heads), scheme, dropout, distance, hide_start, counting_heads, attention_bias
        )
        self.cross_attention = CrossAttention(
            d_model,
            heads,
            options,
            dropout,
            attender_keys,
            embedding_values,
            shared_values,
            gated_heads,
            attention_bias,
        )
        self.ff = FeedForward(d_model, ff_dim, dropout)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cross: CrossState,
        cache: SelfCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, CrossState, SelfCache]:
        """The layer's output ``[B, T, D]``, its cross-attention's output ``[B, T, D]`` (what it adds
        to the residual stream) and weights ``[B, H, T, S]``, and the next states."""
        attended, cache = self.self_attention(
            self._branch_input(x, self.self_norm), positions, causal=True, cache=cache
        )
        x = self._add(x, attended, self.self_norm)
        glimpse, weights, cross = self.cross_attention(self._branch_input(x, self.cross_norm), cross)
        x = self._add(x, glimpse, self.cross_norm)
        x = self._add(x, self.ff(self._branch_input(x, self.ff_norm)), self.ff_norm)
        return x, glimpse, weights, cross, cache


def scale_gradient(x: torch.Tensor, share: float) -> torch.Tensor:
    """``x`` unchanged, with ``share`` of the gradient passed back through it (0: none)."""
    if share == 1.0:
        return x
    if share == 0.0:
        return x.detach()
    return x.detach() + share * (x - x.detach())


class StopHeads(nn.Module):
    """Dot-product heads over the memory that only the stop of ``stop_from_attention`` reads
    (``stop_layers="separate"``): ``α_h = softmax(q_h K_hᵀ / sqrt(d_h))`` with ``q_h`` from the
    decoder's output (after its final normalisation) and ``K_h`` from the memory (the start position
    and the source, with its end marker if any); no values, no output projection."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """The heads' keys ``[B, H, S, D]`` of ``memory [B, S, d_model]``, projected once a source."""
        return _split_heads(self.key(memory), self.heads)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """The attention ``[B, H, T, S]`` of the decoder's output ``x [B, T, d_model]``."""
        return _padded_dot_weights(_split_heads(self.query(x), self.heads), keys, padding_mask)


@torch.no_grad()
def xavier_(linear: nn.Module, parts: int = 1, gain: float = 1.0, zero_bias: bool = True) -> None:
    """Xavier-uniform weights for each of ``parts`` equal blocks of rows of ``linear`` (a fused
    projection is ``parts`` projections of their own fan-out), as Csordás et al. 2021's code starts
    its layers (``TransformerSeq2Seq(linear_init="xavier")``); the bias zero, or with ``zero_bias``
    false left as ``nn.Linear`` drew it (their code's, ``linear_init="csordas2021"``)."""
    assert isinstance(linear, nn.Linear)
    for block in linear.weight.chunk(parts, dim=0):
        nn.init.xavier_uniform_(block, gain=gain)
    if linear.bias is not None and zero_bias:
        nn.init.zeros_(linear.bias)
