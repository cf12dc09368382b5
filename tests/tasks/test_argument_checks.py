"""Task helpers refuse arguments they would otherwise turn into wrong data without a word: a
bool mask read as row indices, an empty epoch, an unknown layout read as the default, a split
that is not reproducible, a vocabulary of characters, a broadcast accuracy."""

import re

import pytest
import torch

from attnlab.tasks.batching import bucketed_order, collate, encode_examples
from attnlab.tasks.corpus import EncodedCorpus, make_streams, read_lines
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup_machine_tasks import machine_tasks_test_set_names
from attnlab.tasks.memory_problems import generate_memory_batch, is_correct
from attnlab.tasks.splits import random_hold_out
from attnlab.tasks.vocab import Vocabulary, build_vocabularies

EXAMPLES = [
    Seq2SeqExample(("a", "b"), ("x",)),
    Seq2SeqExample(("b",), ("y", "x")),
    Seq2SeqExample(("a",), ("y",)),
]


@pytest.fixture
def dataset():
    return encode_examples(EXAMPLES, *build_vocabularies(EXAMPLES))


@pytest.mark.parametrize(
    ("indices", "message"),
    [
        ([True, False, True], "collate needs row indices (ints), got torch.bool"),
        ([0.5], "collate needs row indices (ints), got torch.float32"),
        ([5], "indices must lie in [0, 3)"),
    ],
)
def test_collate_refuses_what_is_not_a_row_index(dataset, indices, message):
    """The mask gave rows 1, 0, 1; 0.5 gave row 0."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        collate(dataset, indices)


@pytest.mark.parametrize(("batch_size", "pool"), [(-1, 2), (2, -1), (0, 2), (2, 1.5)])
def test_bucketed_batches_refuse_sizes_that_make_an_empty_epoch(dataset, batch_size, pool):
    with pytest.raises(ValueError, match="must be an int >= 1"):
        bucketed_order(dataset, batch_size, torch.Generator().manual_seed(0), pool)


@pytest.mark.parametrize("seed", [None, 0.5, "a"])
def test_a_random_split_needs_an_int_seed(seed):
    """random.Random(None) seeds from the clock: a split that differs on every run."""
    with pytest.raises(ValueError, match=f"seed must be an int, got {seed!r}"):
        random_hold_out(list(range(10)), 3, seed)


@pytest.mark.parametrize("size", [-1, 11])
def test_a_random_split_holds_out_what_there_is(size):
    with pytest.raises(ValueError, match=r"size must be an int in \[0, 10\]"):
        random_hold_out(list(range(10)), size, 0)


def test_a_vocabulary_is_built_from_token_lists_not_strings():
    with pytest.raises(
        ValueError, match="each sequence must be a list of tokens, got the string 'jump walk'"
    ):
        Vocabulary.build(["jump walk"])


def test_memory_problem_accuracy_needs_matching_shapes():
    """A [B, 1] output against [B] targets broadcast to [B, B]: accuracy 0.5 where it is 1.0."""
    with pytest.raises(ValueError, match=r"both be \[batch\], got \(2, 1\) and \(2,\)"):
        is_correct(torch.tensor([[0.5], [0.9]]), torch.tensor([0.5, 0.9]))
    assert is_correct(torch.tensor([0.5, 0.9]), torch.tensor([0.5, 0.9])).tolist() == [True, True]


@pytest.mark.parametrize("starts", [[0, 3, 2], [0, 9], [1]])
def test_a_corpus_needs_increasing_document_starts(starts):
    """Unsorted starts gave document lengths [2, -1, 2]."""
    with pytest.raises(ValueError, match="document_starts must be increasing token positions from 0"):
        EncodedCorpus(torch.arange(5), torch.tensor(starts))


def test_the_longer_test_sets_need_a_count():
    with pytest.raises(ValueError, match="n_longer must be an int >= 0, got -1"):
        machine_tasks_test_set_names(-1)


def test_an_unknown_stream_layout_is_named():
    """ "contigous" fell into the auto branch: the documents layout without a word."""
    corpus = EncodedCorpus(torch.tensor([3, 4, 2, 5, 2]), torch.tensor([0, 3]))
    expected = (
        "layout must be one of ['auto', 'contiguous', 'documents'], got 'contigous'; "
        "did you mean 'contiguous'?"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        make_streams(corpus, 2, eos_id=2, pad_id=0, layout="contigous")


def test_an_unknown_document_rule_is_named(tmp_path):
    """ "Wikitext" made the whole file one document."""
    path = tmp_path / "corpus.txt"
    path.write_text(" = Heading = \nsome words\n")
    expected = (
        "documents must be one of ['auto', 'wikitext', 'none'], got 'Wikitext'; did you mean 'wikitext'?"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        list(read_lines(path, documents="Wikitext"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"generator": 0}, "generator must be a torch.Generator"),
        ({"dtype": torch.long}, "dtype must be a floating-point dtype, got torch.int64"),
    ],
)
def test_memory_problems_name_a_seed_for_a_generator_and_an_integer_dtype(options, message):
    arguments = {"generator": torch.Generator().manual_seed(0), "dtype": torch.float32, **options}
    with pytest.raises(ValueError, match=message):
        generate_memory_batch("addition", 2, 60, **arguments)
