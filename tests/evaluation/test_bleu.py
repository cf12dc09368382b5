"""Corpus BLEU (sacrebleu), as the English–French evaluation reports it."""

import numpy as np
import pytest

from attnlab.evaluation.bleu import BLEU_STATISTIC, corpus_bleu, sentence_statistics
from attnlab.evaluation.significance import UnitScores, paired_bootstrap


def test_corpus_bleu_of_perfect_and_empty_outputs():
    pytest.importorskip("sacrebleu")
    references = ["je suis un peu ivre .", "il est daxiste ."]
    assert corpus_bleu(references, references) == pytest.approx(100.0)
    assert corpus_bleu(["", ""], references) == 0.0


SENTENCES = [
    ("je suis un peu ivre .", "je suis un peu ivre ."),
    ("il est grand .", "il est très grand ."),
    ("tu es <unk> .", "tu es daxiste ."),
    ("", "nous sommes en retard ."),
    ("elle n'est pas là , \" dit-il .", "elle n'est pas ici , dit-il ."),
    ("vous êtes très gentils .", "vous êtes gentils ."),
]


def test_bleu_of_summed_sentence_statistics_is_corpus_bleu_exactly():
    sacrebleu = pytest.importorskip("sacrebleu")
    hypotheses, references = (list(column) for column in zip(*SENTENCES))
    statistics = sentence_statistics(hypotheses, references)
    assert statistics.shape == (len(SENTENCES), 10)
    assert statistics[2].tolist() == [3, 1, 0, 0, 6, 5, 4, 3, 6, 4]  # "<unk>" is "< unk >" in 13a
    whole = BLEU_STATISTIC.of_sums(statistics.sum(axis=0, keepdims=True))[0]
    assert whole == corpus_bleu(hypotheses, references)
    assert whole == sacrebleu.corpus_bleu(hypotheses, [references], force=True).score
    for subset in ([0, 1], [1, 2, 3], [4, 5, 0]):
        chosen = [SENTENCES[i] for i in subset]
        expected = corpus_bleu([h for h, _ in chosen], [r for _, r in chosen])
        assert BLEU_STATISTIC.of_sums(statistics[subset].sum(axis=0, keepdims=True))[0] == expected
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        sentence_statistics(["a", "b"], ["a"])


def test_the_paired_bootstrap_of_bleu_finds_a_clearly_better_system():
    pytest.importorskip("sacrebleu")
    rng = np.random.default_rng(0)
    words = [f"mot{i}" for i in range(30)]
    references = [" ".join(rng.choice(words, size=rng.integers(4, 9))) + " ." for _ in range(60)]
    worse = [_garble(reference, rng, 0.5) for reference in references]
    better = [_garble(reference, rng, 0.15) for reference in references]
    a = UnitScores(sentence_statistics(worse, references))
    b = UnitScores(sentence_statistics(better, references))
    result = paired_bootstrap(a, b, BLEU_STATISTIC, samples=300)
    assert result.statistic == "bleu" and result.units == 60
    assert result.a == corpus_bleu(worse, references) and result.b == corpus_bleu(better, references)
    assert result.b_is_better and result.low > 0 and result.p_value < 0.01
    assert paired_bootstrap(b, a, BLEU_STATISTIC, samples=300).high < 0


def _garble(sentence: str, rng: np.random.Generator, rate: float) -> str:
    """``sentence`` with each word replaced by ``oups`` with probability ``rate``."""
    return " ".join("oups" if rng.random() < rate else word for word in sentence.split())
