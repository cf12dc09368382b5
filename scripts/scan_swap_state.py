"""Which part of a Syntactic Attention run's decoding state causes a family of test failures?

Takes the run's test commands that end with ``--suffix`` (e.g. "after turn left"), builds each
one's counterpart by replacing one word (``--replace left=right``: "walk after turn right"), and
decodes the commands stopping by itself (plain greedy) with parts of their decoding state taken
from the counterpart: the decoder's start ``s_0`` (``start``), the end marker's key (``end_key``,
with ``model.end_marker``), or every other key (``other_keys``). The gold is always the command's
own. If taking one part from the counterpart fixes the family, that part carries the failure.

Usage: ``python scripts/scan_swap_state.py RUN_DIR --suffix "after turn left" --replace left=right``
(a few seconds on one CPU thread). The turn-left numbers of docs/results.md (issue 29, session 21)
come from it.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch
from scan_stop_rules import load_test_run  # scripts/ is on sys.path when run as a script

from attnlab.evaluation.metrics import sequence_correct
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.tasks.batching import collate_examples
from attnlab.tasks.examples import Seq2SeqBatch, Seq2SeqExample


def exact_match(model: SyntacticAttentionSeq2Seq, batch: Seq2SeqBatch, start) -> float:
    """Plain greedy decoding of ``batch`` with ``model.start`` replaced by ``start``: % exact match."""
    original = model.start
    model.start = start  # type: ignore[method-assign]
    try:
        decoded = model.greedy_decode(
            batch.source, batch.source_padding_mask, batch.target_output.size(1) + 10
        )
    finally:
        model.start = original  # type: ignore[method-assign]
    assert decoded.tokens is not None
    right = sequence_correct(decoded.tokens, batch.target_output, eos_id=model.eos_id, pad_id=model.pad_id)
    return 100.0 * float(right.float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--suffix", required=True, help="the family: test commands ending with it")
    parser.add_argument("--replace", required=True, help="WORD=OTHER: the counterpart's one change")
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    word, _, other = args.replace.partition("=")
    _, model, source_vocab, target_vocab, _ = load_test_run(args.run_dir, args.checkpoint)
    if not isinstance(model, SyntacticAttentionSeq2Seq):
        raise SystemExit(f"{args.run_dir}: not a Syntactic Attention run")
    with (args.run_dir / "eval" / "test.predictions.tsv").open() as file:
        rows = [r for r in csv.DictReader(file, delimiter="\t") if r["source"].endswith(args.suffix)]
    if not rows:
        raise SystemExit(f"no test command of {args.run_dir} ends with {args.suffix!r}")
    examples = [Seq2SeqExample(tuple(r["source"].split()), tuple(r["target"].split())) for r in rows]
    counterparts = [
        Seq2SeqExample(tuple(other if w == word else w for w in e.source), e.target) for e in examples
    ]
    batch = collate_examples(examples, source_vocab, target_vocab)
    swapped = collate_examples(counterparts, source_vocab, target_vocab)
    with torch.no_grad():
        counterpart = model.start(swapped.source, swapped.source_padding_mask)
    rows_index = torch.arange(len(rows))

    def start_with(parts: tuple[str, ...]):
        def start(tokens: torch.Tensor, padding_mask: torch.Tensor):
            state = SyntacticAttentionSeq2Seq.start(model, tokens, padding_mask)
            end = state.end_positions
            if "start" in parts:
                state.hidden = counterpart.hidden.clone()
            if "other_keys" in parts or "end_key" in parts:
                if end is None:
                    raise SystemExit("end_key / other_keys need a run trained with model.end_marker")
                keys, gates = state.keys.clone(), state.gate_inputs.clone()
                if "other_keys" in parts:
                    keys, gates = counterpart.keys.clone(), counterpart.gate_inputs.clone()
                    keys[rows_index, end], gates[rows_index, end] = (
                        state.keys[rows_index, end],
                        state.gate_inputs[rows_index, end],
                    )
                if "end_key" in parts:
                    keys[rows_index, end] = counterpart.keys[rows_index, end]
                    gates[rows_index, end] = counterpart.gate_inputs[rows_index, end]
                state.keys, state.gate_inputs = keys, gates
                state.attention = model.alignment.initial_state(keys, state.padding_mask)
            return state

        return start

    print(f"{len(rows)} test commands ending with {args.suffix!r}; counterpart: {word} -> {other}")
    for parts in [(), ("start",), ("end_key",), ("other_keys",), ("start", "end_key")]:
        with torch.no_grad():
            score = exact_match(model, batch, start_with(parts))
        label = f"{' + '.join(parts)} from the counterpart" if parts else "as trained"
        print(f"  {label:>35}: {score:5.1f}% exact match stopping by itself")


if __name__ == "__main__":
    main()
