"""Metrics, significance tests and BLEU refuse arguments they would otherwise score wrongly: a
prediction broadcast over a batch, a target without its ``<eos>``, a p-value of NaN statistics
or of one unit, fewer references than hypotheses."""

import re

import numpy as np
import pytest
import torch

from attnlab.evaluation.bleu import BLEU_STATISTIC, corpus_bleu
from attnlab.evaluation.metrics import (
    attention_squared_errors,
    sequence_correct,
    sequence_correct_before_eos,
)
from attnlab.evaluation.perplexity import sentence_losses
from attnlab.evaluation.seq2seq import ExampleOutcomes, attention_guidance_loss
from attnlab.evaluation.significance import ACCURACY, PERPLEXITY, UnitScores, paired_bootstrap

EOS, PAD = 2, 0
TARGETS = torch.tensor([[5, 6, EOS, PAD], [5, EOS, PAD, PAD]])


@pytest.mark.parametrize("metric", [sequence_correct, sequence_correct_before_eos])
@pytest.mark.parametrize(
    ("predicted", "target", "message"),
    [
        (torch.tensor([[5, 6, EOS]]), TARGETS, "predicted holds 1 sequences for 2 targets"),
        (
            torch.tensor([[5, 6, 7, EOS]]),
            torch.tensor([[5, 6, 7, 8]]),
            "target rows [0] do not hold exactly one <eos>",
        ),
        (
            torch.tensor([[5, EOS]]),
            torch.tensor([[5, EOS, 7, EOS]]),
            "target rows [0] do not hold exactly one <eos>",
        ),
        (torch.tensor([[5.0, 2.0]]), torch.tensor([[5, EOS]]), "predicted must be token ids"),
        (torch.tensor([5, EOS]), torch.tensor([5, EOS]), "predicted must be token ids [batch, steps]"),
    ],
    ids=["broadcast", "no-eos", "two-eos", "float", "1-d"],
)
def test_sequence_metrics_refuse_what_they_would_score_wrongly(metric, predicted, target, message):
    """A one-row prediction scored two targets ([True, False]); a target without <eos> was scored
    against its own prefix, so an output that stopped one token early was right."""
    with pytest.raises(ValueError, match=re.escape(message)):
        metric(predicted, target, eos_id=EOS, pad_id=PAD)


def test_sequence_metrics_still_score_a_well_formed_batch():
    predicted = torch.tensor([[5, 6, EOS], [5, 6, EOS]])
    assert sequence_correct(predicted, TARGETS, eos_id=EOS, pad_id=PAD).tolist() == [True, False]
    assert sequence_correct(predicted, TARGETS, eos_id=EOS, pad_id=PAD, ignored_ids=[9]).tolist() == [
        True,
        False,
    ]


def test_attention_errors_refuse_another_batch_and_positions_past_the_source():
    predicted = torch.tensor([[5, 6, EOS], [5, EOS, PAD]])
    attention = torch.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="one batch"):
        attention_squared_errors(attention[:1], torch.zeros(2, 3, dtype=torch.long), predicted, eos_id=EOS)
    with pytest.raises(ValueError, match="gold_attention holds position 9, past the source's 4 positions"):
        attention_squared_errors(attention, torch.tensor([[0, 9, -1], [1, -1, -1]]), predicted, eos_id=EOS)


def test_outcomes_need_one_verdict_per_decoded_row():
    outcomes = ExampleOutcomes()
    with pytest.raises(ValueError, match=r"seq_acc must hold one verdict per decoded row \(2\)"):
        outcomes.add(torch.tensor([[5, EOS], [6, EOS]]), EOS, seq_acc=torch.tensor([True]))


def _accuracy_units(correct):
    return UnitScores.ratio(np.asarray(correct, dtype=float), np.ones(len(correct)))


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (
            lambda: UnitScores.ratio(np.array([np.nan, 0, 1, 1, 0.0]), np.ones(5)),
            lambda: _accuracy_units([1, 1, 1, 1, 1]),
            "units [0] (1 in all) hold NaN or infinity",
        ),
        (lambda: _accuracy_units([0]), lambda: _accuracy_units([1]), "needs at least 2 units"),
        (
            lambda: UnitScores.ratio(np.array([1.0, 2.0]), np.zeros(2)),
            lambda: UnitScores.ratio(np.array([1.0, 2.0]), np.ones(2)),
            "perplexity of the whole test set is not a finite number",
        ),
    ],
    ids=["nan", "one-unit", "zero-denominator"],
)
def test_the_bootstrap_refuses_statistics_it_cannot_test(a, b, message):
    """Each gave p = 1 / (samples + 1), the smallest p-value there is: "significant"."""
    with pytest.raises(ValueError, match=re.escape(message)):
        paired_bootstrap(a(), b(), PERPLEXITY, samples=50)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"chunk": 0}, "chunk must be an int >= 1, got 0"), ({"seed": "a"}, "seed must be an int, got 'a'")],
)
def test_bootstrap_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(_accuracy_units([0, 1, 1]), _accuracy_units([1, 1, 1]), ACCURACY, **options)


@pytest.mark.parametrize(
    ("statistic", "message"),
    [(ACCURACY, "its units need 2 statistics each"), (BLEU_STATISTIC, "BLEU needs 10")],
)
def test_a_statistic_refuses_units_of_another_width(statistic, message):
    """ACCURACY read the first two of three columns as numerator and denominator."""
    units = UnitScores(np.ones((4, 3)))
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(units, units, statistic, samples=10)


@pytest.mark.parametrize(
    ("hypotheses", "references", "message"),
    [
        (["a b c d", "x y z w"], ["a b c d"], "2 hypotheses for 1 references"),
        ("a b c d", ["a b c d"], "hypotheses must be a list of sentences, got one string"),
        ([], [], "no sentences to score"),
    ],
)
def test_corpus_bleu_needs_one_reference_per_hypothesis(hypotheses, references, message):
    """The first gave 100.0 (the unmatched hypothesis dropped)."""
    with pytest.raises(ValueError, match=message):
        corpus_bleu(hypotheses, references)


@pytest.mark.parametrize(
    "starts", [[1, 3], [0, 3, 2], [0, 9]], ids=["not-from-0", "unsorted", "past-the-end"]
)
def test_sentence_losses_need_document_starts_of_the_corpus(starts):
    """Starts not from 0 put a sentence in document -1."""
    tokens = torch.tensor([5, 6, EOS, 7, EOS])
    with pytest.raises(ValueError, match="document_starts must be increasing token positions from 0"):
        sentence_losses(torch.ones(5), tokens, EOS, torch.tensor(starts))


def test_attention_guidance_names_gold_positions_past_the_source_and_other_shapes():
    """A gold position past the source was a gather error from torch."""
    attention = torch.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="gold_attention holds position 4, past the source's 4 positions"):
        attention_guidance_loss(attention, torch.tensor([[0, 4, -1], [1, -1, -1]]))
    with pytest.raises(ValueError, match=r"gold_attention must be \[batch, steps\] = \(2, 3\)"):
        attention_guidance_loss(attention, torch.zeros(1, 3, dtype=torch.long))
    assert attention_guidance_loss(
        attention, torch.tensor([[0, 3, -1], [1, -1, -1]])
    ).item() == pytest.approx(-np.log(0.25))
