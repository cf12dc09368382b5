"""Encoding and batching: tensor layout, padding, gold attention, reproducible shuffling."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from attnlab.tasks.batching import (
    batches,
    bucketed_batches,
    collate,
    collate_examples,
    encode_examples,
    epoch_generator,
    length_sorted_batches,
)
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup import LookupTablesSpec, generate_lookup_tables
from attnlab.tasks.scan import generate_scan
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import UnknownTokenError, build_vocabularies

EXAMPLES = [
    Seq2SeqExample(("000", "t1", "t2", "."), ("000", "110", "100"), (0, 1, 2, 3)),
    Seq2SeqExample(("110", "t1", "."), ("110", "110")),  # no gold attention
    Seq2SeqExample(("110", "t2", "."), ("110", "100"), (0, 1, 2)),
]


@pytest.fixture()
def vocabs():
    return build_vocabularies(EXAMPLES)


def test_collate_layout_and_padding(vocabs) -> None:
    source_vocab, target_vocab = vocabs
    # source: <pad>=0 .=1 000=2 110=3 t1=4 t2=5; target: <pad> <sos> <eos> 000=3 100=4 110=5
    batch = collate_examples(EXAMPLES, source_vocab, target_vocab)
    assert batch.source.tolist() == [[2, 4, 5, 1], [3, 4, 1, 0], [3, 5, 1, 0]]
    assert batch.source_padding_mask.tolist() == [
        [False, False, False, False],
        [False, False, False, True],
        [False, False, False, True],
    ]
    assert batch.target_input.tolist() == [[1, 3, 5, 4], [1, 5, 5, 0], [1, 5, 4, 0]]
    assert batch.target_output.tolist() == [[3, 5, 4, 2], [5, 5, 2, 0], [5, 4, 2, 0]]
    assert batch.gold_attention.tolist() == [[0, 1, 2, 3], [-1, -1, -1, -1], [0, 1, 2, -1]]
    for tensor in (batch.source, batch.target_input, batch.target_output, batch.gold_attention):
        assert tensor.dtype == torch.long
    assert batch.source_padding_mask.dtype == torch.bool
    assert len(batch) == 3


def test_collate_trims_to_the_batch_and_drops_absent_attention(vocabs) -> None:
    dataset = encode_examples(EXAMPLES, *vocabs)
    assert dataset.source.shape == (3, 4) and dataset.target_output.shape == (3, 4)
    batch = collate(dataset, [1])
    assert batch.source.shape == (1, 3) and batch.target_output.shape == (1, 3)
    assert batch.gold_attention is None  # this example has none
    batch = collate(dataset, torch.tensor([2, 1]))
    assert batch.target_output.shape == (2, 3)
    assert batch.gold_attention.tolist() == [[0, 1, 2], [-1, -1, -1]]
    with pytest.raises(ValueError, match="non-empty 1-D"):
        collate(dataset, [])


def test_no_attention_anywhere_gives_none(vocabs) -> None:
    plain = [Seq2SeqExample(e.source, e.target) for e in EXAMPLES]
    dataset = encode_examples(plain, *vocabs)
    assert dataset.gold_attention is None
    assert all(b.gold_attention is None for b in batches(dataset, 2, shuffle=False))


def test_unknown_tokens_and_bad_attention_name_the_example(vocabs) -> None:
    bad = [*EXAMPLES, Seq2SeqExample(("000", "t9", "."), ("000", "111"))]
    with pytest.raises(UnknownTokenError, match="'t9' at test.tsv line 4 \\(source\\)"):
        encode_examples(bad, *vocabs, where_prefix="test.tsv", item_name="line")
    bad = [Seq2SeqExample(("000", "."), ("111",))]
    with pytest.raises(UnknownTokenError, match="'111' at example 1 \\(target\\)"):
        encode_examples(bad, *vocabs)
    bad = [Seq2SeqExample(("000", "."), ("000",), (0, 1, 2))]
    with pytest.raises(DataFormatError, match="^long1: example 1: expected 2 gold attention"):
        encode_examples(bad, *vocabs, where_prefix="long1")
    bad = [*EXAMPLES, Seq2SeqExample(("000", "."), ("000",), (0, 2))]
    with pytest.raises(DataFormatError, match="^a.tsv line 4: gold attention .* out of range 0..1"):
        encode_examples(bad, *vocabs, where_prefix="a.tsv", item_name="line")
    with pytest.raises(DataFormatError, match="^examples: example 1: empty source"):
        encode_examples([Seq2SeqExample((), ("000",))], *vocabs)


@lru_cache(maxsize=1)
def _lookup_dataset():
    data = generate_lookup_tables(LookupTablesSpec(variant="noisy", long_levels=0))
    vocabs = build_vocabularies(data["train"])
    return data, vocabs


def test_batches_cover_every_row_once_and_match_collate() -> None:
    data, vocabs = _lookup_dataset()
    dataset = encode_examples(data["validation"], *vocabs)
    seen = []
    for batch in batches(dataset, 64, shuffle=True, generator=epoch_generator(0, 0)):
        assert len(batch) <= 64
        assert batch.source.shape[1] == int((~batch.source_padding_mask).sum(1).max())
        seen.append(batch)
    assert sum(len(b) for b in seen) == 500 and len(seen) == 8
    order = torch.randperm(500, generator=epoch_generator(0, 0))
    first = collate(dataset, order[:64])
    assert torch.equal(first.source, seen[0].source)
    assert torch.equal(first.gold_attention, seen[0].gold_attention)
    assert len(list(batches(dataset, 64, shuffle=False, drop_last=True))) == 7


def test_shuffling_is_reproducible_from_the_generator_alone(vocabs) -> None:
    dataset = encode_examples(EXAMPLES * 20, *vocabs)

    def order(generator: torch.Generator) -> list[list[int]]:
        return [b.source.tolist() for b in batches(dataset, 7, shuffle=True, generator=generator)]

    torch.manual_seed(123)  # the global RNG must not matter
    a = order(epoch_generator(3, 1))
    torch.manual_seed(456)
    assert order(epoch_generator(3, 1)) == a
    assert order(torch.Generator().manual_seed(99)) == order(torch.Generator().manual_seed(99))
    assert order(epoch_generator(3, 2)) != a
    assert order(epoch_generator(4, 1)) != a
    with pytest.raises(ValueError, match="needs an explicit torch.Generator"):
        batches(dataset, 7, shuffle=True)


def test_batches_drop_last(vocabs) -> None:
    dataset = encode_examples(EXAMPLES * 5, *vocabs)
    assert [len(b) for b in batches(dataset, 4, shuffle=False)] == [4, 4, 4, 3]
    assert [len(b) for b in batches(dataset, 4, shuffle=False, drop_last=True)] == [4, 4, 4]
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        batches(dataset, 0, shuffle=False)


def test_batch_to_device_and_dataset_to(vocabs) -> None:
    dataset = encode_examples(EXAMPLES, *vocabs).to("cpu")
    batch = collate(dataset, [0, 2]).to("cpu")
    assert batch.gold_attention.device.type == "cpu"


def test_encoding_a_whole_split_round_trips() -> None:
    data, vocabs = _lookup_dataset()
    examples = data["train"] + data["interpolation"]
    dataset = encode_examples(examples, *vocabs)
    assert len(dataset) == 11_932
    for i in (0, 5000, 11_931):
        row = collate(dataset, [i])
        ex = examples[i]
        assert vocabs[0].decode(row.source[0]) == list(ex.source)
        assert vocabs[1].decode(row.target_output[0], strip_specials=True) == list(ex.target)
        assert tuple(row.gold_attention[0].tolist()) == ex.attention


def test_bucketed_batches_cover_the_epoch_once_in_length_sorted_batches():
    examples = generate_scan()[::40]
    source, target = build_vocabularies(examples)
    dataset = encode_examples(examples, source, target)
    seen, spreads = [], []
    for batch in bucketed_batches(dataset, 8, torch.Generator().manual_seed(0), pool=4):
        lengths = (batch.target_output != 0).sum(1)
        seen.append(len(batch))
        spreads.append(int(lengths.max() - lengths.min()))
    assert sum(seen) == len(examples)
    assert sum(spreads) / len(spreads) < 8
    first = [b.source.tolist() for b in bucketed_batches(dataset, 8, torch.Generator().manual_seed(0), 4)]
    second = [b.source.tolist() for b in bucketed_batches(dataset, 8, torch.Generator().manual_seed(0), 4)]
    assert first == second


def test_length_sorted_batches_cover_every_row_once_shortest_first_with_their_rows():
    examples = generate_scan()[::40]
    source, target = build_vocabularies(examples)
    dataset = encode_examples(examples, source, target)
    seen, longest_before = [], 0
    for rows, batch in length_sorted_batches(dataset, 16):
        assert torch.equal(batch.source, collate(dataset, rows).source)
        lengths = dataset.target_lengths[rows]
        assert int(lengths.min()) >= longest_before  # each batch starts where the last one ended
        longest_before = int(lengths.max())
        seen += rows.tolist()
    assert sorted(seen) == list(range(len(examples))) and len(seen) == len(examples)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        next(length_sorted_batches(dataset, 0))
