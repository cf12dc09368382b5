"""A trained sequence-to-sequence model on sources it was never tested on: ``attnlab translate``.

:func:`translate` reads each source as whitespace-separated tokens, as the run's data files write
them (a Lookup Tables input such as ``000 t1 t2 .``, a SCAN command such as ``jump twice after walk
left``, an English sentence of Lake & Baroni's set lower-cased with its punctuation split off:
``i m cold .``), decodes the whole list in
batches of similar length with the ``decode`` function the run's evaluation uses (its stop rules
and length budget included), and returns each output with the attention that produced it. Nothing
about a source is read from a target: there is none.

A word outside the run's source vocabulary is read as ``<unk>`` when the vocabulary has it (and
listed in ``unknown``); otherwise it is an error naming the source and the nearest known word,
since the model has no embedding for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from attnlab.checks import check_int
from attnlab.evaluation.seq2seq import decoded_steps
from attnlab.models.seq2seq import Seq2SeqOutput
from attnlab.tasks.batching import encode_examples, length_sorted_batches
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.scan_data import UNK_TOKEN
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import UnknownTokenError, Vocabulary

Decode = Callable[[torch.Tensor, torch.Tensor], Seq2SeqOutput]
"""``decode(source, source_padding_mask)``: a batch's greedy decoding, as the run's evaluation does it."""

HeadMaps = Callable[
    [torch.Tensor, torch.Tensor, Seq2SeqOutput], "tuple[torch.Tensor, list[list[str]]] | None"
]
"""``head_maps(source, source_padding_mask, decoded)``: a decoding's cross-attention of every layer
and head ``[B, layers, heads, T, S]`` and the heads' kinds, or ``None`` for a model without heads
(:func:`attnlab.experiments.seq2seq_common.decoded_cross_attention_maps`)."""


def read_sources(
    sources: Sequence[str],
    vocabulary: Vocabulary,
    origin: str | None = None,
    max_length: int | None = None,
) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each source as its tokens, with the words outside ``vocabulary`` read as ``<unk>`` when it has
    one, and those words (each once, in order). An empty source, a special token such as ``<pad>``
    (the model would read it unmasked) or more than ``max_length`` tokens (a model with a learned
    position table) is a :class:`~attnlab.tasks.tsv.DataFormatError`, an unknown word where the
    vocabulary has no ``<unk>`` an :class:`~attnlab.tasks.vocab.UnknownTokenError` (with the
    nearest known word); each names the source by its number (from 1), or, with ``origin`` (the
    file the sources were read from, one a line), by its line."""
    if isinstance(sources, str):
        raise TypeError(f"sources must be a sequence of strings, one a source, not one string: {sources!r}")
    reserved = [token for token in vocabulary.specials if token != UNK_TOKEN]
    tokens, unknown = [], []
    for number, text in enumerate(sources, start=1):
        where = f"{origin} line {number}" if origin else f"source {number}"
        if not isinstance(text, str):
            raise TypeError(f"{where}: expected a string of tokens, got {text!r}")
        words = tuple(text.split())
        problem = _problem(words, reserved, max_length)
        if problem:
            raise (
                DataFormatError(origin, number, problem) if origin else DataFormatError(where, None, problem)
            )
        for word in words:
            if word in vocabulary:
                continue
            if UNK_TOKEN not in vocabulary.specials:
                raise UnknownTokenError(word, where, vocabulary)
            if word not in unknown:
                unknown.append(word)
        tokens.append(tuple(word if word in vocabulary else UNK_TOKEN for word in words))
    return tokens, unknown


def _problem(words: tuple[str, ...], reserved: Sequence[str], max_length: int | None) -> str:
    """What makes a source's ``words`` unreadable by the model, or ``""``."""
    if not words:
        return "empty; a source needs at least one token"
    special = next((word for word in words if word in reserved), None)
    if special is not None:
        return f"the source contains the reserved token {special!r}"
    if max_length is not None and len(words) > max_length:
        return f"{len(words)} tokens, more than the {max_length} positions of the model's learned table"
    return ""


@torch.no_grad()
def translate(
    model: Any,
    source_vocabulary: Vocabulary,
    target_vocabulary: Vocabulary,
    sources: Sequence[str],
    decode: Decode,
    device: torch.device,
    *,
    origin: str | None = None,
    max_length: int | None = None,
    batch_size: int = 500,
    head_maps: HeadMaps | None = None,
) -> dict[str, Any]:
    """The outputs of ``model`` (in eval mode) for ``sources`` (see the module docstring).

    Returns ``translations``, in the order of ``sources``, each with ``source`` (its tokens, as
    the model read them), ``output`` (the decoded tokens before ``<eos>``), ``stopped`` (whether
    the model produced ``<eos>`` within the decoding budget) and ``attention`` (a list per decoded
    step, ``<eos>`` included, of the weights on the source's tokens and on any column the model
    appends to every source, e.g. an end marker: the attention ``attnlab plot`` draws); and
    ``unknown``, the source words read as ``<unk>``. ``origin``: the file ``sources`` are the lines
    of, for errors; ``max_length``: the most tokens a source may have (:func:`read_sources`). With
    ``head_maps`` and a model that has heads (a Transformer), each translation also has ``heads``,
    the attention of every decoder layer and head (``[layer][head][step][source token]``, the
    steps and columns of ``attention``, which is the last layer's mean over its heads), and the
    result ``head_names``, each layer's heads' kinds (``dot``, ``shift``, …).
    """
    check_int("batch_size", batch_size)
    tokens, unknown = read_sources(sources, source_vocabulary, origin, max_length)
    dataset = encode_examples(
        [Seq2SeqExample(source, ()) for source in tokens], source_vocabulary, target_vocabulary
    )
    model.eval()
    eos_id = target_vocabulary.eos_id
    translations: list[dict[str, Any]] = [{} for _ in tokens]
    names: list[list[str]] | None = None
    # No targets: the (empty) target lengths tie, so the batches keep the sources' order. Which
    # batch a source is decoded in does not change its output (``decode`` masks the padding and
    # budgets each row by its own length).
    for rows, batch in length_sorted_batches(dataset, batch_size):
        batch = batch.to(device)
        decoded = decode(batch.source, batch.source_padding_mask)
        assert decoded.tokens is not None
        appended = decoded.attention.size(-1) - batch.source.size(1)
        heads = head_maps(batch.source, batch.source_padding_mask, decoded) if head_maps else None
        if heads is not None:
            names = heads[1]
        steps_of = decoded_steps(decoded.tokens, target_vocabulary.pad_id)
        for row, index in enumerate(rows.tolist()):
            ids = decoded.tokens[row].tolist()
            stopped = eos_id in ids
            steps = steps_of[row]
            length = len(tokens[index]) + appended
            translations[index] = {
                "source": list(tokens[index]),
                "output": target_vocabulary.decode(ids[:steps], strip_specials=True),
                "stopped": stopped,
                "attention": decoded.attention[row, :steps, :length].cpu().tolist(),
            }
            if heads is not None:
                translations[index]["heads"] = heads[0][row, :, :, :steps, :length].cpu().tolist()
    result = {"translations": translations, "unknown": unknown}
    return result if names is None else {**result, "head_names": names}
