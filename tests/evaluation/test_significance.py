"""Paired bootstrap tests and the per-sentence losses they run on."""

import math

import numpy as np
import pytest
import torch

from attnlab.evaluation.perplexity import sentence_losses
from attnlab.evaluation.significance import ACCURACY, PERPLEXITY, UnitScores, paired_bootstrap


def test_sentence_losses_sum_each_sentence_up_to_its_eos():
    eos = 2
    tokens = torch.tensor([5, 6, eos, 7, eos, eos, 8, 9])  # the last sentence has no <eos>
    nll = torch.arange(1.0, 9.0, dtype=torch.float64)
    sentences = sentence_losses(nll, tokens, eos, document_starts=torch.tensor([0, 5]))
    assert sentences == {
        "document": [0, 0, 1, 1],
        "first_token": [0, 3, 5, 6],
        "tokens": [3, 2, 1, 2],
        "nll": [6.0, 9.0, 6.0, 15.0],
    }
    with pytest.raises(ValueError, match="every token"):
        sentence_losses(torch.tensor([1.0, float("nan"), 2.0]), tokens[:3], eos, torch.tensor([0]))


def _accuracy_units(correct: np.ndarray) -> UnitScores:
    return UnitScores.ratio(correct.astype(np.float64), np.ones(correct.size))


def test_a_system_compared_with_itself_shows_no_difference():
    rng = np.random.default_rng(0)
    a = UnitScores.ratio(rng.uniform(10, 50, 300), rng.integers(5, 20, 300).astype(np.float64))
    result = paired_bootstrap(a, a, PERPLEXITY, samples=200)
    assert result.difference == 0.0 and result.low == 0.0 and result.high == 0.0
    assert result.p_value == 1.0 and not result.b_is_better
    assert result.a == pytest.approx(math.exp(a.values[:, 0].sum() / a.values[:, 1].sum()))


def test_a_consistent_improvement_is_significant_whichever_way_better_points():
    rng = np.random.default_rng(1)
    tokens = rng.integers(5, 30, 500).astype(np.float64)
    nll_a = tokens * rng.uniform(4.0, 6.0, 500)
    nll_b = nll_a - 0.05 * tokens  # 0.05 nats per token better everywhere
    a, b = UnitScores.ratio(nll_a, tokens), UnitScores.ratio(nll_b, tokens)
    result = paired_bootstrap(a, b, PERPLEXITY, samples=500)
    assert result.b_is_better and result.difference < 0
    assert result.high < 0 and result.p_value < 0.01
    assert result.b == pytest.approx(result.a * math.exp(-0.05))
    correct_a = rng.random(400) < 0.6
    correct_b = correct_a | (rng.random(400) < 0.3)  # fixes some errors, breaks nothing
    accuracy = paired_bootstrap(_accuracy_units(correct_a), _accuracy_units(correct_b), ACCURACY)
    assert accuracy.b_is_better and accuracy.low > 0 and accuracy.p_value < 0.01
    assert accuracy.difference == pytest.approx(100 * (correct_b.mean() - correct_a.mean()))


def test_the_interval_has_the_width_of_the_paired_standard_error():
    """Accuracy differences: the bootstrap interval ≈ ±1.96·sd(b − a)/√n, the paired standard
    error, far narrower than unpaired resampling would give for these correlated systems."""
    rng = np.random.default_rng(2)
    n = 2000
    correct_a = rng.random(n) < 0.7
    flips = rng.random(n) < 0.05
    correct_b = np.where(flips, ~correct_a, correct_a)
    result = paired_bootstrap(_accuracy_units(correct_a), _accuracy_units(correct_b), ACCURACY, samples=2000)
    paired_se = 100 * np.std(correct_b.astype(float) - correct_a.astype(float)) / math.sqrt(n)
    assert (result.high - result.low) / 2 == pytest.approx(1.96 * paired_se, rel=0.12)
    assert result.low < result.difference < result.high


def test_the_bootstrap_is_reproducible_and_checks_its_arguments():
    rng = np.random.default_rng(3)
    a = _accuracy_units(rng.random(100) < 0.5)
    b = _accuracy_units(rng.random(100) < 0.6)
    first = paired_bootstrap(a, b, ACCURACY, seed=7, samples=300, chunk=64)
    assert paired_bootstrap(a, b, ACCURACY, seed=7, samples=300) == first  # chunking does not matter
    assert paired_bootstrap(a, b, ACCURACY, seed=8, samples=300) != first
    with pytest.raises(ValueError, match="different units"):
        paired_bootstrap(a, _accuracy_units(np.ones(99, dtype=bool)), ACCURACY)
    with pytest.raises(ValueError, match="samples"):
        paired_bootstrap(a, b, ACCURACY, samples=0)
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap(a, b, ACCURACY, confidence=1.0)
    with pytest.raises(ValueError, match="no units"):
        UnitScores.ratio(np.array([]), np.array([]))
