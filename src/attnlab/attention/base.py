"""The interface every attender in attnlab shares.

An attender (Dubois et al. 2020, §4, eq. 1) takes keys ``K``, values ``V`` and a query ``q_t`` and
returns a probability mass function ``alpha_t`` over the keys and the glimpse ``g_t = V alpha_t``.

Conventions (the same as ``torch.nn.MultiheadAttention`` with ``batch_first=True``):

* ``query``: ``[batch, query_dim]`` for one decoding step, or ``[batch, steps, query_dim]`` for
  several consecutive steps at once;
* ``keys``: ``[batch, source_len, key_dim]``; ``values``: ``[batch, source_len, value_dim]``;
* ``key_padding_mask``: bool ``[batch, source_len]``, ``True`` marks padding. Padded positions get
  a weight of exactly zero. ``None`` means no padding.

The output is an :class:`AttentionOutput`: the glimpse (``[batch, value_dim]`` or
``[batch, steps, value_dim]``), the weights (``[batch, source_len]`` or
``[batch, steps, source_len]``), the attender's next state and a dict of interpretable variables
(same leading shape as the weights minus the source axis, e.g. ``mu`` is ``[batch]`` or
``[batch, steps]``; attention-valued variables have the shape of the weights).

State. Some attenders carry state from one decoding step to the next (the Location Attender's
weighter GRU and previous attention; the decoding step counter of the positional attenders).
Every attender also caches per-source work in its state (projected keys, source lengths), so a
decoder calls :meth:`Attender.initial_state` once per source and then threads ``output.state``
through the steps. Passing ``state=None`` starts from the initial state, which is what a one-shot
caller wants. :meth:`Attender.initial_state` checks the keys and the mask in full (shapes, dtype,
no all-padding row); a later step with a state checks only what costs no device sync (the keys'
and mask's shapes and dtype against the state's batch), so it must be given the same keys and mask
as :meth:`Attender.initial_state` was: a step without the mask would attend to padding.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.checks import check_int, did_you_mean_each

AttentionState = dict[str, Any]
"""An attender's state: a flat dict of tensors (and ints), documented by each attender."""


@dataclass
class AttentionOutput:
    """What an attender returns for one or several query steps."""

    glimpse: torch.Tensor
    weights: torch.Tensor
    state: AttentionState
    variables: dict[str, torch.Tensor] = field(default_factory=dict)


class Attender(nn.Module):
    """Base class: validates inputs, handles single-step queries and the initial state.

    Subclasses implement :meth:`_attend` on 3-D queries ``[batch, steps, query_dim]`` and may
    override :meth:`_init_state` to cache per-source work or start recurrent state.
    """

    #: True when the output of a step depends on earlier steps (beyond the step counter).
    stateful: bool = False

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        super().__init__()
        check_sizes(type(self).__name__, query_dim=query_dim, key_dim=key_dim, value_dim=value_dim)
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.value_dim = key_dim if value_dim is None else value_dim

    def initial_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> AttentionState:
        """Validate the source once and return the state for the first decoding step."""
        self._check_keys(keys, key_padding_mask)
        lengths = _source_lengths(keys, key_padding_mask)
        state: AttentionState = {"step": 0, "source_lengths": lengths}
        state.update(self._init_state(keys, key_padding_mask, lengths))
        return state

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        state: AttentionState | None = None,
    ) -> AttentionOutput:
        if state is None:
            state = self.initial_state(keys, key_padding_mask)
        else:
            self._check_step_keys(keys, key_padding_mask, state)
        single_step = query.dim() == 2
        if single_step:
            query = query.unsqueeze(1)
        if query.dim() != 3 or query.size(-1) != self.query_dim or query.size(0) != keys.size(0):
            raise ValueError(
                f"{type(self).__name__}: query must be [batch={keys.size(0)}, query_dim="
                f"{self.query_dim}] or [batch, steps, query_dim], got {tuple(query.shape)}"
            )
        if values.shape[:2] != keys.shape[:2] or values.size(-1) != self.value_dim:
            raise ValueError(
                f"{type(self).__name__}: values must be [batch, source_len, value_dim="
                f"{self.value_dim}] matching keys {tuple(keys.shape[:2])}, got {tuple(values.shape)}"
            )
        output = self._attend(query, keys, values, key_padding_mask, state)
        if single_step:
            output = AttentionOutput(
                glimpse=output.glimpse.squeeze(1),
                weights=output.weights.squeeze(1),
                state=output.state,
                variables={name: value.squeeze(1) for name, value in output.variables.items()},
            )
        return output

    def _init_state(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, lengths: torch.Tensor
    ) -> AttentionState:
        return {}

    def _attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
        state: AttentionState,
    ) -> AttentionOutput:
        raise NotImplementedError

    def _check_step_keys(
        self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None, state: AttentionState
    ) -> None:
        """With a ``state`` (a decoder's later steps), the checks that cost no device sync: keys and
        mask of the batch the state was made for (:meth:`initial_state` checked their values)."""
        name = type(self).__name__
        batch = state["source_lengths"].size(0)
        if keys.dim() != 3 or keys.size(-1) != self.key_dim or keys.size(0) != batch:
            raise ValueError(
                f"{name}: keys must be [batch={batch} (the state's), source_len, key_dim={self.key_dim}], "
                f"got {tuple(keys.shape)}"
            )
        if key_padding_mask is not None:
            _check_mask_type(name, key_padding_mask, keys.shape[:2], "key_padding_mask")

    def _check_keys(self, keys: torch.Tensor, key_padding_mask: torch.Tensor | None) -> None:
        name = type(self).__name__
        if keys.dim() != 3 or keys.size(-1) != self.key_dim:
            raise ValueError(
                f"{name}: keys must be [batch, source_len, key_dim={self.key_dim}], got {tuple(keys.shape)}"
            )
        if keys.size(1) == 0:
            raise ValueError(f"{name}: keys have source_len 0; there is nothing to attend to")
        if key_padding_mask is not None:
            check_padding_mask(name, key_padding_mask, keys.shape[:2], "key_padding_mask")


def check_sizes(owner: str, **sizes: int | None) -> None:
    """Each size (a dimension, a window; ``None``: not given) is an int ≥ 1, named with ``owner``
    when it is not: a size 0 builds a layer with no units, a negative one fails deep inside torch."""
    for name, size in sizes.items():
        if size is not None:
            check_int(name, size, owner=owner)


def check_padding_mask(
    owner: str, mask: torch.Tensor, shape: torch.Size, argument: str, *, right_padded: bool = False
) -> None:
    """A padding mask must be bool of ``shape`` (True = padding) and leave every row a real position;
    with ``right_padded`` (a module that reads a row's last real position or runs an RNN over its
    words in order), padding only after the real positions (:func:`check_right_padded`)."""
    if len(shape) != 2:
        raise ValueError(
            f"{owner}: {argument} masks a batch [batch, length], but the input it goes with has shape "
            f"{tuple(shape)} (one sequence is a batch of one: [1, length])"
        )
    _check_mask_type(owner, mask, shape, argument)
    empty = mask.all(dim=1)
    if bool(empty.any()):
        rows = empty.nonzero().flatten().tolist()
        raise ValueError(
            f"{owner}: empty sequence(s): batch rows {rows} of {argument} are all padding; "
            "each needs a real position"
        )
    if right_padded:
        check_right_padded(owner, mask, argument)


def _check_mask_type(owner: str, mask: torch.Tensor, shape: torch.Size, argument: str) -> None:
    """The part of :func:`check_padding_mask` that costs no device sync: bool, of ``shape``."""
    if mask.dtype != torch.bool or mask.shape != shape:
        raise ValueError(
            f"{owner}: {argument} must be a bool tensor of shape {tuple(shape)} "
            f"(True = padding), got {mask.dtype} {tuple(mask.shape)}"
        )


def check_right_padded(owner: str, mask: torch.Tensor, argument: str) -> None:
    """Padding mask ``[B, S]`` (True = padding) only after each row's real positions: a left-padded
    row would run without an error and give other numbers (a row's "last word" would be padding)."""
    real_after_padding = ((mask.cumsum(dim=1) > 0) & ~mask).any(dim=1)
    if bool(real_after_padding.any()):
        rows = real_after_padding.nonzero().flatten().tolist()
        shown = ", ".join(map(str, rows[:10])) + (" …" if len(rows) > 10 else "")
        raise ValueError(
            f"{owner}: {argument} must be right-padded (padding only after a row's real positions); "
            f"batch rows {shown} have a real position after padding"
        )


SHARED_STATE_KEYS = ("step", "source_lengths")
"""The base state's keys: a composite attender shares them with its sub-attenders."""


def prefixed_state(prefix: str, state: AttentionState) -> AttentionState:
    """A sub-attender's own state entries under ``"<prefix>.<key>"`` (shared keys dropped), for a
    composite attender's flat state."""
    return {f"{prefix}.{key}": value for key, value in state.items() if key not in SHARED_STATE_KEYS}


def unprefixed_state(prefix: str, state: AttentionState) -> AttentionState:
    """The sub-attender state stored under ``prefix`` in a composite state, shared keys put back."""
    start = prefix + "."
    sub = {key[len(start) :]: value for key, value in state.items() if key.startswith(start)}
    sub.update({key: state[key] for key in SHARED_STATE_KEYS})
    return sub


def option_names(cls: type[Attender]) -> list[str]:
    """The keyword options of attender class ``cls`` beyond its dimensions."""
    skip = {"self", "query_dim", "key_dim", "value_dim"}
    return [name for name in inspect.signature(cls.__init__).parameters if name not in skip]


def construct(
    cls: type[Attender],
    query_dim: int,
    key_dim: int,
    value_dim: int | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """``cls(query_dim, key_dim, value_dim, **options)``; unknown options raise ``ValueError``."""
    options = dict(options or {})
    valid = option_names(cls)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for {cls.__name__}; valid options: {valid}"
            f"{did_you_mean_each(unknown, valid)}"
        )
    return cls(query_dim, key_dim, value_dim, **options)


def _source_lengths(keys: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    batch, source_len = keys.shape[:2]
    if key_padding_mask is None:
        return torch.full((batch,), source_len, dtype=torch.long, device=keys.device)
    return (~key_padding_mask).sum(dim=1)


def masked_softmax(
    scores: torch.Tensor, key_padding_mask: torch.Tensor | None, dim: int = -1
) -> torch.Tensor:
    """Softmax over the source axis that gives exactly zero weight to padded positions.

    ``scores`` is ``[batch, steps, source_len]``; the mask ``[batch, source_len]`` broadcasts over
    the steps.
    """
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask.unsqueeze(1), float("-inf"))
    return torch.softmax(scores, dim=dim)


def weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The glimpse ``g_t = V alpha_t`` (Dubois eq. 1) for ``weights [B, T, S]``, ``values [B, S, D]``."""
    return torch.bmm(weights, values)
