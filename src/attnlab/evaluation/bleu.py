"""Corpus BLEU through sacrebleu (the English–French evaluation of Russin et al. 2019), and the
same BLEU as a statistic of per-sentence sufficient statistics for the paired bootstrap
(:mod:`attnlab.evaluation.significance`)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from attnlab.config import ConfigError

MAX_ORDER = 4
"""n-gram orders 1…4, sacrebleu's default."""
SMOOTHING = "exp"
"""sacrebleu.corpus_bleu's default smoothing (its default tokenization is 13a)."""


def _sacrebleu() -> ModuleType:
    try:
        import sacrebleu
    except ImportError:
        raise ConfigError("evaluation.bleu needs the sacrebleu package: pip install sacrebleu") from None
    return sacrebleu


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu's corpus BLEU (default 13a tokenization) of one reference per sentence.

    The English–French set is distributed tokenized (lower case, " ." split off), so it is scored
    as it is; ``force=True`` only silences sacrebleu's warning about tokenized input.
    """
    _check_sentences(hypotheses, references)
    return float(_sacrebleu().corpus_bleu(hypotheses, [references], force=True).score)


def _check_sentences(hypotheses: list[str], references: list[str]) -> None:
    """One reference per hypothesis, each a list of sentences (a string would be read as one
    sentence per character), at least one."""
    for name, sentences in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(sentences, str):
            raise ValueError(f"{name} must be a list of sentences, got one string")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")


def sentence_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """``[sentences, 2·4 + 2]``: each sentence's matching n-grams (n = 1…4), its hypothesis
    n-grams, hypothesis length and reference length, tokenized as :func:`corpus_bleu` tokenizes;
    their column sums are the statistics corpus BLEU is computed from."""
    _check_sentences(hypotheses, references)
    # effective_order only changes a sentence's own score (and silences sacrebleu's advice to
    # use it for sentence BLEU); the counts are the same.
    metric = _sacrebleu().metrics.bleu.BLEU(force=True, effective_order=True, max_ngram_order=MAX_ORDER)
    rows = []
    for hypothesis, reference in zip(hypotheses, references):
        score = metric.sentence_score(hypothesis, [reference])
        rows.append([*score.counts, *score.totals, score.sys_len, score.ref_len])
    return np.array(rows, dtype=np.float64).reshape(len(rows), 2 * MAX_ORDER + 2)


@dataclass(frozen=True)
class BleuStatistic:
    """Corpus BLEU as a :class:`~attnlab.evaluation.significance.Statistic` of the summed
    :func:`sentence_statistics`: on the whole test set it is :func:`corpus_bleu` exactly."""

    name: str = "bleu"
    lower_is_better: bool = False

    def of_sums(self, sums: np.ndarray) -> np.ndarray:
        """sacrebleu's BLEU of each row of summed statistics ``[draws, 2·4 + 2]``."""
        if sums.shape[1] != 2 * MAX_ORDER + 2:
            raise ValueError(
                f"BLEU needs {2 * MAX_ORDER + 2} statistics per unit (sentence_statistics), "
                f"got {sums.shape[1]}"
            )
        compute = _sacrebleu().metrics.bleu.BLEU.compute_bleu
        scores = [
            compute(
                row[:MAX_ORDER],
                row[MAX_ORDER : 2 * MAX_ORDER],
                row[-2],
                row[-1],
                smooth_method=SMOOTHING,
                max_ngram_order=MAX_ORDER,
            ).score
            for row in np.rint(sums).astype(np.int64).tolist()
        ]
        return np.array(scores, dtype=np.float64)


BLEU_STATISTIC = BleuStatistic()
