"""The example and batch types shared by sequence-to-sequence tasks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

BatchT = TypeVar("BatchT")


def tensors_to(batch: BatchT, device: torch.device | str, non_blocking: bool = False) -> BatchT:
    """A copy of the dataclass ``batch`` with every tensor field moved to ``device``; other fields
    (``None``, ints) are kept as they are. The one ``.to(device)`` of every batch container."""
    moved: dict[str, Any] = {}
    for field in dataclasses.fields(batch):  # type: ignore[arg-type]
        value = getattr(batch, field.name)
        if isinstance(value, torch.Tensor):
            moved[field.name] = value.to(device, non_blocking=non_blocking)
    return dataclasses.replace(batch, **moved)  # type: ignore[type-var]


@dataclass(frozen=True)
class Seq2SeqExample:
    """One source → target pair.

    ``target`` does not contain ``<eos>``. ``attention`` is the gold attention, when known: one
    source index per target token plus one for ``<eos>`` (so ``len(target) + 1`` entries), as in
    the machine-tasks TSV format (Dubois et al. 2020, Tables 1–2).
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    attention: tuple[int, ...] | None = None


@dataclass
class Seq2SeqBatch:
    """A padded batch of encoded examples, batch-first.

    * ``source``: long ``[B, S]``; ``source_padding_mask``: bool ``[B, S]`` (True = padding);
    * ``target_input``: long ``[B, T]``, ``<sos>`` followed by the target tokens;
    * ``target_output``: long ``[B, T]``, the target tokens followed by ``<eos>``, padded with
      the target vocabulary's pad id; ``T = max(len(target)) + 1``;
    * ``gold_attention``: long ``[B, T]`` aligned with ``target_output``, ``-1`` where unknown or
      padded; ``None`` when no example of the batch has gold attention.
    """

    source: torch.Tensor
    source_padding_mask: torch.Tensor
    target_input: torch.Tensor
    target_output: torch.Tensor
    gold_attention: torch.Tensor | None

    def to(self, device: torch.device | str) -> Seq2SeqBatch:
        return tensors_to(self, device)

    def __len__(self) -> int:
        return self.source.size(0)
