"""Plain-text and markdown tables for the terminal and for reports, and the one format of a
mean ± std over runs (:func:`mean_std_text`): every table and figure of attnlab writes them here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attnlab.metric_names import COUNT_METRICS, PERCENT_METRICS, metric_label


def format_table(
    rows: Mapping[str, Mapping[str, object]], columns: Sequence[str], *, markdown: bool = False
) -> str:
    """A table with one row per key of ``rows`` and the given columns (missing cells are blank)."""
    header = ["", *columns]
    body = [[name, *(_cell(values.get(column)) for column in columns)] for name, values in rows.items()]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    if markdown:
        return markdown_table(header, body)
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in [header, *body]]
    return "\n".join(line.rstrip() for line in lines)


def markdown_table(columns: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A markdown pipe table: the ``columns`` header, its ``---`` rule and ``rows`` (cells as
    they are, through ``str``)."""
    lines = [_markdown_row(columns), "|" + "|".join("---" for _ in columns) + "|"]
    lines += [_markdown_row(row) for row in rows]
    return "\n".join(lines)


def _markdown_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def format_number(value: float, decimals: int) -> str:
    """``f"{value:.{decimals}f}"`` without negative zeros (``-0.00`` → ``0.00``)."""
    text = f"{value:.{decimals}f}"
    if text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    return text


def mean_std_text(mean: float, std: float, *, decimals: int = 1) -> str:
    """``"97.3 ± 1.2"``: a mean and standard deviation over runs, as every report shows them."""
    return f"{format_number(mean, decimals)} ± {format_number(std, decimals)}"


def stats_text(stats: Mapping[str, float], *, median: bool = False, count: bool = False) -> str:
    """The ``mean`` ± ``std`` of a summary over runs (:func:`attnlab.experiments.aggregate.summarize`),
    followed by ``(median m; n=k)`` with ``median``, or by ``(n=k)`` with ``count``."""
    text = mean_std_text(stats["mean"], stats["std"])
    if median:
        return f"{text} (median {format_number(stats['median'], 1)}; n={int(stats['n'])})"
    return f"{text} (n={int(stats['n'])})" if count else text


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if 0 < abs(value) < 0.01 else f"{value:.2f}"
    return str(value)


def results_table(
    results: Mapping[str, Mapping[str, object]], percent_metrics: frozenset[str] = frozenset()
) -> str:
    """Test set → metrics as the CLI prints them: the papers' metric names (``seqAcc``,
    ``seqAccBE``, ``attnLoss``), percentages marked ``(%)`` and counts as integers.
    ``percent_metrics``: the experiment's percentages beyond
    :data:`~attnlab.metric_names.PERCENT_METRICS` (its
    :attr:`~attnlab.experiments.base.Experiment.percent_metrics`)."""
    percent = PERCENT_METRICS | percent_metrics
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
