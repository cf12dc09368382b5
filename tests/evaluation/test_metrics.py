import pytest
import torch

from attnlab.evaluation.metrics import (
    ERROR_KINDS,
    WORD_ERROR_KINDS,
    attention_squared_errors,
    error_kind,
    sequence_correct,
    sequence_correct_before_eos,
    word_error_kind,
)

PAD, EOS = 0, 2


def _target(*rows):
    width = max(len(row) for row in rows)
    return torch.tensor([list(row) + [PAD] * (width - len(row)) for row in rows])


def test_sequence_accuracy_requires_tokens_and_length():
    target = _target([5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, 7, EOS])
    predicted = torch.tensor(
        [
            [5, 6, 7, EOS, PAD],  # right
            [5, 6, EOS, PAD, PAD],  # stops early
            [5, 6, 7, 7, EOS],  # too long
            [5, 9, 7, EOS, PAD],  # wrong token
        ]
    )
    correct = sequence_correct(predicted, target, eos_id=EOS, pad_id=PAD)
    assert correct.tolist() == [True, False, False, False]


def test_ignored_tokens_are_removed_from_both_sides_before_comparing():
    marker = 9
    target = _target([5, marker, 5, EOS], [5, marker, 5, EOS], [5, 5, EOS], [5, marker, 5, EOS], [5, 6, EOS])
    predicted = torch.tensor(
        [
            [5, marker, 5, EOS, PAD],  # right, marker and all
            [5, 5, EOS, PAD, PAD],  # the marker left out: right once markers are ignored
            [marker, 5, 5, marker, EOS],  # markers where the target has none
            [5, marker, 5, 5, EOS],  # one action too many
            [5, marker, 6, PAD, PAD],  # right tokens, but no <eos>
        ]
    )
    assert sequence_correct(predicted, target, eos_id=EOS, pad_id=PAD).tolist() == [True] + [False] * 4
    ignoring = sequence_correct(predicted, target, eos_id=EOS, pad_id=PAD, ignored_ids=[marker])
    assert ignoring.tolist() == [True, True, True, False, False]


def test_output_without_eos_is_wrong():
    target = _target([5, 6, EOS])
    predicted = torch.tensor([[5, 6]])
    assert not sequence_correct(predicted, target, eos_id=EOS, pad_id=PAD).item()


def test_sequence_accuracy_before_eos_forgives_early_stop_only():
    target = _target([5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, 7, EOS])
    predicted = torch.tensor(
        [
            [5, 6, 7, EOS, PAD],  # right
            [5, 6, EOS, PAD, PAD],  # stops early: forgiven
            [5, 6, 7, 7, EOS],  # token past the end: wrong
            [5, 9, EOS, PAD, PAD],  # wrong token before eos
            [EOS, PAD, PAD, PAD, PAD],  # stops at once: nothing wrong before eos
        ]
    )
    correct = sequence_correct_before_eos(predicted, target, eos_id=EOS, pad_id=PAD)
    assert correct.tolist() == [True, True, False, False, True]


def test_attention_loss_is_squared_position_error_before_eos():
    # One example, source length 4; the model decodes 3 tokens then <eos>.
    attention = torch.zeros(1, 4, 4)
    attention[0, 0, 0] = 1.0  # expected position 0, gold 0
    attention[0, 1, 1] = 0.5
    attention[0, 1, 3] = 0.5  # expected position 2, gold 1 -> error 1
    attention[0, 2, 0] = 1.0  # expected position 0, gold 2 -> error 4
    attention[0, 3, 3] = 1.0  # the <eos> step is not scored
    gold = torch.tensor([[0, 1, 2, 3]])
    predicted = torch.tensor([[5, 6, 7, EOS]])
    errors, scored = attention_squared_errors(attention, gold, predicted, eos_id=EOS)
    assert scored.tolist() == [True]
    assert errors.item() == pytest.approx((0 + 1 + 4) / 3)


def test_attention_loss_ignores_steps_without_gold():
    attention = torch.zeros(1, 3, 3)
    attention[0, :, 2] = 1.0
    gold = torch.tensor([[2, -1, -1]])
    predicted = torch.tensor([[5, 6, 7]])
    errors, scored = attention_squared_errors(attention, gold, predicted, eos_id=EOS)
    assert scored.item() and errors.item() == 0.0


@pytest.mark.parametrize(
    ("prediction", "kind"),
    [
        ("a b c", None),
        ("a b", "stops early"),
        ("", "stops early"),
        ("a b c c", "stops late"),
        ("a b c a b c", "stops late"),
        ("a x c", "wrong words, right length"),
        ("c b a", "wrong words, right length"),
        ("a x", "wrong words, other length"),
        ("x b c d", "wrong words, other length"),
        ("b c", "wrong words, other length"),  # a suffix, not a prefix
    ],
)
def test_error_kind_separates_the_stop_from_the_words(prediction, kind):
    assert error_kind("a b c".split(), prediction.split()) == kind
    assert kind is None or kind in ERROR_KINDS


@pytest.mark.parametrize(
    ("prediction", "kind"),
    [
        ("J t J t r", None),  # right
        ("J t J", None),  # stops early
        ("J t J t r r", None),  # stops late
        ("R t R t r", "one target word wrong"),  # every J read as R
        ("R t L t r", "one target word wrong"),  # J's places, by other words
        ("R t J t r", "one target word wrong"),  # one of J's places
        ("J t J t J", "one target word wrong"),  # the one r read as J
        ("R x J t r", None),  # the places of J and t
        ("t t r", "one target word left out"),  # every J
        ("J J r", "one target word left out"),  # every t
        ("t J t r", None),  # one J of two left out
        ("t t", None),  # J and r left out
        ("R t R t r r", None),  # wrong words and longer
    ],
)
def test_word_error_kind_finds_wrong_words_that_all_concern_one_target_word(prediction, kind):
    target = "J t J t r".split()
    assert word_error_kind(target, prediction.split()) == kind
    if kind is not None:
        assert kind in WORD_ERROR_KINDS
        assert error_kind(target, prediction.split()) in ERROR_KINDS[2:]
