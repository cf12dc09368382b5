"""Plain-text and markdown tables for the terminal and for reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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
