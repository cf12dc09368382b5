"""The example and batch types shared by sequence-to-sequence tasks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
        return Seq2SeqBatch(
            source=self.source.to(device),
            source_padding_mask=self.source_padding_mask.to(device),
            target_input=self.target_input.to(device),
            target_output=self.target_output.to(device),
            gold_attention=None if self.gold_attention is None else self.gold_attention.to(device),
        )

    def __len__(self) -> int:
        return self.source.size(0)
