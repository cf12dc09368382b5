"""Speed of SCAN validation: greedy decoding in two batchings, and the teacher-forced verdicts.

Prints, side by side in one run, the CPU time of one pass over a config's validation split of
the same size of batches, three ways:

* **split order**: greedy decoding and the teacher-forced loss (as
  :func:`attnlab.evaluation.seq2seq.evaluate_split` does, without the length-given accuracy), rows
  ``0 … n-1`` cut into batches (the evaluation before session 28);
* **length-sorted**: the same in :func:`attnlab.tasks.batching.length_sorted_batches` (the
  evaluation, and the validation until session 31);
* **teacher-forced**: :func:`attnlab.evaluation.seq2seq.validate_split`, one teacher-forced pass
  whose choices give greedy decoding's verdicts (the validation now).

Greedy decoding runs until a batch's longest output ends, so a batch of mixed lengths decodes as
long as its longest example. With ``--checkpoint`` (a run's ``best.pt``) the model stops where it
learned to; an untrained model decodes the whole budget (``evaluation.max_length``). The exact
match and loss of the three are printed, and must agree.

Usage: ``.venv/bin/python benchmarks/bench_scan_evaluation.py [--config scan_transformer]
[--checkpoint RUN/checkpoints/best.pt] [--repeats 2] [key=value ...]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

import torch

from attnlab.evaluation.metrics import sequence_correct
from attnlab.evaluation.seq2seq import decode_greedily, teacher_forced_loss, validate_split
from attnlab.tasks import batching
from attnlab.tasks.examples import Seq2SeqBatch
from bench_training_step import built


@torch.no_grad()
def one_pass(model, batches: Iterable[Seq2SeqBatch], options) -> tuple[float, int, float]:
    """CPU seconds, examples right, and the mean token loss of one evaluation pass."""
    start = time.process_time()
    correct, loss, tokens = 0, 0.0, 0
    for batch in batches:
        decoded = decode_greedily(model, batch.source, batch.source_padding_mask, options)
        correct += int(
            sequence_correct(
                decoded.tokens, batch.target_output, eos_id=model.eos_id, pad_id=model.pad_id
            ).sum()
        )
        count = int((batch.target_output != model.pad_id).sum())
        loss += float(teacher_forced_loss(model, batch)) * count
        tokens += count
    return time.process_time() - start, correct, loss / tokens


def teacher_forced_pass(model, split, target, options) -> tuple[float, int, float]:
    """:func:`one_pass`'s numbers from :func:`validate_split`."""
    start = time.process_time()
    metrics = validate_split(model, split, target, options, torch.device("cpu"))
    seconds = time.process_time() - start
    return seconds, round(metrics["seq_acc"] * metrics["examples"] / 100), metrics["loss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="scan_transformer")
    parser.add_argument("--checkpoint", help="a run's checkpoint (the same config and overrides as the run)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds; the best is reported")
    parser.add_argument("overrides", nargs="*", default=["data.split=addprim_jump"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, config, prepared, model = built(args.config, args.overrides)
    model.eval()
    device = torch.device("cpu")
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location=device, weights_only=True)["model"])
    split = prepared.encoded["validation"]
    dataset = split.dataset
    size = config.evaluation.batch_size
    ways = {
        "split order": lambda: one_pass(
            model, batching.batches(dataset, size, shuffle=False), config.evaluation
        ),
        "length-sorted": lambda: one_pass(
            model, (batch for _, batch in batching.length_sorted_batches(dataset, size)), config.evaluation
        ),
        "teacher-forced": lambda: teacher_forced_pass(model, split, prepared.target, config.evaluation),
    }
    best: dict[str, tuple[float, int, float]] = {}
    for _ in range(args.repeats):
        for name, way in ways.items():
            result = way()
            if name not in best or result[0] < best[name][0]:
                best[name] = result
    print(f"{args.config} {' '.join(args.overrides)}: validation {len(dataset)} examples, batches of {size}")
    for name, (seconds, correct, loss) in best.items():
        accuracy = 100 * correct / len(dataset)
        print(f"  {name:14s} {seconds:7.2f} CPU-s   exact match {accuracy:6.2f}%   loss {loss:.6f}")
    print(f"  split order / length-sorted: {best['split order'][0] / best['length-sorted'][0]:.2f}x")
    print(f"  length-sorted / teacher-forced: {best['length-sorted'][0] / best['teacher-forced'][0]:.2f}x")


if __name__ == "__main__":
    main()
