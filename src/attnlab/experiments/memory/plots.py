"""``attnlab plot`` for memory-problem runs (Raffel & Ellis 2015): attention over time, curves.

``attention_test_<i>.png`` shows the pooling weights ``α_t`` (eq. 1) over test sequence ``i``,
with the two marked steps (addition, multiplication) or relevant symbols (temporal order) as
dashed lines; its title gives the weight on them, the target and the prediction.
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab.config import ConfigError
from attnlab.experiments.base import PlotRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.memory import experiment as memory
from attnlab.experiments.registry import check_plot_indices
from attnlab.models.pooling_network import FeedForwardAttentionNetwork
from attnlab.plotting import plot_attention_over_time, plot_run_history
from attnlab.tasks.memory_problems import MemoryBatch


@torch.no_grad()
def plot_run(run_dir: str | Path, request: PlotRequest) -> list[Path]:
    """Attention over time for test sequences ``request.indices``, and the training curves."""
    if request.test_set is not None or request.data_file is not None:
        raise ConfigError("--test-set and --data do not apply to memory runs (one generated test set)")
    trained = load_trained(memory.EXPERIMENT, run_dir, request.device_name, request.checkpoint)
    run, config, model = trained.run, trained.config, trained.loaded
    batches = memory.test_set(config.data, trained.device)
    size = sum(len(batch.targets) for batch in batches)
    written = []
    for index in check_plot_indices(list(request.indices), size, "the test set", "sequences"):
        batch = batches[index // config.data.eval_batch_size]
        path = request.attention_folder(run.plots_dir) / f"attention_test_{index}.png"
        written.append(_plot_sequence(model, batch, index % config.data.eval_batch_size, index, path))
    curves = plot_run_history(run.metrics_file, run.plots_dir / "training_curves.png")
    written += [curves] if curves else []
    return written


def _plot_sequence(
    model: FeedForwardAttentionNetwork, batch: MemoryBatch, row: int, index: int, path: Path
) -> Path:
    length = int(batch.lengths[row])
    output = model(batch.inputs[row : row + 1, :length])
    weights = output.weights[0].cpu()
    marks = batch.marker_positions[row].tolist()
    on_marks = float(weights[marks].sum())
    target, prediction = _value(batch.targets[row]), _prediction(output.prediction[0])
    title = (
        f"test sequence {index} (T={length}): target {target}, prediction {prediction}\n"
        f"{on_marks:.2f} of the attention on the marked steps"
    )
    return plot_attention_over_time(weights.numpy(), path, marks=marks, title=title)


def _value(target: torch.Tensor) -> str:
    return str(int(target)) if not target.is_floating_point() else f"{float(target):.3f}"


def _prediction(output: torch.Tensor) -> str:
    return str(int(output.argmax())) if output.dim() == 1 else f"{float(output):.3f}"
