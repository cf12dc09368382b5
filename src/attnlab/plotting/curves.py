"""Metric curves over test sets and training curves (Dubois et al. 2020, Figures 6–8, Table 3).

* :func:`plot_metric_by_test_set` reproduces Figures 6, 7 and 8: a metric (*seqAcc*,
  *seqAccBE*, or the *attnLoss* of Table 3 with ``percent=False``) on the test sets in order
  (``interpolation``, ``long1`` … ``long5``), one line per model, mean over runs with a ±1 std
  band.
* :func:`plot_training_curves` draws losses / metrics per epoch from a ``metrics.jsonl``-style
  list of dicts; :func:`learning_curves_png` draws a run's loss and accuracy curves for the HTML
  report.
* :func:`plot_curves_by_group` draws one metric per epoch of many runs, one colour per group
  (a model) and one line per run (a seed): e.g. the validation perplexity of every model.
* :func:`format_mean_std` formats runs as ``"97.3 ± 1.2"`` for reports and tables (e.g. the cells
  of Table 3).

Standard deviations are sample standard deviations (``ddof=1``) over runs; a single run has a
standard deviation of 0. Figures are written atomically, like those of
:mod:`attnlab.plotting.attention`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import cycle
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from attnlab.metric_names import PERCENT_METRICS, TRAIN_LOSS, VALID_LOSS, read_metrics, validation_metric
from attnlab.plotting.attention import (
    PathLike,
    _new_figure,
    _output_format,
    _save_figure,
)
from attnlab.reporting.tables import mean_std_text

__all__ = [
    "format_mean_std",
    "learning_curve_panels",
    "learning_curves_png",
    "plot_accuracy_panels",
    "plot_curves_by_group",
    "plot_metric_by_test_set",
    "plot_training_curves",
]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _as_values(values: Any) -> np.ndarray:
    """``values`` (an iterable of numbers, or one number) as a 1-D float array."""
    if isinstance(values, np.ndarray):
        array = values.astype(float, copy=False)
    elif isinstance(values, Iterable) and not isinstance(values, (str, bytes)):
        array = np.asarray(list(values), dtype=float)
    else:
        array = np.asarray(values, dtype=float)
    return np.atleast_1d(array).ravel()


def _mean_std(values: np.ndarray, ddof: int = 1) -> tuple[float, float]:
    mean = float(values.mean())
    std = float(values.std(ddof=ddof)) if values.size > ddof else 0.0
    return mean, std


def format_mean_std(values: Iterable[float] | np.ndarray, *, decimals: int = 1, ddof: int = 1) -> str:
    """Format runs as ``"mean ± std"``, e.g. ``"97.3 ± 1.2"``; ``"n/a"`` when there are none.

    Used for the cells of result tables such as Table 3 of Dubois et al. (2020).

    Args:
        values: the value of each run (any iterable of numbers, or a single number).
        decimals: digits after the decimal point of both numbers.
        ddof: delta degrees of freedom of the standard deviation (1: sample std). With no more
            runs than ``ddof`` the standard deviation is reported as 0.
    """
    array = _as_values(values)
    if array.size == 0:
        return "n/a"
    mean, std = _mean_std(array, ddof)
    return mean_std_text(mean, std, decimals=decimals)


def _runs_label(counts: Sequence[int]) -> str:
    present = [count for count in counts if count > 0]
    if not present:
        return "no data"
    low, high = min(present), max(present)
    runs = "run" if high == 1 else "runs"
    return f"{high} {runs}" if low == high else f"{low}–{high} runs"


def plot_metric_by_test_set(
    results: Mapping[str, Mapping[str, Sequence[float]]],
    path: PathLike,
    *,
    metric_label: str,
    test_sets: Sequence[str],
    title: str | None = None,
    percent: bool = True,
    dpi: float = 150,
    x_label: str = "test set",
) -> Path:
    """Plot a metric per test set, one line per model (Dubois et al. 2020, Figures 6, 7 and 8).

    Each point is the mean over runs, with a shaded ±1 standard deviation band; the legend gives
    each model's number of runs (a range when it differs between test sets). The same function
    plots the *attnLoss* of Table 3 with ``percent=False``.

    Args:
        results: model name → test set name → the metric of each run. Runs may differ in number
            between test sets; a missing or empty test set leaves a gap in the line. Test sets
            not listed in ``test_sets`` are ignored.
        path: ``.png``, ``.pdf`` or ``.svg`` path; written atomically, parents created.
        metric_label: y axis label, e.g. ``"seqAcc (%)"``.
        test_sets: the x axis, in order, e.g. ``["interpolation", "long1", ..., "long5"]``.
        title: optional axes title.
        percent: the metric is a percentage: the y axis spans [0, 100] and the bands are
            clipped to it.
        dpi: resolution of raster output.
        x_label: the x axis label (e.g. ``"window position"`` for Daniluk et al. Figure 3b).

    Returns:
        The path written.

    Raises:
        ValueError: ``results`` or ``test_sets`` is empty, a value is not finite, or the
            extension is not supported.
    """
    _output_format(path)
    test_sets = [str(name) for name in test_sets]
    if not test_sets:
        raise ValueError("test_sets must name at least one test set")
    if not results:
        raise ValueError("results must contain at least one model")

    positions = np.arange(len(test_sets))
    width = max(5.5, 0.95 * len(test_sets) + 2.5)
    # Rotate the tick labels when the longest (about 0.075 in per character) would not fit.
    longest = max(len(name) for name in test_sets)
    rotate = longest * 0.075 > 0.95 * (width - 1.5) / len(test_sets)
    fig = _new_figure((width, 4.2 + (0.5 if rotate else 0.0)))
    ax = fig.add_subplot()
    colors = cycle(f"C{i}" for i in range(10))
    markers = cycle(_MARKERS)
    for model, per_test_set in results.items():
        means = np.full(len(test_sets), np.nan)
        stds = np.full(len(test_sets), np.nan)
        counts = [0] * len(test_sets)
        for i, test_set in enumerate(test_sets):
            values = _as_values(per_test_set.get(test_set, ()))
            if values.size == 0:
                continue
            if not np.all(np.isfinite(values)):
                raise ValueError(
                    f"results[{model!r}][{test_set!r}] contains non-finite values: {values.tolist()}"
                )
            means[i], stds[i] = _mean_std(values)
            counts[i] = int(values.size)
        color = next(colors)
        ax.plot(
            positions,
            means,
            color=color,
            marker=next(markers),
            markersize=5,
            linewidth=1.8,
            label=f"{model} ({_runs_label(counts)})",
        )
        low, high = means - stds, means + stds
        if percent:
            low, high = np.clip(low, 0.0, 100.0), np.clip(high, 0.0, 100.0)
        ax.fill_between(positions, low, high, color=color, alpha=0.18, linewidth=0)

    ax.set_xticks(positions)
    ax.set_xticklabels(test_sets, rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_xlim(-0.3, len(test_sets) - 0.7)
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric_label)
    if percent:
        ax.set_ylim(-3.0, 103.0)
        ax.set_yticks(np.arange(0, 101, 20))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    if title:
        ax.set_title(title)
    return _save_figure(fig, path, dpi=dpi)


LOG_SCALE_RATIO = 100.0
"""A run's losses are drawn on a log scale once the largest is this many times the smallest: a
long run's curve is otherwise a flat line at zero after its first tenth (e.g. 2.9 to 5e-6)."""


def plot_run_history(metrics_file: PathLike, path: PathLike) -> Path | None:
    """:func:`plot_training_curves` of a run's ``metrics.jsonl`` (``train/loss`` and ``valid/loss``
    per epoch; a file of an earlier version is read in these names); ``None`` when the run has no
    epochs yet. The y axis is logarithmic when the losses span more than :data:`LOG_SCALE_RATIO`
    (and are all positive)."""
    history = read_metrics(metrics_file)
    if not history:
        return None
    keys = [key for key in (TRAIN_LOSS, VALID_LOSS) if key in history[0]]
    return plot_training_curves(history, path, keys=keys, logy=_losses_span_orders(history, keys))


def _losses_span_orders(history: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> bool:
    """Whether the ``keys`` values of ``history`` call for a log scale: all finite ones positive,
    the largest more than :data:`LOG_SCALE_RATIO` times the smallest."""
    values = [record[key] for record in history for key in keys if isinstance(record.get(key), (int, float))]
    finite = [float(value) for value in values if math.isfinite(value)]
    return bool(finite) and min(finite) > 0 and max(finite) > LOG_SCALE_RATIO * min(finite)


def plot_training_curves(
    history: Sequence[Mapping[str, Any]],
    path: PathLike,
    *,
    keys: Sequence[str],
    x_key: str = "epoch",
    title: str | None = None,
    logy: bool = False,
    dpi: float = 150,
) -> Path:
    """Plot training curves, e.g. ``train/loss`` and ``valid/loss`` per epoch.

    Training follows §6.3 of Dubois et al. (2020) (50 epochs of Adam); these curves are the
    diagnostics behind Figures 6–8 rather than a figure of the paper.

    Args:
        history: ``metrics.jsonl``-style records, in order. A record lacking ``x_key`` or a key
            is skipped for that key (so train and validation records may be interleaved).
        path: ``.png``, ``.pdf`` or ``.svg`` path; written atomically, parents created.
        keys: the record fields to draw, one line each.
        x_key: the record field used as x (default ``"epoch"``).
        title: optional axes title.
        logy: logarithmic y axis (for losses spanning several orders of magnitude).
        dpi: resolution of raster output.

    Returns:
        The path written.

    Raises:
        ValueError: ``keys`` is empty, a key never appears together with ``x_key``, a value is
            not a number, or the extension is not supported.
    """
    _output_format(path)
    keys = [str(key) for key in keys]
    if not keys:
        raise ValueError("keys must name at least one field to plot")
    series: dict[str, tuple[list[float], list[float]]] = {}
    for key in keys:
        xs: list[float] = []
        ys: list[float] = []
        for index, record in enumerate(history):
            if key not in record or x_key not in record:
                continue
            try:
                xs.append(float(record[x_key]))
                ys.append(float(record[key]))
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"history[{index}]: {x_key!r} and {key!r} must be numbers, got"
                    f" {record[x_key]!r} and {record[key]!r}"
                ) from error
        if not xs:
            available = sorted({str(name) for record in history for name in record})
            raise ValueError(
                f"no record of history has both {x_key!r} and {key!r}; fields present: {available}"
            )
        series[key] = (xs, ys)

    fig = _new_figure((6.4, 4.2))
    ax = fig.add_subplot()
    for key, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o" if len(xs) <= 60 else None, markersize=3, linewidth=1.6, label=key)
    ax.set_xlabel(x_key)
    if len(keys) == 1:
        ax.set_ylabel(keys[0])
    else:
        ax.set_ylabel("loss" if all("loss" in key for key in keys) else "value")
    integer_x = all(math.isclose(x, round(x)) for xs, _ in series.values() for x in xs)
    return _finish_curves(fig, path, logy=logy, integer_x=integer_x, title=title, legend_size=9, dpi=dpi)


def _finish_curves(
    fig: Figure,
    path: PathLike,
    *,
    logy: bool,
    integer_x: bool,
    title: str | None,
    legend_size: float,
    dpi: float,
) -> Path:
    """The common end of the curve plots: scale, grid, legend and title of the figure's one axes,
    then the atomic write."""
    ax = fig.axes[0]
    if logy:
        ax.set_yscale("log")
    if integer_x:
        ax.xaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]  # an AutoLocator
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=legend_size)
    if title:
        ax.set_title(title)
    return _save_figure(fig, path, dpi=dpi)


def plot_curves_by_group(
    groups: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    path: PathLike,
    *,
    key: str,
    x_key: str = "epoch",
    title: str | None = None,
    logy: bool = False,
    ylim: tuple[float, float] | None = None,
    dpi: float = 150,
) -> Path:
    """Plot ``key`` against ``x_key`` for many runs: one colour and marker per group (label →
    its runs' ``metrics.jsonl``-style histories), one line per run; the legend names each group
    once, with its number of runs. Records lacking either key are skipped; ``ylim`` crops the y
    axis (e.g. to the converged range, leaving out the first epochs' values).

    Raises:
        ValueError: no run of any group has a record with both keys, or the extension is not
            supported.
    """
    _output_format(path)
    fig = _new_figure((6.4, 4.2))
    ax = fig.add_subplot()
    colours = cycle(f"C{i}" for i in range(10))
    for (label, histories), colour, marker in zip(groups.items(), colours, cycle(_MARKERS)):
        lines = [
            [(float(r[x_key]), float(r[key])) for r in history if key in r and x_key in r]
            for history in histories
        ]
        lines = [points for points in lines if points]
        for number, points in enumerate(lines):
            name = f"{label} ({_runs_label([len(lines)])})" if number == 0 else None
            xs, ys = zip(*points)
            ax.plot(xs, ys, color=colour, marker=marker, markersize=3, linewidth=1.2, alpha=0.8, label=name)
    if not ax.lines:
        raise ValueError(f"no run has a record with both {x_key!r} and {key!r}")
    ax.set_xlabel(x_key)
    ax.set_ylabel(key)
    if ylim is not None:
        ax.set_ylim(*ylim)
    return _finish_curves(fig, path, logy=logy, integer_x=True, title=title, legend_size=8, dpi=dpi)


def learning_curve_panels(
    history: Sequence[dict[str, Any]], percent_metrics: frozenset[str] = PERCENT_METRICS
) -> dict[str, list[str]]:
    """What :func:`learning_curves_png` draws from ``metrics.jsonl`` records (in the names of
    :mod:`attnlab.metric_names`): panel title → record keys. ``loss``: ``train/loss`` and
    ``valid/loss``; ``accuracy (%)``: the validation metrics in ``percent_metrics``
    (``valid/seq_acc``, ``valid/accuracy``), or, for a run without any, its other validation
    metrics under their own title (``valid/perplexity``)."""
    numeric = _numeric_keys(history)
    losses = [key for key in (TRAIN_LOSS, VALID_LOSS) if key in numeric]
    validation = [key for key in numeric if validation_metric(key) not in (None, "loss")]
    percent = [key for key in validation if validation_metric(key) in percent_metrics]
    if percent or not validation:
        return {"loss": losses, "accuracy (%)": percent}
    return {"loss": losses, ", ".join(validation): validation}


def learning_curves_png(
    history: Sequence[dict[str, Any]], percent_metrics: frozenset[str] = PERCENT_METRICS
) -> bytes:
    """A run's learning curves as PNG bytes (the HTML report's, :mod:`attnlab.reporting.html`):
    training and validation loss (left; on a log scale when they span more than
    :data:`LOG_SCALE_RATIO`, as :func:`plot_run_history`) and the validation accuracy (right)
    against epochs, from ``metrics.jsonl`` records (:func:`learning_curve_panels`;
    ``percent_metrics``: the run's percentages)."""
    epochs = [record.get("epoch", number + 1) for number, record in enumerate(history)]
    figure = Figure(figsize=(6.4, 2.6), dpi=80)
    panels = learning_curve_panels(history, percent_metrics)
    for axes, (title, keys) in zip(figure.subplots(1, 2), panels.items()):
        for key in keys:
            axes.plot(epochs, [record.get(key) for record in history], marker=".", label=key)
        axes.set(xlabel="epoch", title=title)
        if title == "loss" and _losses_span_orders(history, keys):
            axes.set_yscale("log")
        if axes.lines:
            axes.legend(fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _numeric_keys(history: Iterable[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for record in history:
        keys.update(
            dict.fromkeys(
                key for key, value in record.items() if isinstance(value, (int, float)) and key != "epoch"
            )
        )
    return list(keys)


def plot_accuracy_panels(
    panels: Sequence[tuple[str, Mapping[str, Sequence[float]]]],
    path: PathLike,
    *,
    title: str | None = None,
    ylabel: str = "test accuracy (%)",
    dpi: float = 150,
) -> Path:
    """One panel per setting (e.g. per T0), one line per model: a metric against epochs 1, 2, ….

    Raffel & Ellis (2015) report epochs to 100% test accuracy (Table 1); these curves show the path
    there. ``panels`` is a list of ``(panel title, {line label: values per epoch})``.
    """
    _output_format(path)
    if not panels:
        raise ValueError("plot_accuracy_panels: no panels to draw")
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig = _new_figure((4.2 * columns, 3.2 * rows))
    for index, (panel_title, curves) in enumerate(panels):
        ax = fig.add_subplot(rows, columns, index + 1)
        for (label, values), marker in zip(curves.items(), cycle(_MARKERS)):
            epochs = range(1, len(values) + 1)
            ax.plot(
                epochs, list(values), marker=marker if len(values) <= 40 else None, markersize=3, label=label
            )
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.xaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]  # an AutoLocator
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    if title:
        fig.suptitle(title)
    return _save_figure(fig, path, dpi=dpi)
