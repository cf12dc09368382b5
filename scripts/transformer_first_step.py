"""Where each last-layer cross-attention head of a Lookup Tables Transformer run looks at decoder
step 0, by source length: the jump a Shift Attender head makes before it walks.

For the first ``--examples`` rows of each test set's ``eval/<set>.predictions.tsv``, teacher forced
on the gold target (``TransformerSeq2Seq.cross_attention_maps`` of the evaluated checkpoint), it
counts each head's most-attended source word at step 0 (``start`` when most of the head's weight
is on the learned start position of ``model.transformer.stop_from_attention``), and prints the
gate of the stop over the heads. A head whose step-0 word follows the source's length (e.g. always
the word before ``.``) found it by what or where it is in the sentence; one that stays at the same
index on longer sources found a position. The table of docs/results.md ("where Long seed 2's stop
heads jump", issue 28, session 23) comes from it.

Usage: ``python scripts/transformer_first_step.py RUN_DIR [--sets interpolation long1 long5]``
(a few seconds on one CPU thread).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch

from attnlab.experiments.driver import load_trained
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.unit_scores import PREDICTIONS_SUFFIX, read_prediction_pairs
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.vocab import Vocabulary


def first_step_words(
    model: TransformerSeq2Seq, rows: list[tuple[str, str]], source_vocab: Vocabulary, target_vocab: Vocabulary
) -> list[Counter[tuple[int, int | str]]]:
    """Per head of the last decoder layer, a Counter of (source length, word index at step 0)."""
    counts: list[Counter[tuple[int, int | str]]] = [Counter() for _ in model.head_names[-1]]
    for source_text, target_text in rows:
        words, target = source_text.split(), target_text.split()
        source = torch.tensor([source_vocab.encode(words)])
        target_input = torch.tensor([[target_vocab.sos_id, *target_vocab.encode(target)]])
        with torch.no_grad():
            maps = model.cross_attention_maps(source, source == source_vocab.pad_id, target_input)[0, -1]
        for head, weights in enumerate(maps[:, 0]):  # [H, S] at step 0
            on_start = 1.0 - float(weights.sum())
            counts[head][(len(words), "start" if on_start > 0.5 else int(weights.argmax()))] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sets", nargs="+", default=["interpolation", "long1", "long3", "long5"])
    parser.add_argument("--examples", type=int, default=200, help="rows per test set (default 200)")
    args = parser.parse_args()
    trained = load_trained(lookup.EXPERIMENT, args.run_dir, device_name="cpu")
    model, source_vocab, target_vocab = trained.loaded
    if not isinstance(model, TransformerSeq2Seq):
        parser.error(f"{args.run_dir} is not a Transformer run")
    model.eval()
    if model.stop_gate is not None:
        gate = model.stop_gate_weights().detach()
        print("stop gate over the heads:", " ".join(f"{value:.3f}" for value in gate.flatten().tolist()))
    for name in args.sets:
        path = args.run_dir / "eval" / f"{name}{PREDICTIONS_SUFFIX}"
        if not path.is_file():
            parser.error(f"{path} does not exist (evaluate the run first)")
        rows = read_prediction_pairs(path, args.examples)
        print(f"\n{name} ({len(rows)} examples): head: (source words, word at step 0) x count")
        for head, counts in enumerate(first_step_words(model, rows, source_vocab, target_vocab)):
            cells = ", ".join(
                f"({length}, {word}) x {n}" for (length, word), n in sorted(counts.items(), key=str)
            )
            print(f"  head {head}: {cells}")


if __name__ == "__main__":
    main()
