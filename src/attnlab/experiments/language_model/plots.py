"""``attnlab plot`` for language-model runs: Daniluk et al. (2017) Figure 3 and training curves.

* ``attention_<split>_<document>.png`` (Figure 3a): the window attention on the first words of a
  document, read from a fresh state as in training; rows are the words read, columns the window
  positions ``t-L … t-1`` (oldest first). Attentive variants only.
* ``attention_by_position.png`` (Figure 3b): the average attention weight per window position
  over the validation and test sets, from ``eval/attention.json``.
* ``training_curves.png``: training and validation loss per epoch.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attnlab.config import ConfigError
from attnlab.experiments.base import PlotRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.language_model import experiment as lm
from attnlab.experiments.registry import check_plot_indices
from attnlab.models.language_model import LanguageModel
from attnlab.plotting import plot_attention_heatmap, plot_metric_by_test_set, plot_run_history
from attnlab.tasks.corpus_data import load_corpus_file, load_split
from attnlab.tasks.vocab import Vocabulary


@torch.no_grad()
def document_attention(
    model: LanguageModel, vocabulary: Vocabulary, document: torch.Tensor
) -> tuple[torch.Tensor, list[str]]:
    """The attention ``[T, L]`` with which each word of ``document`` (token ids) is predicted,
    and the words read at those steps (``<eos>``, then the document's words but its last)."""
    device = next(model.parameters()).device
    inputs = torch.cat([torch.tensor([vocabulary.eos_id]), document[:-1].cpu()]).unsqueeze(0).to(device)
    resets = torch.zeros_like(inputs, dtype=torch.bool)
    resets[0, 0] = True
    attention = model(inputs, resets).attention
    if attention is None:
        raise ValueError(f"a {model.variant!r} model has no attention")
    return attention[0].cpu(), vocabulary.decode(inputs[0].tolist())


def plot_document_attention(
    model: LanguageModel, vocabulary: Vocabulary, document: torch.Tensor, path: Path, title: str
) -> Path:
    """Figure 3a: :func:`document_attention` as a heatmap."""
    weights, words = document_attention(model, vocabulary, document)
    window = weights.size(1)
    positions = [f"t-{window - j}" for j in range(window)]
    labels = ("window position (oldest first)", "word read")
    return plot_attention_heatmap(weights.numpy(), positions, words, path, title=title, axis_labels=labels)


DEFAULT_STEPS = 40
"""Words per Figure 3a heatmap unless ``--steps`` says otherwise."""


def plot_run(run_dir: str | Path, request: PlotRequest) -> list[Path]:
    """Figure 3a for documents ``request.indices`` of its test set (``valid`` / ``test``, default
    ``test``) or of its data file (a corpus file), their first ``request.steps`` words; Figure 3b
    if the run was evaluated; the training curves. Returns the files written."""
    steps = DEFAULT_STEPS if request.steps is None else request.steps
    if steps < 2:
        raise ConfigError(f"--steps must be >= 2, got {steps}")
    trained = load_trained(lm.EXPERIMENT, run_dir, request.device_name, request.checkpoint)
    run, config = trained.run, trained.config
    model, vocabulary, _ = trained.loaded
    written = []
    if model.attention is not None:
        name, documents = _documents(config, vocabulary, request.test_set, request.data_file)
        for index in check_plot_indices(list(request.indices), len(documents), name, "documents"):
            path = request.attention_folder(run.plots_dir) / f"attention_{name}_{index}.png"
            title = f"{model.variant} (L={model.window}), {name} document {index}"
            written.append(plot_document_attention(model, vocabulary, documents[index][:steps], path, title))
    attention_file = run.eval_dir / "attention.json"
    if attention_file.is_file() and request.checkpoint is None:  # the evaluated checkpoint's
        written.append(
            _plot_attention_by_position(json.loads(attention_file.read_text()), run.plots_dir, model)
        )
    curves = plot_run_history(run.metrics_file, run.plots_dir / "training_curves.png")
    written += [curves] if curves else []
    return written


def _documents(
    config: lm.LMExperimentConfig, vocabulary: Vocabulary, test_set: str | None, data_file: str | None
) -> tuple[str, list[torch.Tensor]]:
    if data_file is not None:
        return Path(data_file).stem, load_corpus_file(config.data, data_file, vocabulary).documents()
    name = test_set or "test"
    if name not in lm.EVALUATION_SPLITS:
        raise ConfigError(f"--test-set {name!r}: choose one of {list(lm.EVALUATION_SPLITS)}")
    return name, load_split(config.data, name, vocabulary).documents()


def _plot_attention_by_position(statistics: dict, folder: Path, model: LanguageModel) -> Path:
    window = int(statistics["window"])
    positions = [f"t-{window - j}" for j in range(window)]
    curves = {
        split: {
            position: [weight]
            for position, weight in zip(positions, statistics[split]["attention_by_position"])
        }
        for split in lm.EVALUATION_SPLITS
        if split in statistics
    }
    return plot_metric_by_test_set(
        curves,
        folder / "attention_by_position.png",
        metric_label="mean attention weight",
        test_sets=positions,
        percent=False,
        title=f"{model.variant} (L={window}): average attention per window position",
        x_label="window position",
    )
