"""Corpus BLEU through sacrebleu (the English–French evaluation of Russin et al. 2019)."""

from __future__ import annotations

from attnlab.config import ConfigError


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu's corpus BLEU (default 13a tokenization) of one reference per sentence.

    The English–French set is distributed tokenized (lower case, " ." split off), so it is scored
    as it is; ``force=True`` only silences sacrebleu's warning about tokenized input.
    """
    try:
        import sacrebleu
    except ImportError:
        raise ConfigError("evaluation.bleu needs the sacrebleu package: pip install sacrebleu") from None
    return float(sacrebleu.corpus_bleu(hypotheses, [references], force=True).score)
