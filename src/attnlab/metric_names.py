"""The one metric vocabulary of attnlab: what every system calls what it measures, in
``metrics.jsonl``, TensorBoard, ``eval/*.json``, the HTML report, ``attnlab compare``, the recipes'
reports and the configs' stopping rules.

A metric's full name is ``<where>/<metric>``:

=========================  =========================================================================
``train/loss``             the mean training loss of an epoch
``valid/<metric>``         a validation metric after an epoch; ``valid/loss`` for every system, then
                           its own: ``valid/seq_acc`` (Lookup Tables, SCAN), ``valid/attn_loss``
                           (Lookup Tables with gold attention), ``valid/accuracy`` (memory
                           problems), ``valid/perplexity`` (language models)
``test/<set>/<metric>``    a metric of one test set: ``test/long3/seq_acc``, ``test/test/perplexity``,
                           ``test/NE/accuracy``
=========================  =========================================================================

``<metric>`` is the same word wherever the quantity is measured (a :data:`METRICS` name): the
validation's ``seq_acc`` is the test sets' ``seq_acc``. ``metrics.jsonl`` holds one record per epoch
with ``epoch``, ``train/loss``, the ``valid/`` metrics and ``seconds`` (the epoch's wall time, not a
metric), and TensorBoard has one scalar per record key, so its ``train/`` and ``valid/`` scalars
appear in two groups. ``eval/<set>.json`` and ``eval/summary.json`` nest the ``test/`` names (test
set → metric → value), as do the HTML report's tables (a row per test set, a column per metric).
``training.stop_at`` names ``valid/`` metrics.

Names before issue 24 (the *legacy* names) are read everywhere and mapped, see
:func:`current_name`: ``train_loss`` → ``train/loss`` and ``validation_<metric>`` →
``valid/<metric>`` (``validation_seq_acc`` → ``valid/seq_acc``, ``validation_accuracy`` →
``valid/accuracy``, ``validation_perplexity`` → ``valid/perplexity``). Run directories written by
earlier versions are read through :func:`read_metrics` / :func:`read_summary` (and a checkpoint's
``history`` through :func:`current_history`); ``training.stop_at`` accepts the legacy names too
(:func:`stop_target`, with a warning). The test metrics kept their names: ``eval/`` files of
earlier runs read as they are.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError

log = logging.getLogger(__name__)

TRAIN = "train"
VALID = "valid"
TEST = "test"

TRAIN_LOSS = f"{TRAIN}/loss"
"""The mean training loss of an epoch."""
VALID_LOSS = f"{VALID}/loss"
"""The validation loss: what early stopping, learning-rate decay and ``best.pt`` go by."""

RECORD_FIELDS = ("epoch", "seconds")
"""The fields of a ``metrics.jsonl`` record that are not metrics: the epoch (1 for the first) and
its wall time in seconds (training and validation)."""


@dataclass(frozen=True)
class Metric:
    """One ``<metric>`` of the vocabulary: its key, how the papers and tables name it, whether it is
    a percentage and whether it counts something (shown as an integer)."""

    name: str
    label: str
    description: str
    percent: bool = False
    count: bool = False


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric(
            "loss",
            "loss",
            "the training objective: cross-entropy per target token (sequence to sequence, language "
            "models; nats), mean squared error or cross-entropy per sequence (memory problems)",
        ),
        Metric("seq_acc", "seqAcc", "sequence accuracy: outputs right in every token (Dubois §6.2)", True),
        Metric("seq_acc_be", "seqAccBE", "sequence accuracy of the outputs' beginning and end", True),
        Metric(
            "seq_acc_given_length",
            "seqAcc given length",
            "sequence accuracy when decoding is given the target's length (Russin §4)",
            True,
        ),
        Metric(
            "seq_acc_short_sentences",
            "seqAcc, training-length sentences",
            "SCAN length splits: sequence accuracy of the commands whose every sentence is at most as "
            "long as the longest training output",
            True,
        ),
        Metric(
            "seq_acc_long_sentence",
            "seqAcc, a longer sentence",
            "SCAN length splits: sequence accuracy of the commands with a sentence longer than every "
            "training output",
            True,
        ),
        Metric(
            "seq_acc_given_length_short_sentences",
            "seqAcc given length, training-length sentences",
            "SCAN length splits: seq_acc_given_length of the commands whose every sentence is at most "
            "as long as the longest training output",
            True,
        ),
        Metric(
            "seq_acc_given_length_long_sentence",
            "seqAcc given length, a longer sentence",
            "SCAN length splits: seq_acc_given_length of the commands with a sentence longer than "
            "every training output",
            True,
        ),
        Metric(
            "long_sentence_examples",
            "long_sentence_examples",
            "SCAN length splits: how many test commands have a sentence longer than every training output",
            count=True,
        ),
        Metric("attn_loss", "attnLoss", "the attention's loss against gold attention (Dubois §6.2)"),
        Metric(
            "accuracy",
            "accuracy",
            "memory problems: percent of sequences right (|error| < 0.04, or the argmax class); CBT: "
            "the fraction (0-1) of questions answered right",
        ),
        Metric("accuracy_XX_YY", "accuracy_XX_YY", "temporal order: accuracy on the XX and YY classes"),
        Metric("accuracy_XY_YX", "accuracy_XY_YX", "temporal order: accuracy on the XY and YX classes"),
        Metric("mse", "mse", "memory problems (regression): mean squared error"),
        Metric("cross_entropy", "cross_entropy", "memory problems (temporal order): cross-entropy"),
        Metric("perplexity", "perplexity", "language models: exp of the loss per token"),
        Metric("bleu", "bleu", "English–French: sacrebleu corpus BLEU"),
        Metric("examples", "examples", "how many test examples", count=True),
        Metric("tokens", "tokens", "how many tokens (language models)", count=True),
        Metric("questions", "questions", "how many CBT questions", count=True),
        *(
            Metric(name, name, f"{name.split('_')[1]} words outside the vocabulary", count=True)
            for name in ("unknown_source_words", "unknown_target_words")
        ),
    )
}
"""Every ``<metric>`` the systems report, by key. A system may report others (they keep their key
as their label); its :attr:`~attnlab.experiments.base.Experiment.percent_metrics` adds its own
percentages (the memory problems' ``accuracy``)."""

PERCENT_METRICS = frozenset(name for name, metric in METRICS.items() if metric.percent)
"""Metrics that are percentages for every system."""

COUNT_METRICS = frozenset(name for name, metric in METRICS.items() if metric.count)
"""Metrics that count something: shown as integers."""


def metric_label(name: str) -> str:
    """The user-facing name of a metric key (``seq_acc`` → ``seqAcc``; unknown keys unchanged)."""
    metric = METRICS.get(name)
    return metric.label if metric is not None else name


def valid_name(metric: str) -> str:
    """``valid/<metric>``: the name of a validation metric."""
    return f"{VALID}/{metric}"


def eval_name(test_set: str, metric: str) -> str:
    """``test/<test_set>/<metric>``: the name of a test set's metric."""
    return f"{TEST}/{test_set}/{metric}"


def split_eval_name(name: str) -> tuple[str, str] | None:
    """The test set and ``<metric>`` of a ``test/<set>/<metric>`` name (``None`` for any other)."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != TEST or not all(parts[1:]):
        return None
    return parts[1], parts[2]


def validation_metric(name: str) -> str | None:
    """The ``<metric>`` of a ``valid/<metric>`` name (``None`` for any other name)."""
    prefix = f"{VALID}/"
    return name[len(prefix) :] if name.startswith(prefix) and len(name) > len(prefix) else None


# ------------------------------------------------------------------------------ legacy names

LEGACY_TRAIN_LOSS = "train_loss"
LEGACY_VALID_PREFIX = "validation_"


def legacy_name(name: str) -> bool:
    """Whether ``name`` is a metric name from before issue 24 (``train_loss``, ``validation_*``)."""
    prefix = LEGACY_VALID_PREFIX
    return name == LEGACY_TRAIN_LOSS or (name.startswith(prefix) and len(name) > len(prefix))


def current_name(name: str) -> str:
    """The current name of a ``metrics.jsonl`` key: ``train_loss`` → ``train/loss``,
    ``validation_<metric>`` → ``valid/<metric>``; every other key (current names, ``epoch``,
    ``seconds``) unchanged."""
    if name == LEGACY_TRAIN_LOSS:
        return TRAIN_LOSS
    if legacy_name(name):
        return valid_name(name[len(LEGACY_VALID_PREFIX) :])
    return name


def current_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """One epoch's metrics record with its keys in current names (order kept)."""
    return {current_name(key): value for key, value in record.items()}


def current_history(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Epoch records (a ``metrics.jsonl`` file's, a checkpoint's ``history``) in current names."""
    return [current_record(record) for record in records]


def read_metrics(path: str | os.PathLike[str], *, skip_bad_lines: bool = False) -> list[dict[str, Any]]:
    """A run's ``metrics.jsonl`` (one record per epoch) in current names, whichever version wrote it;
    ``[]`` when there is no such file. A line that is not a JSON object is a
    :class:`~attnlab.config.ConfigError` naming the file and line, or with ``skip_bad_lines`` left
    out (a report draws what it can)."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError as error:
            if skip_bad_lines:
                continue
            raise ConfigError(f"{path} line {number}: not a metrics record ({error})") from None
        records.append(current_record(record))
    return records


def read_summary(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """A run's ``eval/summary.json`` (test set → metric → value, the nested ``test/<set>/<metric>``
    names), whichever version wrote it: the test metrics kept their names in issue 24, so it reads
    as it is. Raises :class:`~attnlab.config.ConfigError` when it is not a JSON object."""
    path = Path(path)
    try:
        summary = json.loads(path.read_text())
    except ValueError as error:
        raise ConfigError(f"{path}: not a JSON summary ({error})") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"{path}: expected a JSON object (test set → metric → value)")
    return summary


_warned: set[str] = set()


def stop_target(name: str, where: str = "training.stop_at") -> str:
    """The validation metric a stopping target names: ``valid/<metric>``, or its legacy name
    ``validation_<metric>``, which is mapped (with a warning, once per name and process). Any
    other name is a :class:`ValueError` that says how to name it."""
    if legacy_name(name) and name != LEGACY_TRAIN_LOSS:
        current = current_name(name)
        if name not in _warned:
            _warned.add(name)
            log.warning("%s: %r is the old name of %r; read as %r", where, name, current, current)
        return current
    if validation_metric(name) is None:
        raise ValueError(
            f"{where}: {name!r} is not a validation metric (valid/<metric>, e.g. valid/accuracy, "
            "valid/seq_acc)"
        )
    return name
