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
import time
from pathlib import Path

import torch

from attnlab.config import from_dict, load_yaml
from attnlab.evaluation.metrics import sequence_correct
from attnlab.experiments.scan.experiment import ScanExperimentConfig, model_from_checkpoint
from attnlab.models.stepwise import StepwiseSeq2Seq
from attnlab.tasks import batching
from attnlab.tasks.examples import Seq2SeqBatch
from attnlab.tasks.scan_data import EncodedSplit, encode_split, load_splits
from attnlab.tasks.vocab import Vocabulary


def parse_rule(text: str) -> tuple[float | None, float | None]:
    """``none`` → plain greedy; ``tau=X`` → stop_threshold X; ``rho=X`` → stop_lookahead X."""
    if text == "none":
        return None, None
    kind, _, value = text.partition("=")
    if kind not in ("tau", "rho") or not value:
        raise argparse.ArgumentTypeError(f"a rule is none, tau=X or rho=X, got {text!r}")
    return (float(value), None) if kind == "tau" else (None, float(value))


def load_test_run(
    run_dir: Path, checkpoint: str, test_set: str = "test"
) -> tuple[ScanExperimentConfig, StepwiseSeq2Seq, Vocabulary, Vocabulary, EncodedSplit]:
    """A SCAN run's config, the model of ``checkpoint`` (on the CPU, in evaluation mode, as the
    library loads it), its vocabularies and its encoded ``test_set`` (a ``ValueError`` naming the
    run's sets when it has none of that name)."""
    config = from_dict(ScanExperimentConfig, load_yaml(run_dir / "config.yaml"))
    model, source, target = model_from_checkpoint(
        run_dir / "checkpoints" / f"{checkpoint}.pt", torch.device("cpu"), config.model
    )
    splits = load_splits(config.data)
    if test_set not in splits:
        raise ValueError(f"{run_dir}: no test set {test_set!r} (it has {sorted(splits)})")
    return config, model, source, target, encode_split(splits[test_set], source, target, test_set)


def target_lengths(model: StepwiseSeq2Seq, batch: Seq2SeqBatch) -> torch.Tensor:
    """The number of tokens before ``<eos>`` in each target of ``batch``."""
    return (batch.target_output != model.pad_id).sum(dim=1) - 1


def stop_rule_outcome(
    model: StepwiseSeq2Seq,
    batches: list[Seq2SeqBatch],
    max_length: int,
    rule: tuple[float | None, float | None],
    right_given: list[torch.Tensor] | None = None,
) -> tuple[int, int, int]:
    """Greedy decoding of ``batches`` under ``rule`` (``stop_threshold``, ``stop_lookahead``): the
    number of exact matches and, among the commands right with the length given
    (``right_given``, one verdict tensor per batch), those that stop early and too late."""
    ids = {"eos_id": model.eos_id, "pad_id": model.pad_id}
    correct, early, late = 0, 0, 0
    for index, batch in enumerate(batches):
        decoded = model.greedy_decode(batch.source, batch.source_padding_mask, max_length, *rule)
        assert decoded.tokens is not None
        right = sequence_correct(decoded.tokens, batch.target_output, **ids)
        correct += int(right.sum())
        if right_given is None:
            continue
        is_eos = decoded.tokens == model.eos_id
        stops = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), decoded.tokens.size(1))
        lengths = target_lengths(model, batch)
        stop_only = right_given[index] & ~right
        early += int((stop_only & (stops < lengths)).sum())
        late += int((stop_only & (stops > lengths)).sum())
    return correct, early, late


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("rules", nargs="+", type=parse_rule)
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    config, model, _, _, test = load_test_run(args.run_dir, args.checkpoint)
    batches = list(batching.batches(test.dataset, config.evaluation.batch_size, shuffle=False))
    given = []
    for batch in batches:
        forced = model.decode_with_lengths(
            batch.source, batch.source_padding_mask, target_lengths(model, batch)
        )
        assert forced.tokens is not None
        given.append(
            sequence_correct(forced.tokens, batch.target_output, eos_id=model.eos_id, pad_id=model.pad_id)
        )
    examples = len(test.dataset)
    given_accuracy = 100 * float(torch.cat(given).sum()) / examples
    print(f"{args.run_dir}: {examples} test commands, length given {given_accuracy:.2f}%")
    for stop_threshold, stop_lookahead in args.rules:
        start = time.time()
        correct, early, late = stop_rule_outcome(
            model, batches, config.evaluation.max_length, (stop_threshold, stop_lookahead), given
        )
        print(
            f"stop_threshold={stop_threshold} stop_lookahead={stop_lookahead}: "
            f"<eos> {100 * correct / examples:.2f}%, stop-only failures {early} early, {late} late "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
