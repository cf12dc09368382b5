"""Which cross-attention heads of a Transformer run (Lookup Tables or SCAN) could decide the stop alone.

With ``model.transformer.stop_from_attention`` the stop is ``p(<eos>) = Σ_h g_h (α_h,start +
α_h,end)`` over the heads of the last decoder layer (of every layer with
``model.transformer.stop_layers=all``). For every head of *every* layer this script
asks: had the stop been this head's ``α_h,start + α_h,end`` alone, would the model have stopped
exactly at the gold ``<eos>`` (below 1/2 at every earlier step, at least 1/2 there)? Teacher forced on
the gold target of the first ``--examples`` rows of each test set's ``eval/<set>.predictions.tsv``
(the evaluated checkpoint), it prints that fraction per head, beside the same fraction for the
model's own gated stop. A run that stops wrongly while an earlier layer holds a head that stops
right points at the layer the stop is read from, not at what the model learnt
(docs/results.md, issue 28, session 32).

Usage: ``python scripts/transformer_stop_heads.py RUN_DIR [--sets interpolation long1 long5]``
(a few seconds on one CPU thread).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from attnlab.config import ConfigError
from attnlab.experiments.driver import load_trained
from attnlab.experiments.registry import experiment_for
from attnlab.experiments.runs import RunDirectory
from attnlab.experiments.unit_scores import PREDICTIONS_SUFFIX, read_prediction_pairs
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.vocab import Vocabulary


def stops_right(on_end: torch.Tensor) -> torch.Tensor:
    """``on_end [..., T]``: the stop mass at each step, the last step the gold ``<eos>``; ``True``
    where it is below 1/2 before that step and at least 1/2 at it."""
    return (on_end[..., :-1] < 0.5).all(dim=-1) & (on_end[..., -1] >= 0.5)


def head_stop_rates(
    model: TransformerSeq2Seq, rows: list[tuple[str, str]], source_vocab: Vocabulary, target_vocab: Vocabulary
) -> tuple[torch.Tensor, float]:
    """The fraction of ``rows`` each head ``[layers, heads]`` would stop right alone, and the
    fraction the model's gated stop does."""
    right = torch.zeros(len(model.head_names), len(model.head_names[0]))
    gated_right = 0
    gate = model.stop_gate_weights().detach()
    for source_text, target_text in rows:
        words, target = source_text.split(), target_text.split()
        source = torch.tensor([source_vocab.encode(words)])
        target_input = torch.tensor([[target_vocab.sos_id, *target_vocab.encode(target)]])
        with torch.no_grad():
            maps = model.cross_attention_maps(source, source == source_vocab.pad_id, target_input)[0]
        # the source's last column is its end: Lookup's final word, or SCAN's end marker (its own column)
        ends = torch.stack([1.0 - maps.sum(dim=-1), maps[..., -1]], dim=-1)  # [L, H, T, 2]
        right += stops_right(ends.sum(dim=-1)).float()  # a head alone: its attention on either end
        stop_heads = ends.flatten(0, 1) if model.stop_layers == "all" else ends[-1]
        if gate.dim() == 1:  # stop_ends="either"
            gated = torch.einsum("h,ht->t", gate, stop_heads.sum(dim=-1))
        else:  # "gated": over (head, end) pairs
            gated = torch.einsum("he,hte->t", gate, stop_heads)
        gated_right += int(stops_right(gated))
    return right / len(rows), gated_right / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sets", nargs="+", default=["interpolation", "long1", "long5"])
    parser.add_argument("--examples", type=int, default=300, help="rows per test set (default 300)")
    args = parser.parse_args()
    try:
        experiment = experiment_for(RunDirectory(args.run_dir).load_config_data())
        trained = load_trained(experiment, args.run_dir, device_name="cpu")
    except (ConfigError, OSError) as error:
        parser.error(str(error))
    model, source_vocab, target_vocab = trained.loaded
    if not isinstance(model, TransformerSeq2Seq) or model.stop_gate is None:
        parser.error(f"{args.run_dir} is not a Transformer run with model.transformer.stop_from_attention")
    if model.stop_attention is not None:
        parser.error(f"{args.run_dir}: its stop reads heads of its own (stop_layers: separate), not these")
    model.eval()
    gate = model.stop_gate_weights().detach()
    whose = "every layer's" if model.stop_layers == "all" else "the last layer's"
    if gate.dim() == 1:
        print(f"stop gate over {whose} heads:", " ".join(f"{value:.3f}" for value in gate.tolist()))
    else:
        pairs = (f"{start:.3f}/{end:.3f}" for start, end in gate.tolist())
        print(f"stop gate over {whose} heads (start/end):", " ".join(pairs))
    for name in args.sets:
        path = args.run_dir / "eval" / f"{name}{PREDICTIONS_SUFFIX}"
        if not path.is_file():
            parser.error(f"{path} does not exist (evaluate the run first)")
        rows = read_prediction_pairs(path, args.examples)
        rates, gated = head_stop_rates(model, rows, source_vocab, target_vocab)
        print(f"\n{name} ({len(rows)} examples): % stopping right alone; the gated stop: {100 * gated:.1f}")
        for layer, layer_rates in enumerate(rates):
            cells = "  ".join(f"head {head} {100 * rate:5.1f}" for head, rate in enumerate(layer_rates))
            print(f"  layer {layer}: {cells}")


if __name__ == "__main__":
    main()
