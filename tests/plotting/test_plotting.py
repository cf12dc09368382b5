"""Tests of attnlab.plotting (figures 6–9 and table 3 of Dubois et al. 2020)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from attnlab.plotting import (
    format_mean_std,
    plot_attention_heatmap,
    plot_attention_over_time,
    plot_curves_by_group,
    plot_interpretable_variables,
    plot_metric_by_test_set,
    plot_training_curves,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOURCE = ["000", "t1", "t1", "t2", "."]
OUTPUT = ["000", "110", "110", "100", "<eos>"]
GOLD = [0, 1, 2, 3, 4]
DPI = 60  # low resolution keeps the suite fast; the layout is the same
TEST_SETS = ["interpolation", "long1", "long2", "long3", "long4", "long5"]


def _diagonal(size: int = 5, sharpness: float = 4.0) -> np.ndarray:
    distance = np.abs(np.arange(size)[:, None] - np.arange(size)[None, :])
    weights = np.exp(-sharpness * distance)
    return weights / weights.sum(axis=1, keepdims=True)


def _variables(steps: int = 5) -> dict[str, np.ndarray]:
    return {
        "mu": np.linspace(0.0, 1.0, steps),
        "sigma": np.full(steps, 0.054),
        "rho_previous": np.array([0.0] + [1.0] * (steps - 1)),
        "rho_steps": np.ones(steps),
        "rho_bias": np.zeros(steps),
        "mix_weight": np.linspace(0.9, 0.99, steps),
    }


def _assert_png(path: Path) -> None:
    assert path.is_file()
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 1024
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def _record_saved_figures(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Figure]:
    """The figures ``module`` writes through its ``_save_figure`` from now on (still written)."""
    figures: list[Figure] = []
    original = module._save_figure
    monkeypatch.setattr(
        module, "_save_figure", lambda fig, path, **kw: figures.append(fig) or original(fig, path, **kw)
    )
    return figures


def _only_file(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir())


# ------------------------------------------------------------------ valid PNG output


def test_heatmap_writes_png(tmp_path: Path) -> None:
    out = plot_attention_heatmap(
        _diagonal(), SOURCE, OUTPUT, tmp_path / "heatmap.png", title="diag", gold=GOLD, dpi=DPI
    )
    assert out == tmp_path / "heatmap.png"
    _assert_png(out)


def test_interpretable_variables_writes_png(tmp_path: Path) -> None:
    final = _diagonal()
    out = plot_interpretable_variables(
        final,
        _variables(),
        SOURCE,
        OUTPUT,
        str(tmp_path / "fig9.png"),
        content=_diagonal(sharpness=1.0),
        location=final,
        title="Figure 9",
        gold=GOLD,
        dpi=DPI,
    )
    assert out == tmp_path / "fig9.png"
    _assert_png(out)


def test_interpretable_variables_without_bottom_row(tmp_path: Path) -> None:
    out = plot_interpretable_variables(
        _diagonal(), {"mu": np.linspace(0, 1, 5)}, SOURCE, OUTPUT, tmp_path / "top_only.png", dpi=DPI
    )
    _assert_png(out)


def test_metric_by_test_set_writes_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    results = {
        "location": {name: list(100 - 5 * i + rng.normal(0, 2, 10)) for i, name in enumerate(TEST_SETS)},
        # different numbers of runs per test set, one missing test set
        "transformer": {"interpolation": [100.0] * 10, "long1": [60.0, 70.0, 40.0], "long3": [0.0]},
    }
    out = plot_metric_by_test_set(
        results, tmp_path / "fig6.png", metric_label="seqAcc (%)", test_sets=TEST_SETS, title="t", dpi=DPI
    )
    _assert_png(out)
    loss = plot_metric_by_test_set(
        {"mix": {name: [2.0 + i, 3.0 + i] for i, name in enumerate(TEST_SETS)}},
        tmp_path / "table3.png",
        metric_label="attnLoss",
        test_sets=TEST_SETS,
        percent=False,
        dpi=DPI,
    )
    _assert_png(loss)


def test_training_curves_writes_png(tmp_path: Path) -> None:
    history: list[dict[str, float]] = []
    for epoch in range(1, 11):
        history.append({"epoch": epoch, "train/loss": 1.0 / epoch})
        if epoch % 2 == 0:
            history.append({"epoch": epoch, "valid/loss": 1.2 / epoch})
    history.append({"step": 3})  # lacks every key: skipped
    out = plot_training_curves(history, tmp_path / "curves.png", keys=["train/loss", "valid/loss"], dpi=DPI)
    _assert_png(out)


@pytest.mark.parametrize(
    ("last_loss", "scale"), [(5e-6, "log"), (0.05, "linear"), (0.0, "linear"), (float("nan"), "linear")]
)
def test_run_history_draws_losses_spanning_orders_of_magnitude_on_a_log_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last_loss: float, scale: str
) -> None:
    """A 770-epoch run's validation loss falls from 2.9 to 5e-6: on a linear axis all but its
    first tenth is a flat line at zero. A zero (or NaN) loss cannot go on a log axis."""
    import json

    from attnlab.plotting import curves, plot_run_history

    figures = _record_saved_figures(monkeypatch, curves)
    metrics = tmp_path / "metrics.jsonl"
    losses = [2.9, 0.4, 0.1, last_loss]
    metrics.write_text(
        "".join(
            json.dumps({"epoch": epoch, "train/loss": loss, "valid/loss": loss}) + "\n"
            for epoch, loss in enumerate(losses, start=1)
        )
    )
    out = plot_run_history(metrics, tmp_path / "curves.png")
    assert out is not None
    _assert_png(out)
    (fig,) = figures
    assert fig.axes[0].get_yscale() == scale

    # the HTML report's learning curves: the loss panel alike, the accuracy panel linear
    report_figures: list[Figure] = []

    class RecordedFigure(Figure):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            report_figures.append(self)

    monkeypatch.setattr(curves, "Figure", RecordedFigure)
    history = [json.loads(line) | {"valid/seq_acc": 50.0} for line in metrics.read_text().splitlines()]
    assert curves.learning_curves_png(history)[:8] == PNG_MAGIC
    (report,) = report_figures
    assert [axes.get_yscale() for axes in report.axes] == [scale, "linear"]


def test_other_formats_by_extension(tmp_path: Path) -> None:
    pdf = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "a.pdf", dpi=DPI)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    svg = plot_training_curves(
        [{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}], tmp_path / "b.SVG", keys=["loss"], dpi=DPI
    )
    assert b"<svg" in svg.read_bytes()[:2000]
    with pytest.raises(ValueError, match="extension"):
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "c.jpg", dpi=DPI)
    with pytest.raises(ValueError, match="extension"):
        plot_metric_by_test_set(
            {"m": {"long1": [1.0]}}, tmp_path / "noext", metric_label="x", test_sets=["long1"], dpi=DPI
        )
    assert _only_file(tmp_path) == ["a.pdf", "b.SVG"]


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    out = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "a" / "b" / "h.png", dpi=DPI)
    _assert_png(out)


# ------------------------------------------------------------------ content reflects the data


def test_heatmap_pixels_depend_on_weights(tmp_path: Path) -> None:
    first = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "one.png", dpi=DPI)
    second = plot_attention_heatmap(_diagonal()[::-1], SOURCE, OUTPUT, tmp_path / "two.png", dpi=DPI)
    again = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "three.png", dpi=DPI)
    one, two, three = imread(first), imread(second), imread(again)
    assert one.shape == two.shape
    assert not np.array_equal(one, two)
    assert np.array_equal(one, three)  # deterministic: nothing leaks between calls


def test_gold_markers_change_pixels(tmp_path: Path) -> None:
    plain = imread(plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "p.png", dpi=DPI))
    gold = imread(
        plot_attention_heatmap(
            _diagonal(), SOURCE, OUTPUT, tmp_path / "g.png", gold=[0, -1, 2, 3, 4], dpi=DPI
        )
    )
    assert plain.shape != gold.shape or not np.array_equal(plain, gold)


def test_no_pyplot_figures_leak(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    plot_training_curves([{"epoch": 1, "loss": 1.0}], tmp_path / "t.png", keys=["loss"], dpi=DPI)
    assert plt.get_fignums() == before


# ------------------------------------------------------------------ validation


def test_heatmap_shape_errors(tmp_path: Path) -> None:
    target = tmp_path / "h.png"
    with pytest.raises(ValueError, match=r"5 rows .* 4 output_tokens"):
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT[:4], target, dpi=DPI)
    with pytest.raises(ValueError, match=r"5 columns .* 6 source_tokens"):
        plot_attention_heatmap(_diagonal(), SOURCE + ["x"], OUTPUT, target, dpi=DPI)
    with pytest.raises(ValueError, match="2-D"):
        plot_attention_heatmap(np.ones(5), SOURCE, OUTPUT, target, dpi=DPI)
    with pytest.raises(ValueError, match="gold has 4 entries"):
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, target, gold=[0, 1, 2, 3], dpi=DPI)
    with pytest.raises(ValueError, match=r"gold\[2\] = 5 is out of range"):
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, target, gold=[0, 1, 5, 3, 4], dpi=DPI)
    assert not target.exists()


def test_interpretable_variables_shape_errors(tmp_path: Path) -> None:
    target = tmp_path / "v.png"
    final = _diagonal()
    with pytest.raises(ValueError, match=r"content attention has shape \(4, 5\)"):
        plot_interpretable_variables(final, _variables(), SOURCE, OUTPUT, target, content=final[:4], dpi=DPI)
    with pytest.raises(ValueError, match=r"location attention has shape \(5, 4\)"):
        plot_interpretable_variables(
            final, _variables(), SOURCE, OUTPUT, target, location=final[:, :4], dpi=DPI
        )
    bad = _variables()
    bad["sigma"] = np.ones(3)
    with pytest.raises(ValueError, match=r"variable 'sigma' must have shape \(5,\)"):
        plot_interpretable_variables(final, bad, SOURCE, OUTPUT, target, dpi=DPI)
    with pytest.raises(ValueError, match="at least one"):
        plot_interpretable_variables(final, {}, SOURCE, OUTPUT, target, dpi=DPI)
    with pytest.raises(ValueError, match="output_tokens"):
        plot_interpretable_variables(final, _variables(), SOURCE, OUTPUT[:-1], target, dpi=DPI)
    assert not target.exists()


def test_attention_over_time_draws_the_weights_and_the_marks(tmp_path: Path) -> None:
    weights = np.full(50, 0.01)
    weights[[3, 30]] = 0.26
    plain = plot_attention_over_time(weights, tmp_path / "plain.png", dpi=DPI)
    marked = plot_attention_over_time(weights, tmp_path / "marked.png", marks=[3, 30], dpi=DPI)
    flat = plot_attention_over_time(np.full(50, 0.02), tmp_path / "flat.png", dpi=DPI)
    assert plain.read_bytes().startswith(PNG_MAGIC)
    assert not np.array_equal(imread(plain), imread(marked))
    assert not np.array_equal(imread(plain), imread(flat))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        plot_attention_over_time(np.ones((2, 3)), tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"marks \[50\] are outside the 50 steps"):
        plot_attention_over_time(weights, tmp_path / "bad.png", marks=[3, 50])
    assert not (tmp_path / "bad.png").exists()


def test_curve_errors(tmp_path: Path) -> None:
    target = tmp_path / "c.png"
    with pytest.raises(ValueError, match="non-finite"):
        plot_metric_by_test_set(
            {"m": {"long1": [1.0, float("nan")]}}, target, metric_label="x", test_sets=["long1"], dpi=DPI
        )
    with pytest.raises(ValueError, match="test_sets"):
        plot_metric_by_test_set({"m": {}}, target, metric_label="x", test_sets=[], dpi=DPI)
    with pytest.raises(ValueError, match="valid/loss"):
        plot_training_curves([{"epoch": 1, "train/loss": 1.0}], target, keys=["valid/loss"], dpi=DPI)
    assert not target.exists()


# ------------------------------------------------------------------ atomic writes


def test_atomic_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    # Every function saves through the same atomic writer; the cheap figures exercise it.
    plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    plot_metric_by_test_set(
        {"m": {"long1": [1.0, 2.0]}}, tmp_path / "m.png", metric_label="x", test_sets=["long1"], dpi=DPI
    )
    plot_training_curves([{"epoch": 1, "loss": 1.0}], tmp_path / "t.png", keys=["loss"], dpi=DPI)
    assert _only_file(tmp_path) == ["h.png", "m.png", "t.png"]
    # Overwriting an existing file also goes through a temporary file.
    plot_attention_heatmap(_diagonal()[::-1], SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    assert _only_file(tmp_path) == ["h.png", "m.png", "t.png"]


def test_written_file_permissions_follow_umask(tmp_path: Path) -> None:
    out = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_save_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_savefig(self: Figure, *args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(RuntimeError, match="disk on fire"):
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    with pytest.raises(RuntimeError, match="disk on fire"):
        plot_training_curves([{"epoch": 1, "loss": 1.0}], tmp_path / "t.png", keys=["loss"], dpi=DPI)
    assert _only_file(tmp_path) == []


def test_failed_save_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png", dpi=DPI)
    before = target.read_bytes()

    def broken_savefig(self: Figure, fname: object, *args: object, **kwargs: object) -> None:
        fname.write(b"partial garbage")  # type: ignore[attr-defined]
        raise OSError("no space left")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="no space left"):
        plot_attention_heatmap(_diagonal()[::-1], SOURCE, OUTPUT, target, dpi=DPI)
    assert target.read_bytes() == before
    assert _only_file(tmp_path) == ["h.png"]


# ------------------------------------------------------------------ format_mean_std


def test_format_mean_std() -> None:
    assert format_mean_std([96.0, 97.0, 98.9]) == "97.3 ± 1.5"
    assert format_mean_std(np.array([97.3, 97.3])) == "97.3 ± 0.0"
    assert format_mean_std([]) == "n/a"
    assert format_mean_std(np.array([])) == "n/a"
    assert format_mean_std([5.0]) == "5.0 ± 0.0"
    assert format_mean_std([1.0, 2.0], decimals=2) == "1.50 ± 0.71"
    assert format_mean_std([1.0, 2.0], ddof=0) == "1.5 ± 0.5"
    assert format_mean_std(x for x in (2.0, 4.0)) == "3.0 ± 1.4"
    assert format_mean_std([-0.01, 0.01]) == "0.0 ± 0.0"


def test_interpretable_variables_headers_do_not_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Shift Attender's move weights ("forward", "backward", ...) head columns of their own:
    each header fits inside its cell, so no two headers run into each other."""
    from matplotlib.table import Table

    from attnlab.attention.shift import MOVES
    from attnlab.plotting import attention

    figures = _record_saved_figures(monkeypatch, attention)
    variables = {f"move_{move}": np.linspace(0, 1, 5) for move in MOVES} | {"position": np.arange(5.0)}
    plot_interpretable_variables(_diagonal(), variables, SOURCE, OUTPUT, tmp_path / "shift.png", dpi=DPI)
    (fig,) = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (table,) = [child for ax in fig.axes for child in ax.get_children() if isinstance(child, Table)]
    headers = {col: cell for (row, col), cell in table.get_celld().items() if row == 0}
    assert sorted(cell.get_text().get_text() for cell in headers.values()) == sorted([*MOVES, "pos."])
    for cell in headers.values():
        text = cell.get_text().get_window_extent(renderer)
        box = cell.get_window_extent(renderer)
        assert box.x0 <= text.x0 and text.x1 <= box.x1, cell.get_text().get_text()


LONG_TITLE = (
    "walk around left thrice\n"
    "wrong: stops after 16 actions of 24; first difference at action 17; the loop ends a pass early"
)


@pytest.mark.parametrize("kind", ["heatmap", "heads"])
def test_a_long_title_is_wrapped_inside_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A SCAN plot's outcome line is longer than a five-word command's heatmap is wide: it was
    cut off at both edges of the figure."""
    from matplotlib.text import Text

    from attnlab.plotting import attention, plot_attention_heads

    figures = _record_saved_figures(monkeypatch, attention)
    path = tmp_path / f"{kind}.png"
    if kind == "heatmap":
        plot_attention_heatmap(_diagonal(), SOURCE, OUTPUT, path, title=LONG_TITLE, dpi=DPI)
    else:
        plot_attention_heads(_diagonal()[None, None], SOURCE, OUTPUT, path, title=LONG_TITLE, dpi=DPI)
    (fig,) = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    figure_box = fig.bbox
    (title,) = [
        text
        for text in fig.findobj(Text)
        if text.get_text().replace("\n", " ").startswith("walk around left thrice wrong")
    ]
    box = title.get_window_extent(renderer)
    assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1, (box, figure_box)
    assert title.get_text().count("\n") > LONG_TITLE.count("\n")  # it did need wrapping
    assert " ".join(title.get_text().split()) == " ".join(LONG_TITLE.split())  # every word kept


# ------------------------------------------------------------------ every layer and head


def test_attention_heads_grid_has_a_panel_per_layer_and_head_and_a_mean_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.plotting import attention, plot_attention_heads

    figures = _record_saved_figures(monkeypatch, attention)
    layers, heads = 2, 3
    weights = np.stack([np.stack([_diagonal(), _diagonal()[::-1], np.full((5, 5), 0.2)])] * layers)
    names = [["dot", "shift", "dot"], ["dot", "dot", "location"]]
    out = plot_attention_heads(
        weights, SOURCE, OUTPUT, tmp_path / "heads.png", head_names=names, gold=GOLD, title="t", dpi=DPI
    )
    _assert_png(out)
    (fig,) = figures
    heatmaps = [ax for ax in fig.axes if ax.get_images()]
    assert len(heatmaps) == layers * (heads + 1)  # and one colour bar
    titles = [ax.get_title() for ax in heatmaps]
    assert titles[:4] == [
        "layer 0, head 0 (dot)",
        "layer 0, head 1 (shift)",
        "layer 0, head 2 (dot)",
        "layer 0, mean of heads",
    ]
    np.testing.assert_allclose(heatmaps[3].get_images()[0].get_array(), weights[0].mean(axis=0))
    # the gold boxes on every panel, as in plot_attention_heatmap
    assert all(len(ax.patches) == len(GOLD) for ax in heatmaps)


def test_attention_heads_rejects_bad_shapes(tmp_path: Path) -> None:
    from attnlab.plotting import plot_attention_heads

    with pytest.raises(ValueError, match="4-D"):
        plot_attention_heads(_diagonal(), SOURCE, OUTPUT, tmp_path / "h.png")
    with pytest.raises(ValueError, match="output_tokens"):
        plot_attention_heads(np.ones((1, 2, 5, 5)) / 5, SOURCE, OUTPUT[:4], tmp_path / "h.png")
    with pytest.raises(ValueError, match="head_names"):
        plot_attention_heads(
            np.ones((1, 2, 5, 5)) / 5, SOURCE, OUTPUT, tmp_path / "h.png", head_names=[["dot"]]
        )
    assert not (tmp_path / "h.png").exists()


def test_curves_by_group_draws_a_line_per_run_and_names_each_group_once(monkeypatch, tmp_path: Path) -> None:
    from attnlab.plotting import curves

    saved = {}
    monkeypatch.setattr(curves, "_save_figure", lambda fig, path, dpi: saved.update(fig=fig) or Path(path))
    groups = {
        "lstm": [[{"epoch": 1, "ppl": 200.0}, {"epoch": 2, "ppl": 150.0}], [{"epoch": 1, "ppl": 210.0}]],
        "4-gram": [[{"epoch": 1, "ppl": 190.0}, {"epoch": 2}]],  # a record without the key: skipped
        "empty": [[{"epoch": 1}]],  # no point: no line, not in the legend
    }
    plot_curves_by_group(groups, tmp_path / "c.png", key="ppl", ylim=(100.0, 250.0))
    axes = saved["fig"].axes[0]
    assert [list(line.get_ydata()) for line in axes.lines] == [[200.0, 150.0], [210.0], [190.0]]
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["lstm (2 runs)", "4-gram (1 run)"]
    assert axes.get_ylim() == (100.0, 250.0)
    with pytest.raises(ValueError, match="'epoch' and 'loss'"):
        plot_curves_by_group(groups, tmp_path / "d.png", key="loss")
