"""``attnlab report RUNS_DIR``: one static, self-contained HTML file from run directories alone.

The report needs no server and can be mailed: images are embedded as ``data:`` URIs and the style
sheet is inline; there is no script. It holds, per folder of ``RUNS_DIR`` that has results (a
paper's recipe output, a sweep):

* its markdown tables (``*.md``: a recipe's tables beside the paper's numbers, a sweep's
  ``aggregate.md``) rendered as HTML tables;
* its figures (``*.png`` outside run directories);

and, for every run directory (a folder with ``config.yaml``): its status (done / failed /
missing), its test metrics, a learning curve drawn from ``metrics.jsonl`` and the images in its
``plots/`` folder (attention heatmaps and interpretable-variable views written by
``attnlab plot``), how its wrong outputs are wrong (stopping early or late, wrong words; from its
``eval/*.predictions.tsv``) and where each training session ran, in a collapsed ``<details>``
block. The learning curve shows ``train/loss`` and
``valid/loss``, and the validation accuracy (``valid/seq_acc``, ``valid/accuracy``) or, for
language models, ``valid/perplexity``: the names of :mod:`attnlab.metric_names`, in which runs of
earlier versions are read too.

Runs are grouped by experiment (their config's ``experiment``: Lookup Tables, memory problems,
SCAN / English–French, language models): one table per experiment, with a row per run and test
set and a column per metric of that experiment only, so that each table fits a laptop screen
(about 1366 px) however many kinds of runs the folder holds.
"""

from __future__ import annotations

import argparse
import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.config import ConfigError, load_yaml
from attnlab.io import atomic_write_text, read_jsonl
from attnlab.metric_names import PERCENT_METRICS, read_metrics, read_summary
from attnlab.training.environment import ENVIRONMENT_FILE

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { border-bottom: 1px solid #aaa; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; max-width: 100%; }
th, td { border: 1px solid #bbb; padding: 0.25rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; } thead th { background: #eee; }
table.runs td { white-space: nowrap; } table.runs td.test-set { text-align: left; }
table.runs td.run { white-space: normal; overflow-wrap: anywhere; min-width: 10rem; }
table.runs td[rowspan] { vertical-align: top; } table.runs th:nth-child(-n+3) { text-align: left; }
figure { display: inline-block; margin: 0.5rem; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; } figcaption { font-size: 0.8rem; color: #555; }
details { margin: 0.4rem 0; } summary { cursor: pointer; }
.done { color: #196619; } .failed { color: #b00020; font-weight: bold; } .missing { color: #8a6d00; }
pre { background: #f6f6f6; padding: 0.5rem; overflow-x: auto; font-size: 0.8rem; }
"""


@dataclass
class Section:
    """A folder of ``RUNS_DIR`` with tables and figures of its own."""

    title: str
    tables: list[tuple[str, str]] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def build_report(runs_dir: str | Path, out: str | Path | None = None, *, max_curves: int = 100) -> Path:
    """Write the report of ``runs_dir`` to ``out`` (default ``RUNS_DIR/report.html``); return its path.

    Learning curves are drawn for the first ``max_curves`` runs only (they are the slow part).
    Raises :class:`ConfigError` when ``runs_dir`` does not exist or holds no runs, tables or figures.
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ConfigError(f"runs directory {runs_dir} does not exist")
    out = Path(out) if out is not None else runs_dir / "report.html"
    run_dirs = find_run_dirs(runs_dir)
    sections = find_sections(runs_dir, run_dirs, exclude=out)
    if not run_dirs and not sections:
        raise ConfigError(
            f"runs directory {runs_dir} holds no run directories (config.yaml), "
            "tables (*.md) or figures (*.png)"
        )
    parts = [f"<h1>attnlab report: {_escape(runs_dir.resolve().name)}</h1>"]
    parts.append(f"<p>{len(run_dirs)} run(s), {len(sections)} folder(s) with results.</p>")
    for section in sections:
        parts.append(_section_html(section))
    if run_dirs:
        parts.append(_runs_html(runs_dir, run_dirs, max_curves))
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>attnlab report: {_escape(runs_dir.resolve().name)}</title>"
        "<link rel='icon' href='data:,'>"  # no favicon request (a console error when mailed)
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
    atomic_write_text(out, page)
    return out


def find_run_dirs(runs_dir: Path) -> list[Path]:
    """Folders holding a ``config.yaml`` (run directories), sorted by path."""
    return sorted(path.parent for path in runs_dir.rglob("config.yaml") if path.parent != runs_dir.parent)


def find_sections(runs_dir: Path, run_dirs: Sequence[Path], exclude: Path | None = None) -> list[Section]:
    """Folders outside run directories with markdown tables or PNG figures (a sweep's cell folders,
    whose tables the sweep's ``aggregate.md`` already holds, are left out)."""
    inside_runs = set(run_dirs)
    sections: list[Section] = []
    for folder in sorted({runs_dir, *(path for path in runs_dir.rglob("*") if path.is_dir())}):
        if folder in inside_runs or any(parent in inside_runs for parent in folder.parents):
            continue
        if folder != runs_dir and (folder.parent / "sweep.yaml").is_file():
            continue
        section = Section(title=str(folder.relative_to(runs_dir)) if folder != runs_dir else runs_dir.name)
        for path in sorted(folder.glob("*.md")):
            section.tables.append((path.name, path.read_text(errors="replace")))
        section.figures = [path for path in sorted(folder.glob("*.png")) if path != exclude]
        if section.tables or section.figures:
            sections.append(section)
    return sections


def markdown_to_html(text: str) -> str:
    """The subset of markdown attnlab writes: pipe tables, ``#`` headings, paragraphs, code fences."""
    blocks: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith("|"):
            table_lines = []
            while index < len(lines) and lines[index].lstrip().startswith("|"):
                table_lines.append(lines[index])
                index += 1
            blocks.append(_table_html(table_lines))
            continue
        if line.startswith("```"):
            code = []
            index += 1
            while index < len(lines) and not lines[index].startswith("```"):
                code.append(lines[index])
                index += 1
            blocks.append(f"<pre>{_escape(chr(10).join(code))}</pre>")
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)
            blocks.append(f"<h{level}>{_escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            blocks.append(f"<p>{_escape(line.strip())}</p>")
        index += 1
    return "\n".join(blocks)


def _table_html(lines: Sequence[str]) -> str:
    rows = [_cells(line) for line in lines]
    separator = re.compile(r"^:?-{2,}:?$")
    header: list[str] = []
    if len(rows) > 1 and rows[1] and all(separator.match(cell.strip()) for cell in rows[1]):
        header, rows = rows[0], rows[2:]
    head = "<thead><tr>" + "".join(f"<th>{_escape(cell)}</th>" for cell in header) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{_escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table>{head if header else ''}<tbody>{body}</tbody></table>"


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if stripped.startswith("|"):
        stripped = stripped[1:]
    if stripped.endswith("|"):
        stripped = stripped[:-1]
    return [cell.strip() for cell in stripped.split("|")]


def _section_html(section: Section) -> str:
    parts = [f"<section><h2>{_escape(section.title)}</h2>"]
    for name, text in section.tables:
        parts.append(f"<h3>{_escape(name)}</h3>\n{markdown_to_html(text)}")
    if section.figures:
        parts.append("<div class='figures'>")
        parts.extend(_figure(path.read_bytes(), path.name) for path in section.figures)
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


OMITTED_METRICS = frozenset({"examples"})
"""Metrics left out of the tables: how many test examples, not how well the run did."""


def experiment_title(name: str) -> str:
    """Heading of an experiment's table of runs: its :attr:`~attnlab.experiments.base.Experiment.title`
    (an unknown experiment is named as it is)."""
    from attnlab.experiments.registry import EXPERIMENTS, get_experiment

    return get_experiment(name).title if name in EXPERIMENTS else name


def experiment_percent_metrics(name: str) -> frozenset[str]:
    """The metrics that are percentages in an experiment's runs: the shared ones and its
    :attr:`~attnlab.experiments.base.Experiment.percent_metrics` (an unknown experiment: the shared
    ones)."""
    from attnlab.experiments.registry import EXPERIMENTS, get_experiment

    return PERCENT_METRICS | (get_experiment(name).percent_metrics if name in EXPERIMENTS else frozenset())


def run_experiment(run_dir: Path) -> str:
    """The experiment of a run (its config's ``experiment`` key; ``lookup`` when absent, as in
    training), or ``unreadable config`` when its ``config.yaml`` cannot be read."""
    try:
        data = load_yaml(run_dir / "config.yaml")
    except ConfigError:
        return "unreadable config"
    return str(data.get("experiment", "lookup"))


def group_runs(run_dirs: Sequence[Path]) -> dict[str, list[Path]]:
    """Run directories by experiment, experiments in name order, runs in the given order."""
    groups: dict[str, list[Path]] = {}
    for run_dir in run_dirs:
        groups.setdefault(run_experiment(run_dir), []).append(run_dir)
    return dict(sorted(groups.items()))


def _runs_html(runs_dir: Path, run_dirs: Sequence[Path], max_curves: int) -> str:
    """One table per experiment, each with only its own metrics, followed by its runs' details."""
    parts = ["<section><h2>Runs</h2>"]
    curves_left = max_curves
    for experiment, runs in group_runs(run_dirs).items():
        title = experiment_title(experiment)
        parts.append(f"<h3>{_escape(title)}: {len(runs)} run(s)</h3>")
        parts.append(_runs_table(runs_dir, experiment, runs))
        percent = experiment_percent_metrics(experiment)
        for run_dir in runs:
            parts.append(_run_details(runs_dir, run_dir, curve=curves_left > 0, percent_metrics=percent))
            curves_left -= 1
    parts.append("</section>")
    return "\n".join(parts)


def _runs_table(runs_dir: Path, experiment: str, run_dirs: Sequence[Path]) -> str:
    """A row per run and test set (``run`` and ``status`` span a run's rows); a column per metric
    of these runs, so the table is as narrow as one experiment's metrics allow."""
    from attnlab.experiments.runner import run_status

    summaries = {run_dir: _summary(run_dir) for run_dir in run_dirs}
    metrics = list(
        dict.fromkeys(
            metric
            for summary in summaries.values()
            for values in summary.values()
            if isinstance(values, dict)
            for metric in values
            if metric not in OMITTED_METRICS
        )
    )
    head = "".join(
        f"<th>{_breakable(column, '_')}</th>" for column in ["run", "status", "test set", *metrics]
    )
    rows = []
    for run_dir in run_dirs:
        status = run_status(run_dir)
        test_sets = [
            (name, values) for name, values in summaries[run_dir].items() if isinstance(values, dict)
        ]
        span = max(len(test_sets), 1)
        name = _breakable(str(run_dir.relative_to(runs_dir)), "/")
        first = (
            f"<td class='run' data-column='run' rowspan='{span}'>{name}</td>"
            f"<td class='{status}' data-column='status' rowspan='{span}'>{status}</td>"
        )
        for index, (test_set, values) in enumerate(test_sets or [("", {})]):
            cells = "".join(
                f"<td data-column='{_escape(metric)}'>{_format(values.get(metric))}</td>"
                for metric in metrics
            )
            set_cell = f"<td class='test-set' data-column='test set'>{_escape(test_set)}</td>"
            rows.append(f"<tr>{first if index == 0 else ''}{set_cell}{cells}</tr>")
    return (
        f"<table class='runs' data-experiment='{_escape(experiment)}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _breakable(text: str, after: str) -> str:
    """``text`` escaped, with a line-break opportunity after each ``after`` (long run names,
    ``snake_case`` metric names), so a narrow window wraps a cell instead of widening the table."""
    return f"{_escape(after)}<wbr>".join(_escape(part) for part in text.split(after))


def _run_details(runs_dir: Path, run_dir: Path, curve: bool, percent_metrics: frozenset[str]) -> str:
    name = _escape(str(run_dir.relative_to(runs_dir)))
    parts = [f"<details class='run'><summary>{name}</summary>"]
    error = run_dir / "error.txt"
    if error.is_file():
        parts.append(f"<pre>{_escape(error.read_text(errors='replace')[-4000:])}</pre>")
    history = read_metrics(run_dir / "metrics.jsonl", skip_bad_lines=True)  # a line cut by an interruption
    figures = []
    if curve and history:
        from attnlab.plotting.curves import learning_curves_png

        figures.append(_figure(learning_curves_png(history, percent_metrics), "learning curve"))
    plots = run_dir / "plots"
    if plots.is_dir():
        figures.extend(_figure(path.read_bytes(), path.name) for path in sorted(plots.glob("*.png")))
    parts.extend(figures)
    if not figures and not error.is_file():
        parts.append("<p>(no history or plots yet)</p>")
    parts.append(_errors_html(run_dir))
    parts.append(_environment_html(run_dir))
    parts.append("</details>")
    return "\n".join(parts)


def _errors_html(run_dir: Path) -> str:
    """How the run's wrong outputs are wrong, one row per test set with an errors or a predictions
    file (:func:`~attnlab.experiments.unit_scores.read_test_set_errors`); a file that cannot be read
    says why in its row; the one-word columns read "–" for an errors file written before them whose
    predictions file is gone. Empty for runs without them (language models, memory problems)."""
    from attnlab.evaluation.metrics import WORD_ERROR_KINDS
    from attnlab.experiments.unit_scores import ERROR_COUNTS, error_test_sets, read_test_set_errors

    eval_dir = run_dir / "eval"
    test_sets = error_test_sets(eval_dir)
    if not test_sets:
        return ""
    columns = (*ERROR_COUNTS, *WORD_ERROR_KINDS)
    head = "".join(f"<th>{_escape(column)}</th>" for column in ("test set", *columns))
    rows = []
    for test_set in test_sets:
        name = _escape(test_set)
        try:
            counts = read_test_set_errors(eval_dir, test_set)
        except (OSError, ValueError) as error:  # DataFormatError is a ValueError
            why = _escape(str(error))
            rows.append(f"<tr><td>{name}</td><td colspan='{len(columns)}'>{why}</td></tr>")
            continue
        assert counts is not None  # error_test_sets lists test sets with a file
        cells = "".join(
            f"<td>{counts[column]:,}</td>" if column in counts else "<td>–</td>" for column in columns
        )
        rows.append(f"<tr><td>{name}</td>{cells}</tr>")
    return (
        "<table class='errors'><caption>how the wrong outputs are wrong</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


ENVIRONMENT_COLUMNS = ("time", "from_epoch", "device", "device_name", "commit", "torch", "threads", "host")
"""The ``environment.jsonl`` fields a run's details show, one row per training session."""


def _environment_html(run_dir: Path) -> str:
    """Where each training session of the run ran (its ``environment.jsonl``: the new run, then
    each resume); empty for a run trained before these records existed, or a file that cannot be
    read."""
    try:
        sessions = read_jsonl(run_dir / ENVIRONMENT_FILE)
    except (OSError, ValueError):
        return ""
    if not sessions:
        return ""
    head = "".join(f"<th>{_breakable(column, '_')}</th>" for column in ENVIRONMENT_COLUMNS)
    rows = []
    for session in sessions:
        if not isinstance(session, dict):
            continue
        values = {column: session.get(column) for column in ENVIRONMENT_COLUMNS}
        if isinstance(values["commit"], str):
            values["commit"] = values["commit"][:10] + (" (changed)" if session.get("dirty") else "")
        cells = "".join(
            f"<td>{_escape('' if value is None else str(value))}</td>" for value in values.values()
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        "<table class='environment'><caption>training sessions</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _summary(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / "eval" / "summary.json"
    try:
        return read_summary(path) if path.is_file() else {}
    except ConfigError:
        return {}


def _figure(png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img src='data:image/png;base64,{data}' alt='{_escape(caption)}'>"
        f"<figcaption>{_escape(caption)}</figcaption></figure>"
    )


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return _escape(str(value))


def _escape(text: str) -> str:
    return html.escape(text, quote=True)


# --------------------------------------------------------------------------------------------------
# Command line: ``attnlab report RUNS_DIR``


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs_dir", help="a folder of run directories (a sweep's or a recipe's output)")
    parser.add_argument("--out", help="HTML file to write (default RUNS_DIR/report.html)")
    parser.add_argument("--max-curves", type=int, default=100, help="draw learning curves of this many runs")


def main(args: argparse.Namespace) -> str:
    """``attnlab report``: write the page; return its path (the CLI prints it)."""
    return str(build_report(args.runs_dir, args.out, max_curves=args.max_curves))
