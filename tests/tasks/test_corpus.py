"""WikiText / PTB corpus reading, LM vocabularies and TBPTT stream batching with document flags."""

from collections import Counter
from pathlib import Path

import pytest
import torch

from attnlab.tasks.corpus import (
    EncodedCorpus,
    build_lm_vocabulary,
    copy_pattern_documents,
    count_words,
    encode_corpus_file,
    encode_documents,
    find_split_files,
    is_article_heading,
    make_streams,
    normalize_token,
    read_lines,
    read_vocabulary_file,
    segments,
    vocabulary_file_difference,
    write_vocabulary_file,
    write_wikitext_folder,
)
from attnlab.tasks.tsv import DataFormatError

WIKITEXT = (
    " \n"
    " = First Article = \n"
    " \n"
    " The cat sat on 3 mats . \n"
    " = = Section = = \n"
    " The dog sat . \n"
    " = Second Article = \n"
    " A cat in 1,000 hats . \n"
)


@pytest.fixture
def wikitext_file(tmp_path) -> Path:
    path = tmp_path / "train.txt"
    path.write_text(WIKITEXT)
    return path


def test_article_headings_start_documents_and_every_line_ends_in_eos(wikitext_file):
    lines = list(read_lines(wikitext_file))
    assert [line.number for line in lines if line.starts_document] == [1, 7]  # leading blank joins article 1
    assert lines[0].tokens == ["<eos>"] and lines[3].tokens[-1] == "<eos>"
    assert sum(len(line.tokens) for line in lines) == len(WIKITEXT.split()) + len(lines)
    assert is_article_heading(" = Title = \n") and not is_article_heading(" = = Section = = \n")
    # No headings, or documents="none": the file is one document.
    assert [line.number for line in read_lines(wikitext_file, documents="none") if line.starts_document] == [
        1
    ]


def test_number_normalisation():
    assert [normalize_token(t) for t in ["3", "1,000", "3.5", "-2", "1990s", "N", "a1"]] == [
        "N",
        "N",
        "N",
        "N",
        "1990s",
        "N",
        "a1",
    ]


def test_vocabulary_is_capped_by_frequency_and_unknown_words_become_unk(wikitext_file, tmp_path):
    counts = count_words(wikitext_file, normalize_numbers=True)
    assert counts["N"] == 2 and counts["<eos>"] == 8
    vocabulary = build_lm_vocabulary(counts, max_size=5)
    assert vocabulary.tokens[:3] == ("<pad>", "<unk>", "<eos>")
    # <unk>, <eos> and the 3 most frequent words (ties in string order); <pad> is not counted.
    assert vocabulary.tokens[3:] == ("=", ".", "Article") and len(vocabulary) == 6
    corpus = encode_corpus_file(wikitext_file, vocabulary, normalize_numbers=True)
    assert len(corpus) == sum(counts.values()) and corpus.document_starts.tolist() == [0, 26]
    assert int((corpus.tokens == vocabulary.token_to_id("<unk>")).sum()) == sum(
        count for word, count in counts.items() if word not in vocabulary
    )
    write_vocabulary_file(tmp_path / "vocab.txt", vocabulary)
    assert read_vocabulary_file(tmp_path / "vocab.txt") == vocabulary
    assert build_lm_vocabulary(Counter({"a": 2, "b": 1}), min_count=2).tokens[3:] == ("a",)
    assert vocabulary_file_difference(tmp_path / "vocab.txt", vocabulary) is None
    other = build_lm_vocabulary(Counter({"=": 3, ".": 2, "b": 1}))
    assert vocabulary_file_difference(tmp_path / "vocab.txt", other) == (
        "6 vs 6 tokens, first difference at line 6"
    )
    shorter = build_lm_vocabulary(Counter({"=": 3, ".": 2}))
    assert vocabulary_file_difference(tmp_path / "vocab.txt", shorter) == (
        "6 vs 5 tokens, first difference at line 6"
    )


def test_split_files_in_wikitext_and_ptb_layouts(tmp_path):
    for name in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"):
        (tmp_path / name).write_text(" a b \n")
    assert find_split_files(tmp_path)["valid"].name == "ptb.valid.txt"
    (tmp_path / "ptb.test.txt").unlink()
    with pytest.raises(
        DataFormatError, match=r"no test split: expected one of the files test.txt, wiki.test"
    ):
        find_split_files(tmp_path)
    with pytest.raises(DataFormatError, match="no such corpus folder"):
        find_split_files(tmp_path / "missing")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (" \n \n", None, "empty"),
        ("", None, "empty"),
        (" a b \n c <eos> d \n", 2, "reserved token '<eos>'"),
        (" a \n b \xff \n", 2, "UTF-8"),
    ],
)
def test_bad_corpus_files_name_file_and_line(tmp_path, text, line, message):
    path = tmp_path / "train.txt"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    with pytest.raises(DataFormatError, match=message) as error:
        list(read_lines(path))
    assert error.value.path == str(path) and error.value.line == line


def test_bad_vocabulary_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<pad>\n<unk>\n<eos>\na\nb c\n")
    with pytest.raises(DataFormatError, match="one token per line") as error:
        read_vocabulary_file(path)
    assert error.value.line == 5
    path.write_text("<pad>\n<unk>\n<eos>\na\na\n")
    with pytest.raises(DataFormatError, match="duplicate token 'a' \\(first on line 4\\)"):
        read_vocabulary_file(path)
    path.write_text("a\nb\n")
    with pytest.raises(DataFormatError, match="starts with"):
        read_vocabulary_file(path)


def _corpus(lengths: list[int]) -> EncodedCorpus:
    """Documents of the given lengths; token ids 10, 11, … so every step is identifiable."""
    total = sum(lengths)
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0)[:-1].tolist()])
    return EncodedCorpus(torch.arange(10, 10 + total), starts)


def _steps(streams):
    """(input, target, reset) of every real step, stream by stream."""
    real = streams.targets != streams.pad_id
    return [
        (int(i), int(t), bool(r))
        for row in range(streams.batch_size)
        for i, t, r in zip(
            streams.inputs[row][real[row]], streams.targets[row][real[row]], streams.resets[row][real[row]]
        )
    ]


@pytest.mark.parametrize("layout", ["contiguous", "documents"])
def test_streams_hold_every_step_once_with_document_flags(layout):
    corpus = _corpus([5, 3, 7, 2, 6])
    streams = make_streams(corpus, 3, eos_id=2, pad_id=0, layout=layout)
    steps = _steps(streams)
    assert sorted(target for _, target, _ in steps) == list(range(10, 33))
    by_target = {target: (inputs, reset) for inputs, target, reset in steps}
    for start in corpus.document_starts.tolist():  # a document's first step reads <eos>, resets
        assert by_target[10 + start] == (2, True)
    for target in range(10, 33):
        if target - 10 not in corpus.document_starts.tolist():
            assert by_target[target][0] == target - 1  # otherwise the previous token of the document
    if layout == "documents":  # whole documents: resets exactly at document starts
        assert sum(reset for _, _, reset in steps) == corpus.num_documents
        assert streams.length == 8  # longest first to the shortest stream: [7], [6, 2], [5, 3]


@pytest.mark.parametrize("layout", ["contiguous", "documents"])
def test_streams_know_the_corpus_position_of_every_target(layout):
    corpus = _corpus([5, 3, 7, 2, 6])
    streams = make_streams(corpus, 3, eos_id=2, pad_id=0, layout=layout)
    real = streams.targets != streams.pad_id
    assert torch.equal(streams.positions[~real], torch.full_like(streams.positions[~real], -1))
    assert torch.equal(corpus.tokens[streams.positions[real]], streams.targets[real])
    assert sorted(streams.positions[real].tolist()) == list(range(len(corpus)))
    pieces = list(segments(streams, 4))
    assert torch.equal(torch.cat([piece.positions for piece in pieces], 1), streams.positions)


def test_contiguous_streams_are_the_classic_batchify_with_padding():
    streams = make_streams(_corpus([10]), 4, eos_id=2, pad_id=0)
    assert streams.length == 3 and streams.num_targets == 10
    assert streams.targets.tolist() == [[10, 11, 12], [13, 14, 15], [16, 17, 18], [19, 0, 0]]
    assert streams.resets[:, 0].all()  # a stream starts without context
    auto = make_streams(_corpus([10]), 4, eos_id=2, pad_id=0, layout="auto")  # one document: cannot pack
    assert torch.equal(auto.targets, streams.targets)


def test_segments_cover_the_streams_in_order():
    streams = make_streams(_corpus([4, 9, 3, 8]), 2, eos_id=2, pad_id=0)
    pieces = list(segments(streams, 5))
    assert [piece.inputs.shape[1] for piece in pieces] == [5, 5, 2]
    assert torch.equal(torch.cat([p.targets for p in pieces], 1), streams.targets)
    assert len(list(segments(streams, 5, max_segments=2))) == 2
    assert sum(piece.num_targets for piece in pieces) == 24


def test_synthetic_copy_corpus_round_trips_through_the_wikitext_layout(tmp_path):
    generator = torch.Generator().manual_seed(0)
    documents = copy_pattern_documents(3, lines_per_document=2, span=4, generator=generator)
    assert all(line[:4] == line[5:] and line[4] == ";" for doc in documents for line in doc)
    folder = write_wikitext_folder(tmp_path, {"train": documents})
    vocabulary = build_lm_vocabulary(count_words(folder / "train.txt"))
    corpus = encode_corpus_file(folder / "train.txt", vocabulary)
    assert corpus.num_documents == 3 and len(corpus) == 3 * (5 + 2 * 10)
    again = encode_documents([["a", "b", "<eos>"], ["c", "<eos>"]], vocabulary)
    assert again.document_starts.tolist() == [0, 3] and len(again) == 5
