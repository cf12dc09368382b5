"""The stop rules of greedy decoding on a trained SCAN run, without writing into the run.

Evaluates the run's checkpoint on its test set once with the output length given and once per
stop rule (plain greedy; ``evaluation.stop_threshold=τ``; ``evaluation.stop_lookahead=ρ``; see
``StepwiseSeq2Seq.greedy_decode``), and prints for each rule the exact match with ``<eos>`` and
its failures among the commands right with the length given: stopped early or too late. The
numbers of docs/results.md ("Why the options' model stops early", issue 29) come from it.

Usage: ``python scripts/scan_stop_rules.py RUN_DIR none tau=0.7 tau=0.8 rho=0.7 rho=0.8``
(about 45 s a rule for the 7,706 add-jump test commands on one CPU thread).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from attnlab.config import from_dict, load_yaml
from attnlab.evaluation.metrics import sequence_correct
from attnlab.experiments.scan.experiment import ScanExperimentConfig, model_from_checkpoint
from attnlab.tasks import batching
from attnlab.tasks.scan_data import encode_split, load_splits


def parse_rule(text: str) -> tuple[float | None, float | None]:
    """``none`` → plain greedy; ``tau=X`` → stop_threshold X; ``rho=X`` → stop_lookahead X."""
    if text == "none":
        return None, None
    kind, _, value = text.partition("=")
    if kind not in ("tau", "rho") or not value:
        raise argparse.ArgumentTypeError(f"a rule is none, tau=X or rho=X, got {text!r}")
    return (float(value), None) if kind == "tau" else (None, float(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("rules", nargs="+", type=parse_rule)
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = from_dict(ScanExperimentConfig, load_yaml(args.run_dir / "config.yaml"))
    device = torch.device("cpu")
    model, source, target = model_from_checkpoint(
        args.run_dir / "checkpoints" / f"{args.checkpoint}.pt", device, config.model
    )
    test = encode_split(load_splits(config.data)["test"], source, target, "test")
    ids = {"eos_id": model.eos_id, "pad_id": model.pad_id}
    batches = list(batching.batches(test.dataset, config.evaluation.batch_size, shuffle=False))
    given = []
    for batch in batches:
        lengths = (batch.target_output != model.pad_id).sum(dim=1) - 1
        forced = model.decode_with_lengths(batch.source, batch.source_padding_mask, lengths)
        assert forced.tokens is not None
        given.append(sequence_correct(forced.tokens, batch.target_output, **ids))
    examples = len(test.dataset)
    given_accuracy = 100 * float(torch.cat(given).sum()) / examples
    print(f"{args.run_dir}: {examples} test commands, length given {given_accuracy:.2f}%")
    for stop_threshold, stop_lookahead in args.rules:
        options = dataclasses.replace(
            config.evaluation, stop_threshold=stop_threshold, stop_lookahead=stop_lookahead
        )
        start, correct, early, late = time.time(), 0, 0, 0
        for batch, right_given in zip(batches, given):
            decoded = model.greedy_decode(
                batch.source, batch.source_padding_mask, options.max_length, stop_threshold, stop_lookahead
            )
            assert decoded.tokens is not None
            right = sequence_correct(decoded.tokens, batch.target_output, **ids)
            correct += int(right.sum())
            is_eos = decoded.tokens == model.eos_id
            stops = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), decoded.tokens.size(1))
            lengths = (batch.target_output != model.pad_id).sum(dim=1) - 1
            stop_only = right_given & ~right
            early += int((stop_only & (stops < lengths)).sum())
            late += int((stop_only & (stops > lengths)).sum())
        print(
            f"stop_threshold={stop_threshold} stop_lookahead={stop_lookahead}: "
            f"<eos> {100 * correct / examples:.2f}%, stop-only failures {early} early, {late} late "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
