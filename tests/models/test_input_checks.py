"""Bad input to the public modules is a ``ValueError`` naming the argument and what was expected,
never a number computed from it: left padding where a module reads a row's last word, a batch that
does not match, an empty target, integer states pooled to zeros, a size that builds no units."""

import re

import pytest
import torch

from attnlab.attention import MeanPooling, build_attender
from attnlab.attention.memory_window import NGramConcatenation, SlidingWindowAttention
from attnlab.attention.syntactic import ShiftedBidirectionalEncoder
from attnlab.models.gru_attention import GRUAttentionSeq2Seq
from attnlab.models.language_model import LanguageModel
from attnlab.models.seq2seq import RecurrentSeq2Seq
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.models.transformer import TransformerSeq2Seq

SOURCE_VOCAB, TARGET_VOCAB, SOS = 12, 9, 1
MODELS = {
    "recurrent": lambda: RecurrentSeq2Seq(SOURCE_VOCAB, TARGET_VOCAB, embedding_dim=8, hidden_dim=16),
    "gru_attention": lambda: GRUAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, embedding_dim=8, encoder_hidden_dim=6, decoder_hidden_dim=12
    ),
    "syntactic_attention": lambda: SyntacticAttentionSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, embedding_dim=8, encoder_hidden_dim=6, decoder_hidden_dim=12
    ),
    "transformer": lambda: TransformerSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, d_model=16, heads=2, encoder_layers=1, decoder_layers=1, ff_dim=32
    ),
}
RIGHT_PADDED_MODELS = ["recurrent", "gru_attention", "syntactic_attention", "transformer"]
"""The models that run an RNN over the source in order and read each row's last real word (the
Transformer: its end position, and absolute positions counted from the first column)."""

SOURCE = torch.tensor([[3, 4, 5], [6, 7, 0]])
MASK = SOURCE == 0
TARGET_INPUT = torch.tensor([[SOS, 3, 4], [SOS, 5, 6]])


def _model(name):
    torch.manual_seed(0)
    return MODELS[name]().eval()


@pytest.mark.parametrize("name", RIGHT_PADDED_MODELS)
def test_left_padding_is_refused_where_a_model_reads_the_last_word(name):
    """It ran before and gave other numbers (the GRU's final state was read at a padding step)."""
    model = _model(name)
    left = torch.tensor([[3, 4, 5], [0, 6, 7]])
    with pytest.raises(ValueError, match=r"source_padding_mask must be right-padded .* rows 1 have a real"):
        model(left, left == 0, TARGET_INPUT)
    with pytest.raises(ValueError, match="right-padded"):
        model.greedy_decode(left, left == 0, max_length=4)
    assert model(SOURCE, MASK, TARGET_INPUT).logits.shape == (2, 3, TARGET_VOCAB)


def test_the_local_encoder_reads_left_padding_as_right_padding():
    """Its final state is a pooled summary and its window sees no padding: any layout is the same."""
    torch.manual_seed(0)
    model = RecurrentSeq2Seq(
        SOURCE_VOCAB, TARGET_VOCAB, embedding_dim=8, hidden_dim=16, encoder="local"
    ).eval()
    left = torch.tensor([[3, 4, 5], [0, 6, 7]])
    torch.testing.assert_close(
        model(left, left == 0, TARGET_INPUT).logits, model(SOURCE, MASK, TARGET_INPUT).logits
    )


def test_the_shifted_encoder_refuses_left_padding():
    encoder = ShiftedBidirectionalEncoder(4, 3)
    inputs = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="ShiftedBidirectionalEncoder: padding_mask must be right-padded"):
        encoder(inputs, torch.tensor([[False, False, False], [True, False, False]]))


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize(
    "target_input",
    [
        torch.tensor([[SOS, 3, 4]]),  # one row for two sources
        torch.zeros(2, 0, dtype=torch.long),  # no steps
        torch.tensor([[SOS, 3.0], [SOS, 4.0]]),  # not token ids
        torch.tensor([SOS, SOS]),  # not a batch
    ],
    ids=["batch", "empty", "float", "1-d"],
)
def test_a_target_input_that_does_not_fit_the_source_is_named(name, target_input):
    with pytest.raises(ValueError, match=r"target_input must be token ids .* \[batch=2, steps ≥ 1\]"):
        _model(name)(SOURCE, MASK, target_input)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("max_length", [0, -1, 2.5])
def test_greedy_decoding_needs_a_step_budget(name, max_length):
    with pytest.raises(ValueError, match=f"max_length must be an int >= 1, got {max_length!r}"):
        _model(name).greedy_decode(SOURCE, MASK, max_length=max_length)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_one_dimensional_source_is_named_as_such(name):
    with pytest.raises(ValueError, match=r"masks a batch \[batch, length\].*shape \(3,\)"):
        _model(name).greedy_decode(SOURCE[0], MASK[0], max_length=3)


@pytest.mark.parametrize("variant", ["lstm", "attention", "ngram"])
@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("resets", torch.tensor([[1, 0, 0], [0, 0, 0]])),  # ints: ~ made -2 and -1 of them
        ("resets", torch.tensor([[True, False, False]])),  # one row for two
        ("padding_mask", torch.zeros(2, 4, dtype=torch.bool)),  # a step too many
    ],
    ids=["int-resets", "one-row-resets", "long-mask"],
)
def test_language_model_resets_and_mask_are_checked_before_the_lstm_runs(variant, argument, value):
    torch.manual_seed(0)
    options = {"ngram": 3} if variant == "ngram" else {}
    model = LanguageModel(20, variant=variant, embedding_dim=6, hidden_dim=12, **options)
    inputs = torch.tensor([[3, 4, 5], [6, 7, 8]])
    with pytest.raises(
        ValueError, match=rf"LanguageModel: {argument} must be a bool tensor of shape \(2, 3\)"
    ):
        model(inputs, **{argument: value})


def test_mean_pooling_refuses_integer_states():
    """1/T in integers is 0: every context vector was zero without a word."""
    with pytest.raises(ValueError, match="MeanPooling: states must be floating point, got torch.int64"):
        MeanPooling()(torch.ones(2, 3, 4, dtype=torch.long))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: build_attender("multiplicative", 0, 0),
            "MultiplicativeAttender: query_dim must be an int >= 1, got 0",
        ),
        (
            lambda: build_attender("additive", 4, 4, -2),
            "AdditiveAttender: value_dim must be an int >= 1, got -2",
        ),
        (
            lambda: build_attender("location", 4.0, 4),
            "LocationAttender: query_dim must be an int >= 1, got 4.0",
        ),
        (lambda: MeanPooling(-3), "MeanPooling: input_dim must be an int >= 1, got -3"),
        (
            lambda: NGramConcatenation(slice_dim=-2, n=3),
            "NGramConcatenation: slice_dim must be an int >= 1, got -2",
        ),
        (
            lambda: SlidingWindowAttention(4, 4, window=2.5),
            "SlidingWindowAttention: window must be an int >= 1, got 2.5",
        ),
        (
            lambda: build_attender("shift", 4, 4, moves="forward"),
            "option moves must be a list of moves, got the string 'forward'",
        ),
    ],
    ids=["zero", "negative", "float", "pooling", "ngram", "window", "moves-string"],
)
def test_sizes_that_build_no_units_are_named_at_construction(build, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


@pytest.mark.parametrize("name", ["additive", "location", "shift", "mix"])
def test_a_decoders_later_steps_check_the_keys_and_mask_against_the_state(name):
    """With a state, forward skipped every check: a mask of one row was broadcast to the batch and
    keys of another batch were attended with the old state."""
    torch.manual_seed(0)
    attender = build_attender(name, 4, 4)
    keys = torch.randn(2, 3, 4)
    mask = torch.tensor([[False, False, False], [False, False, True]])
    state = attender.initial_state(keys, mask)
    query = torch.randn(2, 4)
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool tensor of shape \(2, 3\)"):
        attender(query, keys, keys, mask[:1], state)
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool tensor of shape \(2, 3\)"):
        attender(query, keys, keys, mask.long(), state)
    with pytest.raises(ValueError, match=r"keys must be \[batch=2 \(the state's\)"):
        attender(query[:1], keys[:1], keys[:1], mask[:1], state)
    assert attender(query, keys, keys, mask, state).weights.shape == (2, 3)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ((SOURCE_VOCAB, 2), "target_vocab_size=2 has no id eos_id=2 (ids run from 0 to 1)"),
        ((0, TARGET_VOCAB), "source_vocab_size must be an int >= 1, got 0"),
    ],
)
@pytest.mark.parametrize("name", list(MODELS))
def test_a_vocabulary_without_the_special_ids_is_named(name, sizes, message):
    """It was an IndexError from the constructor's never-predicted mask (or an embedding's assert)."""
    build = {
        "recurrent": lambda s, t: RecurrentSeq2Seq(s, t, embedding_dim=8, hidden_dim=16),
        "gru_attention": lambda s, t: GRUAttentionSeq2Seq(s, t, embedding_dim=8, encoder_hidden_dim=6),
        "syntactic_attention": lambda s, t: SyntacticAttentionSeq2Seq(
            s, t, embedding_dim=8, encoder_hidden_dim=6
        ),
        "transformer": lambda s, t: TransformerSeq2Seq(s, t, d_model=16, heads=2),
    }[name]
    with pytest.raises(ValueError, match=re.escape(message)):
        build(*sizes)


@pytest.mark.parametrize("name", ["gru_attention", "syntactic_attention", "transformer"])
def test_given_lengths_must_be_whole_numbers(name):
    with pytest.raises(ValueError, match=r"lengths must be \[batch=2\] positive ints, got torch.float32"):
        _model(name).decode_with_lengths(SOURCE, MASK, torch.tensor([2.0, 3.0]))


def test_a_language_model_state_of_another_batch_is_named():
    """A state carried over from a batch of another size was a torch error inside the LSTM."""
    torch.manual_seed(0)
    model = LanguageModel(20, variant="attention", embedding_dim=6, hidden_dim=12)
    state = model(torch.tensor([[3, 4, 5]])).state
    with pytest.raises(ValueError, match="state is for a batch of 1 rows .* inputs are 2 rows"):
        model(torch.tensor([[3, 4], [5, 6]]), state=state)
    assert model(torch.tensor([[6, 7]]), state=state).logits.shape == (1, 2, 20)
