"""What the counting heads of a Transformer run count (``model.transformer.decoder_counting_heads``).

A counting head's weight on an earlier output ``j`` at step ``t`` is ``sigmoid(s_tj + b)``, so its
glimpse is ``Σ_j w_tj v_j``: a head whose weight is near 1 on one kind of token and near 0 on the
rest reads how many of that token the output has so far. Teacher forced on the gold targets of the
first ``--examples`` rows of the run's ``eval/<test set>.predictions.tsv`` (the decoder's input:
``<sos>`` and the target), this prints, for every decoder layer's counting heads, the mean weight
a step gives the earlier inputs of each token (keys at or before the step; the step itself
included), with how many such (step, key) pairs there were.

Usage: ``python scripts/transformer_counting_heads.py RUN_DIR [--test-set test] [--examples 300]``
(a few seconds on one CPU thread).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch

from attnlab.config import ConfigError
from attnlab.experiments.driver import load_trained
from attnlab.experiments.registry import experiment_for
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import PREDICTIONS_SUFFIX, read_prediction_pairs
from attnlab.models.transformer import SelfAttention, TransformerSeq2Seq


def record_weights(attention: SelfAttention, store: list[torch.Tensor]) -> None:
    """Make ``attention`` append its counting heads' weights ``[B, k, T, K]`` to ``store`` on every call."""
    weights = attention._weights

    def recording(scores: torch.Tensor) -> torch.Tensor:
        result = weights(scores)
        store.append(result[:, attention.heads - attention.counting_heads :].detach())
        return result

    attention._weights = recording  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--test-set", default="test")
    parser.add_argument("--examples", type=int, default=300, help="rows of the test set (default 300)")
    args = parser.parse_args()
    try:
        run = RunDirectory(args.run_dir)
        experiment = experiment_for(run.load_config_data())
        trained = load_trained(experiment, args.run_dir, device_name="cpu")
        rows = read_prediction_pairs(run.eval_dir / f"{args.test_set}{PREDICTIONS_SUFFIX}", args.examples)
    except (ConfigError, OSError) as error:
        parser.error(str(error))
    model, source_vocab, target_vocab = trained.loaded
    if not isinstance(model, TransformerSeq2Seq):
        parser.error(f"{args.run_dir} is not a Transformer run")
    layers = [
        layer.self_attention for layer in model.decoder if isinstance(layer.self_attention, SelfAttention)
    ]
    if not any(attention.counting_heads for attention in layers):
        parser.error(f"{args.run_dir} has no counting heads (model.transformer.decoder_counting_heads is 0)")
    stores: list[list[torch.Tensor]] = [[] for _ in layers]
    for attention, store in zip(layers, stores, strict=True):
        record_weights(attention, store)
    # (layer, head, token) -> [sum of weights, pairs]
    totals: dict[tuple[int, int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    model.eval()
    for source_text, target_text in rows:
        source = torch.tensor([source_vocab.encode(source_text.split())])
        tokens = [target_vocab.sos_id, *target_vocab.encode(target_text.split())]
        names = target_vocab.decode(tokens)
        for store in stores:
            store.clear()
        with torch.no_grad():
            model(source, source == source_vocab.pad_id, torch.tensor([tokens]))
        for layer, store in enumerate(stores):
            weights = store[0][0]  # [k, T, K]
            seen = torch.ones(weights.shape[1:]).tril()  # (step, key): the key at or before the step
            for token in set(names):
                keys = torch.tensor([name == token for name in names], dtype=weights.dtype)
                selected = seen * keys  # [T, K]
                for head in range(weights.size(0)):
                    cell = totals[(layer, head, token)]
                    cell[0] += float((weights[head] * selected).sum())
                    cell[1] += float(selected.sum())
    print(f"{args.run_dir} ({args.test_set}, {len(rows)} gold targets, teacher forced)")
    print("| layer | counting head | key token | mean weight | (step, key) pairs |")
    print("|---:|---:|---|---:|---:|")
    for (layer, head, token), (total, pairs) in sorted(totals.items(), key=by_head_then_weight):
        print(f"| {layer} | {head} | {token} | {total / pairs:.3f} | {int(pairs):,} |")


def by_head_then_weight(item: tuple[tuple[int, int, str], list[float]]) -> tuple[int, int, float]:
    (layer, head, _), (total, pairs) = item
    return layer, head, -total / pairs


if __name__ == "__main__":
    main()
