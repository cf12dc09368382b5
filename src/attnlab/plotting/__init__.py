"""Figures: attention views and the papers' metric plots.

* :func:`plot_attention_heatmap`: one attention matrix with optional gold attention (a panel of
  Figure 9);
* :func:`plot_attention_heads`: a grid of them, one per layer and head, plus each layer's mean;
* :func:`plot_interpretable_variables`: the Figure 9 layout (final attention, table of per-step
  interpretable variables, content and location attention);
* :func:`plot_attention_over_time`: attention pooling weights over one sequence, marked steps
  shown (Raffel & Ellis 2015);
* :func:`plot_metric_by_test_set`: a metric per test set, one line per model, mean ± std over
  runs (Figures 6–8, and Table 3's *attnLoss* with ``percent=False``);
* :func:`plot_training_curves`: losses per epoch from ``metrics.jsonl`` records
  (:func:`plot_run_history`: of a run's file);
* :func:`plot_curves_by_group`: one metric per epoch of many runs, a colour per group;
* :func:`plot_accuracy_panels`: test accuracy against epochs, one panel per setting (Raffel &
  Ellis 2015, the path to Table 1);
* :func:`format_mean_std`: ``"97.3 ± 1.2"`` cells for reports and tables such as Table 3.

Every function takes plain numpy arrays / Python lists, draws on a stand-alone Agg figure (no
pyplot state), writes ``.png``, ``.pdf`` or ``.svg`` atomically and returns the path written.
"""

from attnlab.plotting.attention import (
    SUPPORTED_FORMATS,
    VARIABLE_LABELS,
    plot_attention_heads,
    plot_attention_heatmap,
    plot_attention_over_time,
    plot_interpretable_variables,
)
from attnlab.plotting.curves import (
    format_mean_std,
    plot_accuracy_panels,
    plot_curves_by_group,
    plot_metric_by_test_set,
    plot_run_history,
    plot_training_curves,
)

__all__ = [
    "SUPPORTED_FORMATS",
    "VARIABLE_LABELS",
    "format_mean_std",
    "plot_accuracy_panels",
    "plot_curves_by_group",
    "plot_attention_heads",
    "plot_attention_heatmap",
    "plot_attention_over_time",
    "plot_interpretable_variables",
    "plot_metric_by_test_set",
    "plot_run_history",
    "plot_training_curves",
]
