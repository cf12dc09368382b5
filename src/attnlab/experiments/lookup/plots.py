"""``attnlab plot``: attention heatmaps, the Figure 9 view and training curves of a Lookup Tables run;
for a Transformer, also every decoder layer's and head's cross-attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnlab.config import ConfigError
from attnlab.evaluation.seq2seq import decode_within_budget, decoded_steps
from attnlab.experiments.base import PlotRequest
from attnlab.experiments.driver import load_trained
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import check_plot_indices
from attnlab.experiments.seq2seq_common import decoded_cross_attention_maps
from attnlab.models.seq2seq import Seq2SeqOutput
from attnlab.plotting import (
    plot_attention_heads,
    plot_attention_heatmap,
    plot_interpretable_variables,
    plot_run_history,
)
from attnlab.tasks.batching import collate_examples
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup_data import load_splits, test_set_names
from attnlab.tasks.tsv import read_tsv
from attnlab.tasks.vocab import Vocabulary

ATTENTION_VARIABLES = ("content_attention", "location_attention")


def plot_run(run_dir: str | Path, request: PlotRequest) -> list[Path]:
    """Plot the decoded attention of some examples and the training curves; returns the files."""
    trained = load_trained(lookup.EXPERIMENT, run_dir, request.device_name, request.checkpoint)
    run, config = trained.run, trained.config
    model, source_vocab, target_vocab = trained.loaded
    name, examples = _examples(config, request.test_set, request.data_file)
    indices = list(request.indices)
    chosen = _choose(examples, indices, name)
    batch = collate_examples(chosen, source_vocab, target_vocab).to(trained.device)
    decoded = decode_within_budget(
        model, batch.source, batch.source_padding_mask, config.evaluation.max_length
    )
    heads = decoded_cross_attention_maps(model, batch.source, batch.source_padding_mask, decoded)
    folder = request.attention_folder(run.plots_dir)
    written = []
    for row, (index, example) in enumerate(zip(indices, chosen)):
        written += _plot_example(folder, name, index, example, decoded, row, target_vocab, heads)
    curves = plot_run_history(run.metrics_file, run.plots_dir / "training_curves.png")
    written += [curves] if curves else []
    return written


def _examples(
    config: lookup.LookupExperimentConfig, test_set: str | None, data_file: str | None
) -> tuple[str, list[Seq2SeqExample]]:
    if data_file is not None:
        return Path(data_file).stem, read_tsv(data_file)
    names = test_set_names(config.data)
    if not names:
        raise ConfigError("the run has no test sets; give --data FILE.tsv")
    name = test_set or names[-1]
    if name not in names:
        raise ConfigError(f"--test-set {name!r} is not a test set of this run; choose one of {names}")
    return name, load_splits(config.data)[name]


def _choose(examples: list[Seq2SeqExample], indices: list[int], name: str) -> list[Seq2SeqExample]:
    return [examples[index] for index in check_plot_indices(indices, len(examples), name)]


def _plot_example(
    folder: Path,
    name: str,
    index: int,
    example: Seq2SeqExample,
    decoded: Seq2SeqOutput,
    row: int,
    target_vocab: Vocabulary,
    heads: tuple[torch.Tensor, list[list[str]]] | None = None,
) -> list[Path]:
    assert decoded.tokens is not None
    tokens = decoded.tokens[row]
    steps = decoded_steps(decoded.tokens, target_vocab.pad_id)[row]
    output_tokens = target_vocab.decode(tokens[:steps].tolist())
    source_tokens = list(example.source)
    attention = decoded.attention[row, :steps, : len(source_tokens)].cpu().numpy()
    gold = list(example.attention[:steps]) if example.attention else None
    stem = folder / f"{name}_{index}"
    written = [
        plot_attention_heatmap(
            attention,
            source_tokens,
            output_tokens,
            stem.with_name(stem.name + "_attention.png"),
            title=f"{name} #{index}",
            gold=_pad_gold(gold, steps),
        )
    ]
    if heads is not None:  # a Transformer: the grid of decoder layers × heads (and their means)
        maps, head_names = heads
        written.append(
            plot_attention_heads(
                maps[row, :, :, :steps, : len(source_tokens)].cpu().numpy(),
                source_tokens,
                output_tokens,
                stem.with_name(stem.name + "_attention_heads.png"),
                head_names=head_names,
                title=f"{name} #{index}: cross-attention of every decoder layer and head",
                gold=_pad_gold(gold, steps),
            )
        )
    scalars = {
        key: value[row, :steps].cpu().numpy()
        for key, value in decoded.variables.items()
        if value.dim() == 2 and key != "previous_mean"
    }
    if "sigma" in scalars:  # shown before the division by n_s, as in Figure 9 (sigma = min_sigma)
        scalars["sigma"] = scalars["sigma"] * len(source_tokens)
    if scalars:
        panels = {
            key: _matrix(decoded.variables, key, row, steps, len(source_tokens))
            for key in ATTENTION_VARIABLES
        }
        written.append(
            plot_interpretable_variables(
                attention,
                scalars,
                source_tokens,
                output_tokens,
                stem.with_name(stem.name + "_variables.png"),
                content=panels["content_attention"],
                location=panels["location_attention"],
                title=f"{name} #{index}",
            )
        )
    return written


def _matrix(
    variables: dict[str, torch.Tensor], key: str, row: int, steps: int, width: int
) -> np.ndarray | None:
    if key not in variables:
        return None
    return variables[key][row, :steps, :width].cpu().numpy()


def _pad_gold(gold: list[int] | None, steps: int) -> list[int | None] | None:
    if gold is None:
        return None
    return [*gold, *([None] * (steps - len(gold)))][:steps]
