"""Corpus BLEU (sacrebleu), as the English–French evaluation reports it."""

import pytest

from attnlab.evaluation.bleu import corpus_bleu


def test_corpus_bleu_of_perfect_and_empty_outputs():
    pytest.importorskip("sacrebleu")
    references = ["je suis un peu ivre .", "il est daxiste ."]
    assert corpus_bleu(references, references) == pytest.approx(100.0)
    assert corpus_bleu(["", ""], references) == 0.0
