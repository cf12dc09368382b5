"""Per-unit score files that evaluation writes next to a run's metrics, and their readers for
``attnlab compare``:

* ``eval/<test set>.sentences.csv`` (language models): per sentence, its document, first token,
  token count and summed negative log-likelihood → perplexity;
* ``eval/<test set>.predictions.tsv`` (sequence-to-sequence runs): per example, the source, the
  target, the greedy prediction and a 0/1 column per accuracy metric (``seq_acc``, …) → accuracy.

A reader returns :class:`Units`: one system's scores per unit, and what identifies each unit, so
that two runs can be checked to have been scored on the same data.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import ExampleOutcomes
from attnlab.evaluation.significance import ACCURACY, PERPLEXITY, RatioStatistic, UnitScores
from attnlab.io import atomic_write_text
from attnlab.tasks.batching import EncodedDataset
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import Vocabulary

SENTENCES_SUFFIX = ".sentences.csv"
SENTENCE_COLUMNS = ("sentence", "document", "first_token", "tokens", "nll")
PREDICTIONS_SUFFIX = ".predictions.tsv"
PREDICTION_COLUMNS = ("example", "source", "target", "prediction")
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
    statistic: RatioStatistic
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
    return Units(UnitScores(nll, tokens), identity, unit, PERPLEXITY, path, "perplexity")


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
    path: Path, sources: list[str], targets: list[str], outcomes: ExampleOutcomes, target: Vocabulary
) -> None:
    """One row per example: its source, target, greedy prediction and a 0/1 column per metric."""
    metrics = list(outcomes.correct)
    lines = ["\t".join([*PREDICTION_COLUMNS, *metrics])]
    for index, (source, reference, prediction) in enumerate(zip(sources, targets, outcomes.predictions)):
        flags = [str(int(outcomes.correct[name][index])) for name in metrics]
        predicted = " ".join(target.decode(prediction, strip_specials=True))
        lines.append("\t".join([str(index), source, reference, predicted, *flags]))
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_prediction_units(path: Path, unit: str | None = None, metric: str | None = None) -> Units:
    """A predictions file, with examples as the units; the statistic is the accuracy (percent) of
    ``metric``'s column (default ``seq_acc``)."""
    if unit not in (None, "example"):
        raise ConfigError(f"--unit {unit}: sequence-to-sequence runs compare by example")
    metric = metric or "seq_acc"
    header, rows = _read_table(path, PREDICTION_COLUMNS, delimiter="\t")
    if metric not in header[len(PREDICTION_COLUMNS) :]:
        choices = ", ".join(header[len(PREDICTION_COLUMNS) :])
        raise ConfigError(f"--metric {metric}: {path} has the metrics {choices}")
    column = header.index(metric)
    correct, identity = np.zeros(len(rows)), []
    for line, row in rows:
        if len(row) != len(header) or row[column] not in ("0", "1"):
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields, {metric} 0 or 1")
        correct[line - 2] = float(row[column])
        identity.append((row[1], row[2]))
    _check_enough(path, correct.size, "example")
    return Units(UnitScores(correct, np.ones_like(correct)), identity, "example", ACCURACY, path, metric)


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
