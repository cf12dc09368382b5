"""Encoding examples once into padded tensors, and cutting them into :class:`Seq2SeqBatch` es.

:func:`encode_examples` turns a split into an :class:`EncodedDataset`: every example padded to
the split's longest source / target, stored in one tensor per field. :func:`collate` gathers
rows and trims them to the batch's own longest lengths, so batching costs a few tensor indexing
operations. :func:`batches` iterates over a split, shuffled from a
``torch.Generator`` alone (seed it with e.g. :func:`epoch_generator` for an exactly resumable
order); :func:`bucketed_batches` does so in batches of similar target length.

Layout (see :class:`Seq2SeqBatch`): ``target_input = <sos> + target``,
``target_output = target + <eos>``, both ``T = len(target) + 1`` long before padding; gold
attention (Dubois et al. 2020, Tables 1–2) aligned with ``target_output`` and ``-1`` where an
example has none or where padded.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.checks import check_int
from attnlab.tasks.examples import Seq2SeqBatch, Seq2SeqExample, tensors_to
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import UnknownTokenError, Vocabulary

#: Gold-attention value for "unknown or padding".
NO_ATTENTION = -1


@dataclass(frozen=True, eq=False)
class EncodedDataset:
    """A split encoded as padded long tensors (rows = examples), built by :func:`encode_examples`.

    ``source``/``target_input``/``target_output``/``gold_attention`` are ``[N, S_max]`` /
    ``[N, T_max]``; ``source_lengths`` and ``target_lengths`` (``len(target) + 1``) are ``[N]``;
    ``has_attention`` is bool ``[N]``; ``gold_attention`` is ``None`` when no example has any.
    """

    source: torch.Tensor
    source_lengths: torch.Tensor
    target_input: torch.Tensor
    target_output: torch.Tensor
    target_lengths: torch.Tensor
    gold_attention: torch.Tensor | None
    has_attention: torch.Tensor
    source_pad_id: int
    target_pad_id: int

    def __len__(self) -> int:
        return self.source.size(0)

    def to(self, device: torch.device | str) -> EncodedDataset:
        """The same data on ``device`` (e.g. to batch directly on the GPU)."""
        return tensors_to(self, device)


# --------------------------------------------------------------------------------------------
# Encoding.


def encode_examples(
    examples: Sequence[Seq2SeqExample],
    source_vocab: Vocabulary,
    target_vocab: Vocabulary,
    *,
    where_prefix: str = "",
    item_name: str = "example",
) -> EncodedDataset:
    """Encode and pad a whole split once.

    Errors name the example as ``f"{where_prefix} {item_name} {i + 1}"``; for a file read with
    :func:`attnlab.tasks.tsv.read_tsv` pass ``where_prefix=str(path), item_name="line"`` (its
    example ``i`` is on line ``i + 1``). Unknown tokens raise
    :class:`~attnlab.tasks.vocab.UnknownTokenError`; empty sources and malformed attention raise
    :class:`~attnlab.tasks.tsv.DataFormatError` (both ``ValueError`` s).
    """
    sources, targets, attentions = [], [], []
    for i, example in enumerate(examples):
        try:
            source, target = _encode_pair(example, source_vocab, target_vocab)
            _check_attention(example)
        except (_ExampleError, UnknownTokenError) as error:
            raise _locate(error, where_prefix, item_name, i + 1) from None
        sources.append(source)
        targets.append(target)
        attentions.append(example.attention)
    return _assemble(sources, targets, attentions, source_vocab, target_vocab)


class _ExampleError(Exception):
    """A problem with one example, before its location is known."""


def _locate(
    error: Exception, where_prefix: str, item_name: str, number: int
) -> DataFormatError | UnknownTokenError:
    if isinstance(error, UnknownTokenError):
        side, vocabulary = error.where, error.vocabulary
        where = " ".join(p for p in (where_prefix, item_name, str(number), side) if p)
        return UnknownTokenError(error.token, where, vocabulary)
    if where_prefix and item_name == "line":
        return DataFormatError(where_prefix, number, str(error))
    return DataFormatError(where_prefix or "examples", None, f"{item_name} {number}: {error}")


def _encode_pair(
    example: Seq2SeqExample, source_vocab: Vocabulary, target_vocab: Vocabulary
) -> tuple[list[int], list[int]]:
    if not example.source:
        raise _ExampleError("empty source; every example needs at least one source token")
    try:
        source = source_vocab.encode(example.source)
    except UnknownTokenError as error:
        raise UnknownTokenError(error.token, "(source)", source_vocab) from None
    try:
        target = target_vocab.encode(example.target)
    except UnknownTokenError as error:
        raise UnknownTokenError(error.token, "(target)", target_vocab) from None
    return source, target


def _check_attention(example: Seq2SeqExample) -> None:
    attention = example.attention
    if attention is None:
        return
    if len(attention) != len(example.target) + 1:
        raise _ExampleError(
            f"expected {len(example.target) + 1} gold attention indices "
            f"(len(target) + 1, the last for <eos>), got {len(attention)}"
        )
    if attention and not 0 <= min(attention) <= max(attention) < len(example.source):
        raise _ExampleError(f"gold attention {list(attention)} out of range 0..{len(example.source) - 1}")


def _padded(rows: Sequence[Sequence[int]], lengths: np.ndarray, width: int, fill: int) -> np.ndarray:
    """``[len(rows), width]`` array with row ``i`` starting with ``rows[i]``, then ``fill``."""
    out = np.full((len(rows), width), fill, dtype=np.int64)
    mask = np.arange(width) < lengths[:, None]
    out[mask] = np.fromiter(itertools.chain.from_iterable(rows), np.int64, int(lengths.sum()))
    return out


def _assemble(
    sources: list[list[int]],
    targets: list[list[int]],
    attentions: list[tuple[int, ...] | None],
    source_vocab: Vocabulary,
    target_vocab: Vocabulary,
) -> EncodedDataset:
    n = len(sources)
    source_lengths = np.fromiter(map(len, sources), np.int64, n)
    plain_lengths = np.fromiter(map(len, targets), np.int64, n)
    width_s = int(source_lengths.max()) if n else 0
    width_t = int(plain_lengths.max()) + 1 if n else 1
    pad = target_vocab.pad_id

    source = _padded(sources, source_lengths, width_s, source_vocab.pad_id)
    plain = _padded(targets, plain_lengths, width_t, pad)
    target_output = plain.copy()
    target_output[np.arange(n), plain_lengths] = target_vocab.eos_id
    target_input = np.concatenate(
        [np.full((n, 1), target_vocab.sos_id, dtype=np.int64), plain[:, :-1]], axis=1
    )

    has_attention = np.fromiter((a is not None for a in attentions), bool, n)
    gold = None
    if has_attention.any():
        gold = np.full((n, width_t), NO_ATTENTION, dtype=np.int64)
        known = [a for a in attentions if a is not None]
        known_lengths = plain_lengths[has_attention] + 1
        gold[has_attention] = _padded(known, known_lengths, width_t, NO_ATTENTION)

    return EncodedDataset(
        source=torch.from_numpy(source),
        source_lengths=torch.from_numpy(source_lengths),
        target_input=torch.from_numpy(target_input),
        target_output=torch.from_numpy(target_output),
        target_lengths=torch.from_numpy(plain_lengths + 1),
        gold_attention=None if gold is None else torch.from_numpy(gold),
        has_attention=torch.from_numpy(has_attention),
        source_pad_id=source_vocab.pad_id,
        target_pad_id=pad,
    )


# --------------------------------------------------------------------------------------------
# Batching.


def collate(dataset: EncodedDataset, indices: torch.Tensor | Sequence[int]) -> Seq2SeqBatch:
    """The batch of rows ``indices`` of ``dataset``, trimmed to the batch's longest lengths.

    ``gold_attention`` is ``None`` when none of these examples has gold attention.
    """
    given = torch.as_tensor(indices)
    if given.ndim != 1 or given.numel() == 0:
        raise ValueError(f"collate needs a non-empty 1-D list of indices, got shape {tuple(given.shape)}")
    if given.is_floating_point() or given.dtype == torch.bool:  # a mask would be read as rows 0 and 1
        raise ValueError(f"collate needs row indices (ints), got {given.dtype}")
    index = given.to(dtype=torch.long, device=dataset.source.device)
    if bool(((index < 0) | (index >= len(dataset))).any()):
        raise ValueError(
            f"collate: indices must lie in [0, {len(dataset)}) for this dataset, got {index.tolist()[:10]}"
        )
    source_lengths = dataset.source_lengths[index]
    width_s = int(source_lengths.max())
    width_t = int(dataset.target_lengths[index].max())
    positions = torch.arange(width_s, device=index.device)
    gold = None
    if dataset.gold_attention is not None and bool(dataset.has_attention[index].any()):
        gold = dataset.gold_attention[index, :width_t]
    return Seq2SeqBatch(
        source=dataset.source[index, :width_s],
        source_padding_mask=positions[None, :] >= source_lengths[:, None],
        target_input=dataset.target_input[index, :width_t],
        target_output=dataset.target_output[index, :width_t],
        gold_attention=gold,
    )


def collate_examples(
    examples: Sequence[Seq2SeqExample], source_vocab: Vocabulary, target_vocab: Vocabulary
) -> Seq2SeqBatch:
    """Encode ``examples`` and return them as one batch, in order."""
    dataset = encode_examples(examples, source_vocab, target_vocab)
    return collate(dataset, torch.arange(len(dataset)))


def batch_order(n: int, *, shuffle: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """Row order of one pass: ``0 … n-1``, or a permutation drawn from ``generator`` alone."""
    if not shuffle:
        return torch.arange(n)
    if generator is None:
        raise ValueError(
            "shuffle=True needs an explicit torch.Generator so that the order is reproducible "
            "(e.g. attnlab.tasks.batching.epoch_generator(seed, epoch))"
        )
    return torch.randperm(n, generator=generator, device=generator.device).cpu()


def batches(
    dataset: EncodedDataset,
    batch_size: int,
    *,
    shuffle: bool,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> Iterator[Seq2SeqBatch]:
    """Yield the batches of one pass over ``dataset`` (the last one smaller unless ``drop_last``).

    With ``shuffle=True`` the order depends only on ``generator``'s state (required); the
    permutation is drawn by this call, before the first batch is asked for.
    """
    check_int("batch_size", batch_size)
    order = batch_order(len(dataset), shuffle=shuffle, generator=generator)
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    starts = range(0, stop, batch_size)
    return (collate(dataset, order[start : start + batch_size]) for start in starts)


def length_sorted_batches(
    dataset: EncodedDataset, batch_size: int
) -> Iterator[tuple[torch.Tensor, Seq2SeqBatch]]:
    """One pass for evaluation in batches of similar target length: the rows sorted by target
    length (stable, so ties keep their order), cut into batches of ``batch_size``; yields each
    batch with its row indices, so results can be put back in the dataset's order.

    Greedy decoding runs until a batch's longest output ends and teacher forcing pads to its longest
    target, so batches of equal lengths do far less work (SCAN validation: 2.5x less CPU than
    batches in dataset order, docs/results.md, issue 28, session 28). The model never sees the
    lengths: masking makes each row's result independent of the batch it is in, up to float
    rounding.
    """
    check_int("batch_size", batch_size)
    order = torch.argsort(dataset.target_lengths.cpu(), stable=True)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        yield rows, collate(dataset, rows)


def bucketed_batches(
    dataset: EncodedDataset, batch_size: int, generator: torch.Generator, pool: int
) -> Iterator[Seq2SeqBatch]:
    """One shuffled pass in batches of similar target length: the shuffled order is cut into pools
    of ``pool`` batches, each pool is sorted by target length and cut into batches, and the
    batches are shuffled. Everything is drawn from ``generator``, so the order is exactly
    resumable (as for :func:`batches`)."""
    for rows in bucketed_order(dataset, batch_size, generator, pool):
        yield collate(dataset, rows)


def bucketed_order(
    dataset: EncodedDataset, batch_size: int, generator: torch.Generator, pool: int
) -> list[torch.Tensor]:
    """The row indices of each batch of :func:`bucketed_batches`, in order."""
    check_int("batch_size", batch_size)
    check_int("pool", pool)  # batches sorted together
    order = batch_order(len(dataset), shuffle=True, generator=generator)
    chunks: list[torch.Tensor] = []
    for start in range(0, len(order), batch_size * pool):
        part = order[start : start + batch_size * pool]
        part = part[torch.argsort(dataset.target_lengths[part], stable=True)]
        chunks += list(part.split(batch_size))
    return [chunks[index] for index in torch.randperm(len(chunks), generator=generator).tolist()]


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, epoch)`` only, for resumable per-epoch shuffles."""
    digest = hashlib.sha256(f"attnlab.batching:{seed}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)
