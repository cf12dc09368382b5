"""``attnlab plot`` for toy runs: the training curves."""

from pathlib import Path

from attnlab.experiments.base import PlotRequest
from attnlab.experiments.driver import load_trained
from attnlab.plotting import plot_run_history

from .experiment import EXPERIMENT


def plot_run(run_dir: str | Path, request: PlotRequest) -> list[Path]:
    run = load_trained(EXPERIMENT, run_dir, request.device_name).run
    curves = plot_run_history(run.metrics_file, run.plots_dir / "training_curves.png")
    return [curves] if curves else []
