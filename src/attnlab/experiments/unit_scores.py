"""Per-unit score files that evaluation writes next to a run's metrics, and their readers for
``attnlab compare``:

* ``eval/<test set>.sentences.csv`` (language models): per sentence, its document, first token,
  token count and summed negative log-likelihood → perplexity;
* ``eval/<test set>.predictions.tsv`` (sequence-to-sequence runs): per example, the source, the
  target, the greedy prediction and a 0/1 column per accuracy metric (``seq_acc``, …) → accuracy;
  the target and prediction columns → BLEU (``bleu``: each sentence's n-gram statistics, summed
  over a test set to corpus BLEU, :mod:`attnlab.evaluation.bleu`), and how the wrong outputs are
  wrong (:func:`read_prediction_errors`);
* ``eval/<test set>.errors.json`` beside it: those counts of wrong outputs by kind (and, since
  session 44, of those whose wrong words all concern one target word). Evaluation writes it with
  the predictions, and ``attnlab archive`` keeps it (not the predictions, which are
  large): reports read it (:func:`read_test_set_errors`), so a run tree rebuilt from the archive still
  says how each run's outputs are wrong.

A reader returns :class:`Units`: one system's scores per unit, and what identifies each unit, so
that two runs can be checked to have been scored on the same data.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.config import ConfigError
from attnlab.evaluation.bleu import BLEU_STATISTIC, sentence_statistics
from attnlab.evaluation.metrics import ERROR_KINDS, WORD_ERROR_KINDS, error_kind, word_error_kind
from attnlab.evaluation.seq2seq import ExampleOutcomes
from attnlab.evaluation.significance import ACCURACY, PERPLEXITY, Statistic, UnitScores
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.tasks.batching import EncodedDataset
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import Vocabulary

SENTENCES_SUFFIX = ".sentences.csv"
SENTENCE_COLUMNS = ("sentence", "document", "first_token", "tokens", "nll")
PREDICTIONS_SUFFIX = ".predictions.tsv"
PREDICTION_COLUMNS = ("example", "source", "target", "prediction")
ERRORS_SUFFIX = ".errors.json"
ERROR_COUNTS = ("examples", "wrong", *ERROR_KINDS)
"""The keys every errors file has (:func:`count_errors`); one written since session 44 (2026-11-29)
also has :data:`~attnlab.evaluation.metrics.WORD_ERROR_KINDS` (:func:`read_test_set_errors`)."""
BLEU = "bleu"
"""The metric of a predictions file's target and prediction columns (not a column of its own)."""
MIN_UNITS = 10
"""Fewer units than this make a bootstrap meaningless (PTB, for one, is a single document)."""


@dataclass(frozen=True)
class Units:
    """A run's per-unit scores on one test set, what identifies each unit, what a unit is
    (``sentence``, ``document``, ``example``), the statistic, the file they come from and the
    metric they give (``perplexity``, ``seq_acc``, … of :mod:`attnlab.metric_names`)."""

    scores: UnitScores
    identity: list[tuple[Any, ...]]
    unit: str
    statistic: Statistic
    path: Path
    metric: str


# ----------------------------------------------------------------------------- language models


def write_sentence_losses(path: Path, sentences: dict[str, list[float]]) -> None:
    """One row per sentence of :func:`~attnlab.evaluation.perplexity.sentence_losses`: the
    document it is in, its first token's corpus position, its token count (``<eos>`` included) and
    its summed negative log-likelihood in nats."""
    columns = (sentences[name] for name in SENTENCE_COLUMNS[1:])
    lines = [",".join(SENTENCE_COLUMNS)]
    lines += [
        f"{index},{document},{first},{count},{nll!r}"
        for index, (document, first, count, nll) in enumerate(zip(*columns))
    ]
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_sentence_units(path: Path, unit: str | None = None, metric: str | None = None) -> Units:
    """A sentences file, with sentences (the default) or whole documents (their sentences
    summed) as the units; the statistic is perplexity."""
    unit = unit or "sentence"
    if unit not in ("sentence", "document"):
        raise ConfigError(f"--unit {unit}: language-model runs compare by sentence or document")
    if metric not in (None, "perplexity"):
        raise ConfigError(f"--metric {metric}: language-model runs compare perplexity")
    _, rows = _read_table(path, SENTENCE_COLUMNS, delimiter=",")
    table = np.zeros((len(rows), 4))
    for line, row in rows:
        try:
            if len(row) != len(SENTENCE_COLUMNS):
                raise ValueError
            table[line - 2] = [int(value) for value in row[1:4]] + [float(row[4])]
        except ValueError:
            raise DataFormatError(
                path, line, "expected sentence, document, first_token, tokens (integers) and nll (a number)"
            ) from None
    documents, firsts, tokens, nll = table.T
    if unit == "document":
        firsts, inverse = np.unique(documents, return_inverse=True)
        tokens, nll = np.bincount(inverse, weights=tokens), np.bincount(inverse, weights=nll)
    _check_enough(path, tokens.size, unit)
    identity = [(int(first), int(count)) for first, count in zip(firsts, tokens)]
    return Units(UnitScores.ratio(nll, tokens), identity, unit, PERPLEXITY, path, "perplexity")


# ----------------------------------------------------------------------------- sequence to sequence


def dataset_texts(
    dataset: EncodedDataset, source: Vocabulary, target: Vocabulary
) -> tuple[list[str], list[str]]:
    """The source and target of every example, as space-separated tokens (unknown words as the
    model saw them)."""
    sources = [
        " ".join(source.decode(row[:length], strip_specials=True))
        for row, length in zip(dataset.source, dataset.source_lengths.tolist())
    ]
    targets = [" ".join(target.decode(row, strip_specials=True)) for row in dataset.target_output]
    return sources, targets


def write_predictions(
    path: Path,
    sources: list[str],
    targets: list[str],
    outcomes: ExampleOutcomes,
    target: Vocabulary,
    ignored_tokens: Collection[str] = (),
) -> None:
    """One row per example: its source, target, greedy prediction and a 0/1 column per metric; and
    beside it (:func:`errors_path`) how many outputs are wrong, by kind (:func:`count_errors`),
    with ``ignored_tokens`` (SCAN's output markers, which ``seq_acc`` does not score) left out of
    the target and the prediction first."""
    metrics = list(outcomes.correct)
    lines = ["\t".join([*PREDICTION_COLUMNS, *metrics])]
    pairs = []
    for index, (source, reference, prediction) in enumerate(zip(sources, targets, outcomes.predictions)):
        flags = [str(int(outcomes.correct[name][index])) for name in metrics]
        predicted = " ".join(target.decode(prediction, strip_specials=True))
        lines.append("\t".join([str(index), source, reference, predicted, *flags]))
        pairs.append(
            (
                [token for token in reference.split() if token not in ignored_tokens],
                [token for token in predicted.split() if token not in ignored_tokens],
            )
        )
    atomic_write_text(path, "\n".join(lines) + "\n")
    atomic_write_json(errors_path(path), count_errors(pairs))


def read_prediction_units(path: Path, unit: str | None = None, metric: str | None = None) -> Units:
    """A predictions file, with examples as the units; the statistic is the accuracy (percent) of
    ``metric``'s column (default ``seq_acc``), or with ``metric`` ``bleu`` the corpus BLEU of the
    prediction column against the target column (:func:`_bleu_units`)."""
    if unit not in (None, "example"):
        raise ConfigError(f"--unit {unit}: sequence-to-sequence runs compare by example")
    metric = metric or "seq_acc"
    header, rows = _read_table(path, PREDICTION_COLUMNS, delimiter="\t")
    if metric == BLEU:
        return _bleu_units(path, header, rows)
    if metric not in header[len(PREDICTION_COLUMNS) :]:
        choices = ", ".join([*header[len(PREDICTION_COLUMNS) :], BLEU])
        raise ConfigError(f"--metric {metric}: {path} has the metrics {choices}")
    column = header.index(metric)
    correct, identity = np.zeros(len(rows)), []
    for line, row in rows:
        if len(row) != len(header) or row[column] not in ("0", "1"):
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields, {metric} 0 or 1")
        correct[line - 2] = float(row[column])
        identity.append((row[1], row[2]))
    _check_enough(path, correct.size, "example")
    scores = UnitScores.ratio(correct, np.ones_like(correct))
    return Units(scores, identity, "example", ACCURACY, path, metric)


def read_predictions(path: Path, limit: int | None = None) -> list[tuple[str, str, str]]:
    """The (source, target, prediction) columns of a predictions file's first ``limit`` rows (all
    by default), each a space-separated string of tokens."""
    header, rows = _read_table(path, PREDICTION_COLUMNS, delimiter="\t")
    triples = []
    for line, row in rows[:limit]:
        if len(row) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields")
        triples.append((row[1], row[2], row[3]))
    return triples


def read_prediction_pairs(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    """The (source, target) columns of :func:`read_predictions`."""
    return [(source, target) for source, target, _ in read_predictions(path, limit)]


def read_prediction_errors(path: Path) -> dict[str, int]:
    """How the outputs of a predictions file are wrong: ``examples``, ``wrong`` and the count of each
    :data:`~attnlab.evaluation.metrics.ERROR_KINDS` (:func:`~attnlab.evaluation.metrics.error_kind`
    of each row's target and prediction columns, space-separated tokens)."""
    header, rows = _read_table(path, PREDICTION_COLUMNS, delimiter="\t")
    for line, row in rows:
        if len(row) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields")
    return count_errors((row[2].split(), row[3].split()) for _, row in rows)


def count_errors(pairs: Iterable[tuple[Sequence[str], Sequence[str]]]) -> dict[str, int]:
    """``examples``, ``wrong``, the count of each :data:`~attnlab.evaluation.metrics.ERROR_KINDS`
    (:func:`~attnlab.evaluation.metrics.error_kind`) and of each
    :data:`~attnlab.evaluation.metrics.WORD_ERROR_KINDS`
    (:func:`~attnlab.evaluation.metrics.word_error_kind`) over (target, prediction) token sequences."""
    counts = dict.fromkeys((*ERROR_COUNTS, *WORD_ERROR_KINDS), 0)
    for target, prediction in pairs:
        counts["examples"] += 1
        kind = error_kind(target, prediction)
        if kind is not None:
            counts["wrong"] += 1
            counts[kind] += 1
            word_kind = word_error_kind(target, prediction)
            if word_kind is not None:
                counts[word_kind] += 1
    return counts


def counts_words(counts: dict[str, int]) -> bool:
    """Whether an errors file's counts include
    :data:`~attnlab.evaluation.metrics.WORD_ERROR_KINDS` (written since session 44)."""
    return all(name in counts for name in WORD_ERROR_KINDS)


def errors_path(predictions: Path) -> Path:
    """The errors file beside a predictions file: ``<test set>.errors.json``."""
    return predictions.with_name(predictions.name.removesuffix(PREDICTIONS_SUFFIX) + ERRORS_SUFFIX)


def errors_file_counts_words(path: Path) -> bool:
    """Whether ``path`` is an errors file with the counts of
    :data:`~attnlab.evaluation.metrics.WORD_ERROR_KINDS` (one written since session 44); ``False``
    for a missing, older or unreadable one, which its predictions file can replace."""
    try:
        counts = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(counts, dict) and counts_words(counts)


def error_test_sets(eval_dir: Path) -> list[str]:
    """The test sets of a run's ``eval/`` folder with an errors or a predictions file, sorted."""
    names = {path.name.removesuffix(ERRORS_SUFFIX) for path in eval_dir.glob(f"*{ERRORS_SUFFIX}")}
    names |= {path.name.removesuffix(PREDICTIONS_SUFFIX) for path in eval_dir.glob(f"*{PREDICTIONS_SUFFIX}")}
    return sorted(names)


def read_test_set_errors(eval_dir: Path, test_set: str) -> dict[str, int] | None:
    """How the outputs of a run's test set are wrong (:func:`count_errors`): from its errors file,
    else (runs evaluated before evaluation wrote one) from its predictions file; ``None`` when it
    has neither. An errors file written before session 44 lacks the counts of
    :data:`~attnlab.evaluation.metrics.WORD_ERROR_KINDS`: the predictions file then counts them all
    if it is there, else the counts lack those keys (:func:`counts_words`). A malformed file is a
    :class:`DataFormatError` naming it."""
    predictions = eval_dir / f"{test_set}{PREDICTIONS_SUFFIX}"
    path = errors_path(predictions)
    if not path.is_file():
        return read_prediction_errors(predictions) if predictions.is_file() else None
    try:
        counts = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataFormatError(path, error.lineno, f"not JSON: {error.msg}") from None
    if (
        not isinstance(counts, dict)
        or set(counts) not in ({*ERROR_COUNTS}, {*ERROR_COUNTS, *WORD_ERROR_KINDS})
        or not all(type(count) is int and count >= 0 for count in counts.values())
    ):
        expected = (
            f"expected an object of counts (integers ≥ 0) named {list(ERROR_COUNTS)}, "
            f"with or without {list(WORD_ERROR_KINDS)}"
        )
        raise DataFormatError(path, None, expected)
    if not counts_words(counts) and predictions.is_file():
        return read_prediction_errors(predictions)
    return counts


def _bleu_units(path: Path, header: list[str], rows: list[tuple[int, list[str]]]) -> Units:
    """The rows of a predictions file as BLEU units: each sentence's
    :func:`~attnlab.evaluation.bleu.sentence_statistics` of its prediction against its target,
    the same strings evaluation scored (space-separated tokens, specials stripped).

    When the run's metrics of that test set (``<test set>.json`` next to the file) have a
    ``bleu``, the corpus BLEU of the file must equal it; it does not for files written before the
    target column held the raw references (``<unk>`` where the reference had an unknown word).
    """
    targets, predictions, identity = [], [], []
    for line, row in rows:
        if len(row) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields")
        targets.append(row[2])
        predictions.append(row[3])
        identity.append((row[1], row[2]))
    _check_enough(path, len(rows), "example")
    scores = UnitScores(sentence_statistics(predictions, targets))
    units = Units(scores, identity, "example", BLEU_STATISTIC, path, BLEU)
    _check_reported_bleu(units)
    return units


def _check_reported_bleu(units: Units) -> None:
    """Raise when the BLEU of ``units`` on the whole file is not the BLEU evaluation reported."""
    metrics_file = units.path.with_name(units.path.name.removesuffix(PREDICTIONS_SUFFIX) + ".json")
    try:
        reported = json.loads(metrics_file.read_text()).get(BLEU)
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(reported, (int, float)):
        return
    computed = float(BLEU_STATISTIC.of_sums(units.scores.values.sum(axis=0, keepdims=True))[0])
    if not math.isclose(computed, reported, rel_tol=1e-9, abs_tol=1e-9):
        raise ConfigError(
            f"{units.path}: the BLEU of its predictions is {computed:.4f}, but {metrics_file} reports "
            f"{reported:.4f} (predictions written before the target column held the raw references); "
            "`attnlab evaluate RUN_DIR` writes them anew"
        )


# ----------------------------------------------------------------------------- shared


UNIT_READERS: dict[str, Callable[[Path, str | None, str | None], Units]] = {
    SENTENCES_SUFFIX: read_sentence_units,
    PREDICTIONS_SUFFIX: read_prediction_units,
}
"""Per-unit score files by suffix; a reader takes the file, the unit and the metric (``None``: its
default)."""


def _read_table(
    path: Path, columns: tuple[str, ...], *, delimiter: str
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (it must start with ``columns``) and the rows after it, with their line numbers."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter=delimiter, quoting=csv.QUOTE_NONE))
    if not rows or tuple(rows[0][: len(columns)]) != columns:
        raise DataFormatError(path, 1, f"expected a header starting {delimiter.join(columns)!r}")
    return rows[0], list(enumerate(rows[1:], start=2))


def _check_enough(path: Path, count: int, unit: str) -> None:
    if count < MIN_UNITS:
        raise ConfigError(
            f"{path}: {count} {unit}(s) are too few units for a bootstrap (at least {MIN_UNITS})"
        )
