"""Attention over a sliding window of a language model's previous outputs (Daniluk et al. 2017).

:class:`SlidingWindowAttention` is eqs. 1–3 (and, fed with keys and values, eqs. 7–9)::

    M_t     = tanh(W^Y [y_{t-L} … y_{t-1}] + (W^h q_t) 1^T)         (1), (7)
    alpha_t = softmax(w^T M_t)                                        (2), (8)
    r_t     = [v_{t-L} … v_{t-1}] alpha_t^T                            (3), (9)

where the memory is the previous ``L`` outputs, *not* the current one. For plain attention
(§2.1) keys, values and query are all the output ``h``; for key-value attention (§2.2) the key
part ``k`` gives the keys and the query, the value part ``v`` the values. The paper writes no
biases in eq. 1, so the projections have none.

:class:`NGramConcatenation` is the concatenation inside eq. 13 (N-gram RNN, §2.4):
``[h^1_t ; h^2_{t-1} ; … ; h^{N-1}_{t-N+2}]`` — the i-th slice of the output of step ``t−i+1``.

Both read only past outputs and are not fed back into the recurrence, so they run on a whole
segment of ``T`` steps at once: the memory (the last ``L`` entries of the previous segment, kept
in the state) is concatenated in front of the segment and every step's window is a strided view
(``unfold``) of that sequence, with a ``[batch, T, L]`` mask; there is no loop over time.

Conventions are those of the other attenders (:mod:`attnlab.attention.base`): batch-first,
``key_padding_mask`` True = padding, an :class:`~attnlab.attention.base.AttentionOutput` with the
weights (exactly zero where masked) and a flat state dict the caller threads through. Beyond
that, ``resets`` (bool ``[batch, T]``) marks steps that start a new document: their window, and
every later step's, excludes what came before. A step with nothing to attend to (the first step
of a document) gets all-zero weights and a zero glimpse ``r_t = 0``.

Window positions run from oldest to newest: position ``L−1`` is step ``t−1`` (the rightmost
column of Daniluk et al.'s Figure 3), position ``0`` is step ``t−L``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.attention.base import AttentionOutput, AttentionState, check_sizes

__all__ = ["NGramConcatenation", "SlidingWindowAttention", "WindowContext", "window_context"]


class WindowContext:
    """Which entries of ``[memory ; segment]`` each step of a segment may read.

    ``document`` ``[batch, M+T]`` counts the resets up to each position (memory entries count 0),
    ``valid`` ``[batch, M+T]`` is False for empty memory slots and padded steps. An entry at
    position ``p`` is visible to the step at position ``M+t`` (``p < M+t``) iff it is valid and in
    the same document: ``document[p] == document[M+t]``.
    """

    def __init__(self, document: torch.Tensor, valid: torch.Tensor, memory: int) -> None:
        self.document = document
        self.valid = valid
        self.memory = memory

    @property
    def steps(self) -> int:
        return self.document.size(1) - self.memory

    def visible(self, offset: int, size: int) -> torch.Tensor:
        """``[batch, T, size]``: may step ``t`` read the entries ``t+offset … t+offset+size−1``."""
        steps = self.steps
        document = self.document.unfold(1, size, 1)[:, offset : offset + steps]
        valid = self.valid.unfold(1, size, 1)[:, offset : offset + steps]
        return valid & (document == self.document[:, self.memory :].unsqueeze(-1))

    def carried_valid(self) -> torch.Tensor:
        """``[batch, M]``: validity of the last ``M`` entries for the next segment."""
        memory = self.memory
        tail = self.document[:, self.document.size(1) - memory :]
        return self.valid[:, self.valid.size(1) - memory :] & (tail == self.document[:, -1:])


def window_context(
    memory_valid: torch.Tensor, resets: torch.Tensor | None, key_padding_mask: torch.Tensor | None
) -> WindowContext:
    """The :class:`WindowContext` of a segment given the carried memory's validity ``[batch, M]``."""
    batch, memory = memory_valid.shape
    if resets is None and key_padding_mask is None:
        raise ValueError("window_context needs resets or key_padding_mask to know the segment length")
    steps = (resets if resets is not None else key_padding_mask).size(1)  # type: ignore[union-attr]
    device = memory_valid.device
    flags = torch.zeros(batch, memory + steps, dtype=torch.long, device=device)
    if resets is not None:
        flags[:, memory:] = resets.long()
    segment_valid = (
        torch.ones(batch, steps, dtype=torch.bool, device=device)
        if key_padding_mask is None
        else ~key_padding_mask
    )
    return WindowContext(flags.cumsum(1), torch.cat([memory_valid, segment_valid], 1), memory)


def check_step_mask(owner: str, name: str, tensor: torch.Tensor | None, shape: tuple[int, int]) -> None:
    """``tensor`` (``resets`` or a padding mask; ``None`` allowed) is bool ``[batch, T]`` (``shape``)."""
    if tensor is not None and (tensor.dtype != torch.bool or tuple(tensor.shape) != shape):
        raise ValueError(
            f"{owner}: {name} must be a bool tensor of shape {shape}, "
            f"got {tensor.dtype} {tuple(tensor.shape)}"
        )


class SlidingWindowAttention(nn.Module):
    """Additive attention over the previous ``window`` outputs (Daniluk et al. 2017, eqs. 1–3, 7–9).

    ``forward(query, keys, values, key_padding_mask=None, state=None, *, resets=None)``:

    * ``query`` ``[batch, T, query_dim]`` (or ``[batch, query_dim]`` for one step): ``h_t`` (eq. 1)
      or ``k_t`` (eq. 7);
    * ``keys`` ``[batch, T, key_dim]``, ``values`` ``[batch, T, value_dim]``: the same steps' own
      keys and values, which enter the memory *after* their step;
    * ``key_padding_mask`` ``[batch, T]``: True for padded steps, never attended to;
    * ``resets`` ``[batch, T]``: True where a document starts.

    Returns the glimpse ``r_t`` ``[batch, T, value_dim]`` and the weights ``[batch, T, window]``.
    State: ``projected_keys`` ``[batch, window, hidden_dim]`` (``W^Y`` of the memory's keys),
    ``values`` ``[batch, window, value_dim]``, ``valid`` ``[batch, window]`` and ``step``. The caller
    detaches it between BPTT segments.

    Options:
        window: ``L``, the number of previous outputs in the memory (≥ 1).
        hidden_dim: size of ``M_t``'s rows (default ``key_dim``; the paper uses ``k``).
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        *,
        window: int = 10,
        hidden_dim: int | None = None,
    ) -> None:
        super().__init__()
        check_sizes(
            type(self).__name__,
            query_dim=query_dim,
            key_dim=key_dim,
            value_dim=value_dim,
            window=window,
            hidden_dim=hidden_dim,
        )
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.value_dim = key_dim if value_dim is None else value_dim
        self.window = window
        self.hidden_dim = key_dim if hidden_dim is None else hidden_dim
        self.key_layer = nn.Linear(key_dim, self.hidden_dim, bias=False)  # W^Y
        self.query_layer = nn.Linear(query_dim, self.hidden_dim, bias=False)  # W^h
        self.energy_layer = nn.Linear(self.hidden_dim, 1, bias=False)  # w

    def initial_state(
        self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> AttentionState:
        """An empty memory: every slot invalid."""
        dtype = dtype or self.key_layer.weight.dtype
        return {
            "step": 0,
            "projected_keys": torch.zeros(batch, self.window, self.hidden_dim, device=device, dtype=dtype),
            "values": torch.zeros(batch, self.window, self.value_dim, device=device, dtype=dtype),
            "valid": torch.zeros(batch, self.window, dtype=torch.bool, device=device),
        }

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        state: AttentionState | None = None,
        *,
        resets: torch.Tensor | None = None,
    ) -> AttentionOutput:
        single_step = query.dim() == 2
        if single_step:
            query, keys, values = query.unsqueeze(1), keys.unsqueeze(1), values.unsqueeze(1)
            resets = None if resets is None else resets.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(1)
        self._check(query, keys, values, key_padding_mask, resets)
        batch, steps = query.shape[:2]
        if state is None:
            state = self.initial_state(batch, query.device, query.dtype)
        if resets is None:
            resets = torch.zeros(batch, steps, dtype=torch.bool, device=query.device)
        context = window_context(state["valid"], resets, key_padding_mask)
        projected = torch.cat([state["projected_keys"], self.key_layer(keys)], 1)  # [B, L+T, H]
        memory_values = torch.cat([state["values"], values], 1)  # [B, L+T, Dv]
        visible = context.visible(0, self.window)  # [B, T, L]
        weights = self._weights(query, projected, visible)
        glimpse = self._glimpse(weights, memory_values)
        new_state = {
            "step": state["step"] + steps,
            "projected_keys": projected[:, steps:],
            "values": memory_values[:, steps:],
            "valid": context.carried_valid(),
        }
        if single_step:
            return AttentionOutput(glimpse.squeeze(1), weights.squeeze(1), new_state)
        return AttentionOutput(glimpse, weights, new_state)

    def _weights(self, query: torch.Tensor, projected: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """Eqs. 1–2 on every step's window; exactly 0 where not visible, all 0 if nothing is."""
        steps = query.size(1)
        windows = projected.unfold(1, self.window, 1)[:, :steps].transpose(2, 3)  # [B, T, L, H]
        energy = torch.tanh(windows + self.query_layer(query).unsqueeze(2))  # M_t, eq. 1
        scores = self.energy_layer(energy).squeeze(-1)  # w^T M_t, [B, T, L]
        scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1) * visible  # eq. 2

    def _glimpse(self, weights: torch.Tensor, memory_values: torch.Tensor) -> torch.Tensor:
        """Eq. 3: ``r_t = Σ_j alpha_tj v_{t-L+j}``, as ``L`` shifted multiply-adds (no copy of windows)."""
        steps = weights.size(1)
        glimpse = weights[..., :1] * memory_values[:, :steps]
        for position in range(1, self.window):
            glimpse = (
                glimpse
                + weights[..., position : position + 1] * memory_values[:, position : position + steps]
            )
        return glimpse

    def _check(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        resets: torch.Tensor | None,
    ) -> None:
        name = type(self).__name__
        if query.dim() != 3 or query.size(-1) != self.query_dim:
            raise ValueError(f"{name}: query must be [batch, T, {self.query_dim}], got {tuple(query.shape)}")
        steps = tuple(query.shape[:2])
        if tuple(keys.shape) != (*steps, self.key_dim):
            raise ValueError(f"{name}: keys must be {(*steps, self.key_dim)}, got {tuple(keys.shape)}")
        if tuple(values.shape) != (*steps, self.value_dim):
            raise ValueError(f"{name}: values must be {(*steps, self.value_dim)}, got {tuple(values.shape)}")
        check_step_mask(name, "key_padding_mask", key_padding_mask, steps)  # type: ignore[arg-type]
        check_step_mask(name, "resets", resets, steps)  # type: ignore[arg-type]


class NGramConcatenation(nn.Module):
    """The concatenation of eq. 13: ``[h^1_t ; h^2_{t-1} ; … ; h^{N-1}_{t-N+2}]`` (Daniluk §2.4).

    ``forward(outputs, state=None, *, resets=None, key_padding_mask=None)`` takes the LSTM
    outputs ``[batch, T, (N−1)·slice_dim]`` (slice ``i`` is ``h^i``) and returns
    ``([batch, T, (N−1)·slice_dim], state)``. A slice from before the document start (or from a
    padded step) is zero. State: ``previous`` ``[batch, N−2, (N−1)·slice_dim]``, ``valid``
    ``[batch, N−2]``. ``N = 2`` needs no memory and returns the outputs unchanged.
    """

    def __init__(self, slice_dim: int, n: int) -> None:
        super().__init__()
        check_sizes(type(self).__name__, slice_dim=slice_dim, n=n)
        if n < 2:
            raise ValueError(f"NGramConcatenation: n must be >= 2, got {n}")
        self.slice_dim = slice_dim
        self.n = n
        self.memory = n - 2

    def initial_state(
        self, batch: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> AttentionState:
        width = (self.n - 1) * self.slice_dim
        return {
            "previous": torch.zeros(batch, self.memory, width, device=device, dtype=dtype),
            "valid": torch.zeros(batch, self.memory, dtype=torch.bool, device=device),
        }

    def forward(
        self,
        outputs: torch.Tensor,
        state: AttentionState | None = None,
        *,
        resets: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, AttentionState]:
        batch, steps, width = outputs.shape
        if width != (self.n - 1) * self.slice_dim:
            raise ValueError(
                f"NGramConcatenation: outputs must have (N-1)*slice_dim = {(self.n - 1) * self.slice_dim} "
                f"features, got {width}"
            )
        check_step_mask(type(self).__name__, "resets", resets, (batch, steps))
        check_step_mask(type(self).__name__, "key_padding_mask", key_padding_mask, (batch, steps))
        if self.memory == 0:
            return outputs, {}
        if state is None:
            state = self.initial_state(batch, outputs.device, outputs.dtype)
        if resets is None:
            resets = torch.zeros(batch, steps, dtype=torch.bool, device=outputs.device)
        context = window_context(state["valid"], resets, key_padding_mask)
        sequence = torch.cat([state["previous"], outputs], 1)  # [B, N-2+T, width]
        parts = [outputs[..., : self.slice_dim]]
        for i in range(1, self.n - 1):  # slice i+1 (1-based) of the output of step t-i
            offset = self.memory - i
            visible = context.visible(offset, 1)  # [B, T, 1]
            part = sequence[:, offset : offset + steps, i * self.slice_dim : (i + 1) * self.slice_dim]
            parts.append(part * visible)
        new_state = {"previous": sequence[:, steps:], "valid": context.carried_valid()}
        return torch.cat(parts, -1), new_state
