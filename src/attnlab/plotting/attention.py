"""Attention heatmaps and the interpretable-variables figure of Dubois et al. (2020).

Reproduces the qualitative analysis of *Location Attention for Extrapolation to Longer
Sequences* (Dubois et al., 2020, §7.5):

* :func:`plot_attention_heatmap` draws one attention matrix (target steps × source tokens), the
  kind of panel Figure 9 is made of, optionally marking the gold-standard attention of the lookup
  table tasks (§6.1, Tables 1–2);
* :func:`plot_attention_heads` draws a grid of them, one per layer and head of a multi-head
  attention (a Transformer's cross-attention), each layer's mean over heads in a last column;
* :func:`plot_interpretable_variables` draws the whole Figure 9 layout: the final attention
  (top-left), a table of the per-step interpretable variables (top-right: ``mu``, ``sigma``, the
  building-block weights ``rho`` and the mix weight) and, when given, the content and location
  attention (bottom).

Inputs are plain numpy arrays (or anything :func:`numpy.asarray` accepts) and token lists, so the
functions do not depend on any model. Figures are built on :class:`matplotlib.figure.Figure` with
an Agg canvas: pyplot is never imported, no global backend is switched and nothing leaks from one
call to the next. Files are written atomically (:func:`attnlab.io.atomic_path`), in the format
given by the path's extension (``.png``, ``.pdf``, ``.svg``).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox

from attnlab.io import atomic_path
from attnlab.reporting.tables import format_number

__all__ = [
    "SUPPORTED_FORMATS",
    "VARIABLE_LABELS",
    "plot_attention_heads",
    "plot_attention_heatmap",
    "plot_attention_over_time",
    "plot_interpretable_variables",
]

PathLike = str | os.PathLike[str]

SUPPORTED_FORMATS: dict[str, str] = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
"""File extension → matplotlib format of the figures this package writes."""

VARIABLE_LABELS: dict[str, str] = {
    "mu": r"$\mu$",
    "sigma": r"$\sigma$",
    "rho_previous": r"$\rho^{(\alpha)}$",
    "rho_steps": r"$\rho^{(1/n)}$",
    "rho_bias": r"$\rho^{(1)}$",
    "mix_weight": r"$\rho^{(\lambda)}$",
    "position": "pos.",
}
"""Column headers of the Figure 9 table, in the paper's notation (§5.1–5.2, §7.5).

``rho_previous`` gates the mean of the previous attention, ``rho_steps`` is the (soft-integer)
number of steps of size ``1/(n_s - 1)``, ``rho_bias`` gates the bias building block and
``mix_weight`` is the weight of the location attention in the Mix Attender and ``position`` the
Shift Attender's attended word. The Shift Attender's move weights ``move_<name>`` are shown as
``<name>``; other variables not listed here are shown under their own name.
"""

_VARIABLE_DESCRIPTIONS: dict[str, str] = {
    "mu": "mean of the location Gaussian",
    "sigma": "its standard deviation",
    "rho_previous": "gate on the previous attention",
    "rho_steps": "number of steps",
    "rho_bias": "gate on the bias",
    "mix_weight": "weight of location attention",
}

_DEFAULT_CMAP = "Blues"
_GOLD_COLOR = "#d62728"
_CELL_INCHES = 0.42  # preferred size of one heatmap cell
_MAX_PANEL_INCHES = 16.0  # a heatmap panel never gets wider / taller than this


# --------------------------------------------------------------------------------------------
# Shared helpers (also used by :mod:`attnlab.plotting.curves`)
# --------------------------------------------------------------------------------------------


def _output_format(path: PathLike) -> str:
    """The matplotlib format for ``path``'s extension, or a ``ValueError``."""
    suffix = Path(path).suffix.lower()
    fmt = SUPPORTED_FORMATS.get(suffix)
    if fmt is None:
        supported = ", ".join(SUPPORTED_FORMATS)
        raise ValueError(
            f"cannot infer the figure format of {os.fspath(path)!r}: extension {suffix or '(none)'!r}"
            f" is not one of {supported}"
        )
    return fmt


def _new_figure(figsize: tuple[float, float]) -> Figure:
    """A stand-alone figure with an Agg canvas (no pyplot state involved)."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save_figure(fig: Figure, path: PathLike, *, dpi: float) -> Path:
    """Write ``fig`` to ``path`` atomically (:func:`attnlab.io.atomic_path`); the format comes
    from the extension.

    The figure is rendered into a temporary file in the same directory, flushed to disk and moved
    over ``path``. On any failure the temporary file is removed and ``path`` is left as it was
    (absent, or its previous content). Missing parent directories are created.
    """
    target = Path(path)
    fmt = _output_format(target)
    with atomic_path(target) as temporary, open(temporary, "wb") as handle:
        fig.savefig(handle, format=fmt, dpi=dpi)
        handle.flush()
        os.fsync(handle.fileno())
    return target


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _as_matrix(name: str, weights: Any) -> np.ndarray:
    array = np.asarray(weights, dtype=float)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [target steps, source tokens], got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {array.shape}")
    return array


def _check_tokens(
    name: str, weights: np.ndarray, source_tokens: Sequence[str], output_tokens: Sequence[str]
) -> None:
    steps, sources = weights.shape
    if len(output_tokens) != steps:
        raise ValueError(
            f"{name} has {steps} rows (target steps) but {len(output_tokens)} output_tokens were"
            f" given; shape is {weights.shape}"
        )
    if len(source_tokens) != sources:
        raise ValueError(
            f"{name} has {sources} columns (source tokens) but {len(source_tokens)} source_tokens"
            f" were given; shape is {weights.shape}"
        )


def _check_gold(gold: Sequence[int | None] | None, steps: int, sources: int) -> list[int | None]:
    if gold is None:
        return [None] * steps
    gold_list = list(gold)
    if len(gold_list) != steps:
        raise ValueError(f"gold has {len(gold_list)} entries but the attention has {steps} target steps")
    checked: list[int | None] = []
    for step, index in enumerate(gold_list):
        if index is None or int(index) < 0:  # -1 marks "unknown" (Seq2SeqBatch.gold_attention)
            checked.append(None)
            continue
        if int(index) >= sources:
            raise ValueError(f"gold[{step}] = {int(index)} is out of range for {sources} source tokens")
        checked.append(int(index))
    return checked


def _color_limits(*matrices: np.ndarray, vmax: float | None) -> tuple[float, float]:
    """``(0, 1)`` for probability-like weights, widened when the data leaves ``[0, 1]``."""
    finite = np.concatenate([m[np.isfinite(m)].ravel() for m in matrices])
    low = min(0.0, float(finite.min())) if finite.size else 0.0
    if vmax is None:
        vmax = max(1.0, float(finite.max())) if finite.size else 1.0
    return low, float(vmax)


# --------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Geometry:
    """Sizes (inches / points) of a heatmap panel with square cells."""

    cell: float
    width: float
    height: float
    fontsize: float
    rotate_sources: bool
    label_height: float  # extra height taken by the source tick labels


def _geometry(steps: int, source_tokens: Sequence[str]) -> _Geometry:
    sources = len(source_tokens)
    cell = min(_CELL_INCHES, _MAX_PANEL_INCHES / max(sources, steps, 1))
    fontsize = float(np.clip(cell * 72 * 0.55, 5.0, 10.0))
    longest = max((len(str(token)) for token in source_tokens), default=0)
    label_inches = longest * fontsize * 0.62 / 72
    rotate = label_inches > cell * 0.95
    return _Geometry(
        cell=cell,
        width=cell * sources,
        height=cell * steps,
        fontsize=fontsize,
        rotate_sources=rotate,
        label_height=label_inches if rotate else fontsize / 72,
    )


def _wrap_title(title: str, width_inches: float, fontsize: float) -> str:
    """``title`` with each of its lines broken at spaces so that it fits ``width_inches`` at
    ``fontsize`` points (a run's outcome line under a short command was cut off at the figure's
    edges). A character is taken as 0.6 em wide, above DejaVu Sans's average; a word longer than
    the width stays whole."""
    characters = max(int(width_inches * 72 / (0.6 * fontsize)), 10)
    return "\n".join(
        textwrap.fill(line, characters, break_long_words=False, break_on_hyphens=False) or line
        for line in title.split("\n")
    )


def _suptitle(fig: Figure, title: str, fontsize: float) -> None:
    """``title`` over the whole figure, wrapped to its width less a margin."""
    fig.suptitle(_wrap_title(title, fig.get_figwidth() - 0.5, fontsize), fontsize=fontsize)


def _draw_heatmap(
    ax: Axes,
    weights: np.ndarray,
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    *,
    gold: list[int | None],
    limits: tuple[float, float],
    cmap: str,
    title: str | None,
    fontsize: float,
    rotate_sources: bool,
    axis_labels: tuple[str, str] = ("source tokens", "output tokens"),
) -> AxesImage:
    steps, sources = weights.shape
    image = ax.imshow(
        weights,
        cmap=cmap,
        vmin=limits[0],
        vmax=limits[1],
        aspect="auto",
        interpolation="nearest",
    )
    ax.set_xticks(np.arange(sources))
    ax.set_yticks(np.arange(steps))
    ax.set_xticklabels(
        [str(token) for token in source_tokens],
        fontsize=fontsize,
        rotation=90 if rotate_sources else 0,
    )
    ax.set_yticklabels([str(token) for token in output_tokens], fontsize=fontsize)
    ax.set_ylabel(axis_labels[1], fontsize=fontsize + 1)
    # Thin grid between cells keeps rows/columns distinguishable when weights are spread out.
    ax.set_xticks(np.arange(sources + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(steps + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    ax.tick_params(which="major", length=2)
    for spine in ax.spines.values():
        spine.set_visible(False)
    has_gold = False
    for step, index in enumerate(gold):
        if index is None:
            continue
        ax.add_patch(
            Rectangle(
                (index - 0.42, step - 0.42),
                0.84,
                0.84,
                fill=False,
                edgecolor=_GOLD_COLOR,
                linewidth=1.6,
            )
        )
        has_gold = True
    # The key goes into the axis label: a legend inside the axes would hide cells.
    ax.set_xlabel(
        f"{axis_labels[0]} (red boxes: gold attention)" if has_gold else axis_labels[0],
        fontsize=fontsize + 1,
    )
    if title:
        ax.set_title(title, fontsize=fontsize + 2)
    return image


def plot_attention_heatmap(
    weights: np.ndarray,
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    path: PathLike,
    *,
    title: str | None = None,
    gold: Sequence[int | None] | None = None,
    cmap: str = _DEFAULT_CMAP,
    vmax: float | None = None,
    dpi: float = 150,
    axis_labels: tuple[str, str] = ("source tokens", "output tokens"),
    value_label: str = "attention weight",
) -> Path:
    """Plot one attention matrix as a heatmap (a panel of Dubois et al. 2020, Figure 9).

    Args:
        weights: ``[T, S]`` attention weights, row ``t`` is the attention of decoding step ``t``
            over the ``S`` source tokens.
        source_tokens: the ``S`` source tokens (x tick labels).
        output_tokens: the ``T`` output tokens (y tick labels), e.g. the target plus ``<eos>``.
        path: where to write the figure; ``.png``, ``.pdf`` or ``.svg``. Parent directories are
            created. The write is atomic.
        title: optional axes title.
        gold: optional gold-standard attention, one source index per decoding step (the "Target
            Attention" column of Tables 1–2); each gold cell gets a red box. Negative entries or
            ``None`` mean "unknown" and are skipped.
        cmap: matplotlib colormap name.
        vmax: top of the colour scale; by default 1 (weights are probabilities), or the largest
            weight if some weight exceeds 1. The bottom is 0 unless a weight is negative.
        dpi: resolution of raster output.
        axis_labels: the x and y axis labels (a language model's memory: window positions and
            the words read).
        value_label: the colour bar's label (another table of probabilities, e.g. a word's
            readout, names what its values are).

    Returns:
        The path written.

    Raises:
        ValueError: ``weights`` is not a non-empty 2-D array, the token counts do not match its
            shape, ``gold`` has the wrong length or an out-of-range index, or the extension is
            not supported.
    """
    _output_format(path)
    matrix = _as_matrix("weights", weights)
    _check_tokens("weights", matrix, source_tokens, output_tokens)
    steps, sources = matrix.shape
    gold_checked = _check_gold(gold, steps, sources)

    geo = _geometry(steps, source_tokens)
    figure_width = max(geo.width + 2.4, 4.0)
    fig = _new_figure((figure_width, max(geo.height + geo.label_height + 1.3, 3.0)))
    ax = fig.add_subplot()
    if title:
        # centred over the axes, which the colour bar pushes left: the width left of the bar
        title = _wrap_title(title, figure_width - 1.2, geo.fontsize + 2)
    image = _draw_heatmap(
        ax,
        matrix,
        source_tokens,
        output_tokens,
        gold=gold_checked,
        limits=_color_limits(matrix, vmax=vmax),
        cmap=cmap,
        title=title,
        fontsize=geo.fontsize,
        rotate_sources=geo.rotate_sources,
        axis_labels=axis_labels,
    )
    colorbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    colorbar.ax.tick_params(labelsize=geo.fontsize)
    colorbar.set_label(value_label, fontsize=geo.fontsize)
    return _save_figure(fig, path, dpi=dpi)


def plot_attention_heads(
    weights: np.ndarray,
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    path: PathLike,
    *,
    head_names: Sequence[Sequence[str]] | None = None,
    title: str | None = None,
    gold: Sequence[int | None] | None = None,
    cmap: str = _DEFAULT_CMAP,
    dpi: float = 150,
) -> Path:
    """Plot every layer and head of a multi-head attention as a grid of heatmaps.

    Row ``l`` holds the heads of layer ``l`` (e.g. a Transformer decoder layer's cross-attention,
    :meth:`attnlab.models.transformer.TransformerSeq2Seq.cross_attention_maps`), then the layer's
    mean over heads (for the last layer, the attention a model returns); every panel is drawn as
    by :func:`plot_attention_heatmap`, on one colour scale, with the gold boxes.

    Args:
        weights: ``[layers, heads, T, S]`` attention weights.
        source_tokens: the ``S`` source tokens (x tick labels).
        output_tokens: the ``T`` output tokens (y tick labels).
        path: ``.png``, ``.pdf`` or ``.svg`` path; written atomically, parents created.
        head_names: optional ``[layers][heads]`` names shown in the panel titles (e.g. the
            heads' attender kinds, ``TransformerSeq2Seq.head_names``).
        title: optional figure title.
        gold: optional gold attention (one source index per step, negative or ``None`` =
            unknown), boxed on every panel.
        cmap: matplotlib colormap name.
        dpi: resolution of raster output.

    Returns:
        The path written.

    Raises:
        ValueError: ``weights`` is not a non-empty 4-D array, the token counts or ``head_names``
            do not match its shape, ``gold`` is invalid, or the extension is not supported.
    """
    _output_format(path)
    array = np.asarray(weights, dtype=float)
    if array.ndim != 4 or array.size == 0:
        raise ValueError(
            f"weights must be a non-empty 4-D array [layers, heads, target steps, source tokens], "
            f"got shape {array.shape}"
        )
    layers, heads, steps, sources = array.shape
    _check_tokens("weights", array[0, 0], source_tokens, output_tokens)
    names = [[str(name) for name in row] for row in head_names] if head_names is not None else None
    if names is not None and [len(row) for row in names] != [heads] * layers:
        raise ValueError(f"head_names must give {heads} names for each of the {layers} layers")
    gold_checked = _check_gold(gold, steps, sources)
    means = array.mean(axis=1)

    geo = _geometry(steps, source_tokens)
    panel_w = max(geo.width + 1.3, 2.6)
    panel_h = max(geo.height + geo.label_height + 1.0, 2.4)
    fig = _new_figure((panel_w * (heads + 1) + 1.0, panel_h * layers + (0.5 if title else 0.0)))
    limits = _color_limits(array.reshape(-1, sources), vmax=None)
    grid = fig.add_gridspec(layers, heads + 1)
    image = None
    for layer in range(layers):
        panels = [(array[layer, head], _head_title(layer, head, names)) for head in range(heads)]
        panels.append((means[layer], f"layer {layer}, mean of heads"))
        for column, (matrix, panel_title) in enumerate(panels):
            ax = fig.add_subplot(grid[layer, column])
            image = _draw_heatmap(
                ax,
                matrix,
                source_tokens,
                output_tokens,
                gold=gold_checked,
                limits=limits,
                cmap=cmap,
                title=panel_title,
                fontsize=geo.fontsize,
                rotate_sources=geo.rotate_sources,
            )
            if column:
                ax.set_ylabel("")
            if layer < layers - 1:
                ax.set_xlabel("")
    assert image is not None
    colorbar = fig.colorbar(image, ax=fig.axes, fraction=0.02, pad=0.01)
    colorbar.ax.tick_params(labelsize=geo.fontsize)
    colorbar.set_label("attention weight", fontsize=geo.fontsize)
    if title:
        _suptitle(fig, title, geo.fontsize + 3)
    return _save_figure(fig, path, dpi=dpi)


def _head_title(layer: int, head: int, names: list[list[str]] | None) -> str:
    kind = f" ({names[layer][head]})" if names is not None else ""
    return f"layer {layer}, head {head}{kind}"


def _as_variables(variables: Mapping[str, Any], steps: int) -> dict[str, np.ndarray]:
    if not variables:
        raise ValueError("variables must contain at least one per-step variable")
    checked: dict[str, np.ndarray] = {}
    for name, values in variables.items():
        array = np.asarray(values, dtype=float)
        if array.ndim != 1 or array.shape[0] != steps:
            raise ValueError(
                f"variable {name!r} must have shape ({steps},) (one value per target step of the"
                f" final attention), got shape {array.shape}"
            )
        checked[str(name)] = array
    return checked


def _draw_variable_table(
    ax: Axes,
    variables: dict[str, np.ndarray],
    output_tokens: Sequence[str],
    *,
    fontsize: float,
    axes_height: float,
) -> None:
    """Draw the Figure 9 table in ``ax`` (about ``axes_height`` inches tall), key underneath."""
    ax.set_axis_off()
    names = list(variables)
    cell_text = [
        [format_number(float(variables[name][step]), 2) for name in names]
        for step in range(len(output_tokens))
    ]
    row_labels = [f"{step}: {token}" for step, token in enumerate(output_tokens)]
    col_labels = [VARIABLE_LABELS.get(name, name.removeprefix("move_")) for name in names]
    described = [name for name in names if name in _VARIABLE_DESCRIPTIONS]
    key_lines = [f"{VARIABLE_LABELS[name]}: {_VARIABLE_DESCRIPTIONS[name]}" for name in described]
    # Reserve the bottom of the axes for the key, one short line per described variable.
    key_fontsize = max(fontsize - 1, 5.0)
    key_inches = (len(key_lines) * key_fontsize * 1.45 + 6) / 72 if key_lines else 0.0
    key_height = min(0.45, key_inches / max(axes_height, 1e-6))
    table = ax.table(
        cellText=cell_text,
        rowLabels=row_labels,
        colLabels=col_labels,
        cellLoc="center",
        rowLoc="right",
        bbox=Bbox.from_bounds(0.0, key_height + (0.02 if key_lines else 0.0), 1.0, 1.0 - key_height - 0.02),
    )
    table.auto_set_font_size(False)
    table.set_fontsize(fontsize)
    for (row, col), cell in table.get_celld().items():
        cell.set_edgecolor("#bbbbbb")
        cell.set_linewidth(0.5)
        if row == 0:
            cell.set_facecolor("#e8eef7")
            cell.get_text().set_fontsize(fontsize + 1)
        if col == -1:
            cell.set_facecolor("#f4f4f4")
            cell.get_text().set_horizontalalignment("right")
    if key_lines:
        ax.text(
            0.0,
            0.0,
            "\n".join(key_lines),
            transform=ax.transAxes,
            ha="left",
            va="bottom",
            fontsize=key_fontsize,
            color="#444444",
        )


def plot_interpretable_variables(
    final: np.ndarray,
    variables: Mapping[str, np.ndarray],
    source_tokens: Sequence[str],
    output_tokens: Sequence[str],
    path: PathLike,
    *,
    content: np.ndarray | None = None,
    location: np.ndarray | None = None,
    title: str | None = None,
    gold: Sequence[int | None] | None = None,
    cmap: str = _DEFAULT_CMAP,
    dpi: float = 150,
) -> Path:
    """Plot the Figure 9 layout of Dubois et al. (2020) for one example.

    Top-left: the final attention ``alpha`` (target steps × source tokens). Top-right: a table of
    the interpretable variables of every decoding step (rows labelled ``"step: output token"``,
    one column per variable, two decimals; known names such as ``mu``, ``sigma``,
    ``rho_previous``, ``rho_steps``, ``rho_bias``, ``mix_weight`` get the paper's symbols, see
    :data:`VARIABLE_LABELS`). Bottom, when given: the content attention ``gamma`` (left) and the
    location attention ``lambda`` (right) of the Mix Attender (§5.2).

    Args:
        final: ``[T, S]`` final attention weights.
        variables: name → ``[T]`` per-step values, in column order.
        source_tokens: the ``S`` source tokens.
        output_tokens: the ``T`` output tokens.
        path: ``.png``, ``.pdf`` or ``.svg`` path; written atomically, parents created.
        content: optional ``[T, S]`` content attention.
        location: optional ``[T, S]`` location attention.
        title: optional figure title.
        gold: optional gold attention (one source index per step, negative = unknown), boxed on
            the final attention.
        cmap: matplotlib colormap name for the heatmaps.
        dpi: resolution of raster output.

    Returns:
        The path written.

    Raises:
        ValueError: a matrix is not 2-D or disagrees with the final attention's shape or the
            token counts, a variable does not have one value per step, ``variables`` is empty,
            ``gold`` is invalid, or the extension is not supported.
    """
    _output_format(path)
    final_matrix = _as_matrix("final", final)
    _check_tokens("final", final_matrix, source_tokens, output_tokens)
    steps, sources = final_matrix.shape
    gold_checked = _check_gold(gold, steps, sources)
    bottom: list[tuple[str, np.ndarray]] = []
    for name, matrix in (("content", content), ("location", location)):
        if matrix is None:
            continue
        array = _as_matrix(name, matrix)
        if array.shape != final_matrix.shape:
            raise ValueError(
                f"{name} attention has shape {array.shape} but the final attention has shape"
                f" {final_matrix.shape}"
            )
        bottom.append((name, array))
    checked_variables = _as_variables(variables, steps)

    geo = _geometry(steps, source_tokens)
    fontsize = geo.fontsize
    heat_w, heat_h = geo.width, geo.height + geo.label_height
    table_fontsize = float(np.clip(geo.cell * 72 * 0.5, 5.0, 10.0))
    row_label_w = 0.09 * max(len(f"{i}: {tok}") for i, tok in enumerate(output_tokens)) + 0.3
    # Every column is as wide as the longest header needs (headers such as the Shift Attender's
    # "backward" must not run into their neighbours), at least 0.68 in.
    longest = max(len(VARIABLE_LABELS.get(name, name.removeprefix("move_"))) for name in checked_variables)
    column_w = max(0.68, longest * 0.62 * (table_fontsize + 1) / 72 + 0.25)
    table_w = max(column_w * len(checked_variables) + row_label_w, 3.2)
    panel_w = max(heat_w + 2.2, 3.8)
    n_key = sum(name in _VARIABLE_DESCRIPTIONS for name in checked_variables)
    top_h = max(heat_h + 1.3, 3.2, 0.26 * (steps + 1) + 0.25 * n_key + 0.8)
    bottom_h = max(heat_h + 1.3, 3.0) if bottom else 0.0
    right_w = max(table_w, panel_w if len(bottom) == 2 else 0.0)
    fig = _new_figure((panel_w + right_w, top_h + bottom_h))
    limits = _color_limits(final_matrix, *(m for _, m in bottom), vmax=None)

    if bottom:
        grid = fig.add_gridspec(2, 2, height_ratios=(top_h, bottom_h), width_ratios=(panel_w, right_w))
    else:
        grid = fig.add_gridspec(1, 2, width_ratios=(panel_w, right_w))
    heat_ax = fig.add_subplot(grid[0, 0])
    image = _draw_heatmap(
        heat_ax,
        final_matrix,
        source_tokens,
        output_tokens,
        gold=gold_checked,
        limits=limits,
        cmap=cmap,
        title="final attention",
        fontsize=fontsize,
        rotate_sources=geo.rotate_sources,
    )
    colorbar = fig.colorbar(image, ax=heat_ax, fraction=0.05, pad=0.02)
    colorbar.ax.tick_params(labelsize=fontsize)

    table_ax = fig.add_subplot(grid[0, 1])
    _draw_variable_table(
        table_ax,
        checked_variables,
        output_tokens,
        fontsize=table_fontsize,
        axes_height=top_h - 1.0,
    )
    table_ax.set_title("interpretable variables", fontsize=fontsize + 2)

    for column, (name, matrix) in enumerate(bottom):
        ax = fig.add_subplot(grid[1, column])
        image = _draw_heatmap(
            ax,
            matrix,
            source_tokens,
            output_tokens,
            gold=[None] * steps,
            limits=limits,
            cmap=cmap,
            title=f"{name} attention",
            fontsize=fontsize,
            rotate_sources=geo.rotate_sources,
        )
        colorbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
        colorbar.ax.tick_params(labelsize=fontsize)
    if title:
        _suptitle(fig, title, fontsize + 3)
    return _save_figure(fig, path, dpi=dpi)


def plot_attention_over_time(
    weights: Sequence[float] | np.ndarray,
    path: PathLike,
    *,
    marks: Sequence[int] = (),
    title: str | None = None,
    dpi: float = 150,
) -> Path:
    """Plot attention pooling weights ``α_t`` over the steps of one sequence (Raffel & Ellis 2015,
    eq. 1), with dashed lines at ``marks`` (e.g. the two marked steps of the addition problem).

    Raises:
        ValueError: ``weights`` is not a non-empty 1-D array, or a mark is outside it.
    """
    _output_format(path)
    values = np.asarray(weights, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"weights must be a non-empty 1-D array, got shape {values.shape}")
    bad = [mark for mark in marks if not 0 <= mark < values.size]
    if bad:
        raise ValueError(f"marks {bad} are outside the {values.size} steps")
    fig = _new_figure((7.0, 3.2))
    ax = fig.add_subplot()
    ax.plot(np.arange(values.size), values, color="#1f77b4", linewidth=1.2)
    for index, mark in enumerate(marks):
        ax.axvline(
            mark,
            color=_GOLD_COLOR,
            linestyle="--",
            linewidth=1.0,
            label="marked step" if index == 0 else None,
        )
    if marks:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlim(0, values.size - 1 if values.size > 1 else 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time step t")
    ax.set_ylabel("attention weight α_t")
    if title:
        ax.set_title(title, fontsize=10)
    return _save_figure(fig, path, dpi=dpi)
