"""Plain-text and markdown tables for the terminal and for reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attnlab.training.trainer import PERCENT_METRICS, metric_label

COUNT_METRICS = frozenset({"examples", "tokens", "questions", "unknown_source_words", "unknown_target_words"})
"""Metrics that count something: shown as integers."""

EXPERIMENT_PERCENT_METRICS = {"memory": frozenset({"accuracy", "accuracy_XX_YY", "accuracy_XY_YX"})}
"""Percentages beyond :data:`~attnlab.training.trainer.PERCENT_METRICS`, by experiment (the
language models' CBT ``accuracy`` is a fraction)."""


def format_table(
    rows: Mapping[str, Mapping[str, object]], columns: Sequence[str], *, markdown: bool = False
) -> str:
    """A table with one row per key of ``rows`` and the given columns (missing cells are blank)."""
    header = ["", *columns]
    body = [[name, *(_cell(values.get(column)) for column in columns)] for name, values in rows.items()]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    if markdown:
        lines = [_markdown_row(header), "|" + "|".join("---" for _ in header) + "|"]
        lines += [_markdown_row(row) for row in body]
        return "\n".join(lines)
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in [header, *body]]
    return "\n".join(line.rstrip() for line in lines)


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if 0 < abs(value) < 0.01 else f"{value:.2f}"
    return str(value)


def results_table(results: Mapping[str, Mapping[str, object]], experiment: str) -> str:
    """Test set → metrics as the CLI prints them: the papers' metric names (``seqAcc``,
    ``seqAccBE``, ``attnLoss``), percentages marked ``(%)`` and counts as integers."""
    percent = PERCENT_METRICS | EXPERIMENT_PERCENT_METRICS.get(experiment, frozenset())
    columns = list(dict.fromkeys(metric for metrics in results.values() for metric in metrics))
    headers = {column: metric_label(column) + (" (%)" if column in percent else "") for column in columns}
    rows = {
        name: {
            headers[column]: _count(value) if column in COUNT_METRICS else value
            for column, value in metrics.items()
        }
        for name, metrics in results.items()
    }
    return format_table(rows, list(headers.values()))


def _count(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value
