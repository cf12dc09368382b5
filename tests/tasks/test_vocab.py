"""Vocabularies: deterministic ids, special tokens, unknown tokens, serialization."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.vocab import (
    TARGET_SPECIALS,
    UnknownTokenError,
    Vocabulary,
    build_vocabularies,
)


def test_build_sorts_tokens_after_specials() -> None:
    vocab = Vocabulary.build([["b", "a"], ["c", "a"]])
    assert vocab.tokens == ("<pad>", "a", "b", "c")
    assert vocab.pad_id == 0 and len(vocab) == 4
    same = Vocabulary.build([["c"], ["a", "b", "b"]])
    assert same == vocab and hash(same) == hash(vocab)


def test_target_specials_and_ids() -> None:
    vocab = Vocabulary.build([["x", "y"]], specials=TARGET_SPECIALS)
    assert vocab.tokens == ("<pad>", "<sos>", "<eos>", "x", "y")
    assert (vocab.pad_id, vocab.sos_id, vocab.eos_id) == (0, 1, 2)
    assert vocab.encode(["y", "x"]) == [4, 3]
    assert vocab.decode([1, 4, 3, 2, 0]) == ["<sos>", "y", "x", "<eos>", "<pad>"]
    assert vocab.decode(torch.tensor([1, 4, 3, 2, 3, 0]), strip_specials=True) == ["y", "x"]


def test_source_vocabulary_has_no_sos_or_eos() -> None:
    vocab = Vocabulary.build([["a"]])
    with pytest.raises(ValueError, match="this vocabulary has no <sos> token"):
        _ = vocab.sos_id
    with pytest.raises(ValueError, match="has no <eos> token"):
        _ = vocab.eos_id


def test_unknown_token_error_names_token_and_place() -> None:
    vocab = Vocabulary.build([["000", "t1", "."]])
    with pytest.raises(UnknownTokenError) as info:
        vocab.encode(["000", "t7", "."], where="test.tsv line 12")
    message = str(info.value)
    assert "unknown token 't7' at test.tsv line 12" in message
    assert "not seen in the training data" in message
    assert info.value.token == "t7" and info.value.where == "test.tsv line 12"
    assert isinstance(info.value, ValueError)
    with pytest.raises(UnknownTokenError, match="unknown token 'zz':"):
        vocab.token_to_id("zz")


def test_serialization_round_trip_through_json() -> None:
    vocab = Vocabulary.build([["x", "y"]], specials=TARGET_SPECIALS)
    data = json.loads(json.dumps(vocab.to_dict()))
    assert Vocabulary.from_dict(data) == vocab
    with pytest.raises(ValueError, match="not a saved vocabulary"):
        Vocabulary.from_dict({"tokens": ["<pad>"]})
    with pytest.raises(ValueError, match="format_version"):
        Vocabulary.from_dict({**data, "format_version": 99})


@pytest.mark.parametrize(
    ("tokens", "specials", "message"),
    [
        (["a", "<pad>"], ("<pad>",), "must start with its special tokens"),
        (["<pad>", "a", "a"], ("<pad>",), "duplicate tokens in vocabulary: \\['a'\\]"),
        (["<sos>", "<pad>"], ("<sos>", "<pad>"), "must start with '<pad>'"),
        (["<pad>", ""], ("<pad>",), "non-empty strings"),
    ],
)
def test_invalid_vocabularies(tokens: list[str], specials: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Vocabulary(tokens, specials)


def test_data_tokens_may_not_be_specials() -> None:
    with pytest.raises(ValueError, match="special token\\(s\\) \\['<eos>'\\]"):
        Vocabulary.build([["a", "<eos>"]], specials=TARGET_SPECIALS)


def test_decode_rejects_out_of_range_ids() -> None:
    with pytest.raises(ValueError, match="token id 7 out of range for a vocabulary of 2"):
        Vocabulary.build([["a"]]).decode([1, 7])


def test_build_vocabularies() -> None:
    examples = [
        Seq2SeqExample(("000", "t1", "."), ("000", "110"), (0, 1, 2)),
        Seq2SeqExample(("110", "t2", "."), ("110", "100")),
    ]
    source, target = build_vocabularies(examples)
    assert source.tokens == ("<pad>", ".", "000", "110", "t1", "t2")
    assert target.tokens == ("<pad>", "<sos>", "<eos>", "000", "100", "110")
