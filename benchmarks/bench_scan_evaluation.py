"""Speed of SCAN evaluation: batches in the split's order vs batches of similar target length.

Prints, side by side in one run, the CPU time of one pass of a SCAN-style evaluation (greedy
decoding and the teacher-forced loss, as :func:`attnlab.evaluation.seq2seq.evaluate_split` does)
over a config's validation split, in two batchings of the same size:

* **split order**: rows ``0 … n-1`` cut into batches (the evaluation before session 28);
* **length-sorted**: :func:`attnlab.tasks.batching.length_sorted_batches` (the evaluation now).

Greedy decoding runs until a batch's longest output ends, so a batch of mixed lengths decodes as
long as its longest example. With ``--checkpoint`` (a run's ``best.pt``) the model stops where it
learned to; an untrained model decodes the whole budget (``evaluation.max_length``). The exact
match and loss of both batchings are printed, and must agree.

Usage: ``.venv/bin/python benchmarks/bench_scan_evaluation.py [--config scan_transformer]
[--checkpoint RUN/checkpoints/best.pt] [--repeats 2] [key=value ...]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable

import torch

from attnlab.evaluation.metrics import sequence_correct
from attnlab.evaluation.seq2seq import decode_greedily, teacher_forced_loss
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
    dataset = prepared.encoded["validation"].dataset
    size = config.evaluation.batch_size
    orders = {
        "split order": lambda: batching.batches(dataset, size, shuffle=False),
        "length-sorted": lambda: (batch for _, batch in batching.length_sorted_batches(dataset, size)),
    }
    best: dict[str, tuple[float, int, float]] = {}
    for _ in range(args.repeats):
        for name, batches in orders.items():
            result = one_pass(model, batches(), config.evaluation)
            if name not in best or result[0] < best[name][0]:
                best[name] = result
    print(f"{args.config} {' '.join(args.overrides)}: validation {len(dataset)} examples, batches of {size}")
    for name, (seconds, correct, loss) in best.items():
        accuracy = 100 * correct / len(dataset)
        print(f"  {name:14s} {seconds:7.2f} CPU-s   exact match {accuracy:6.2f}%   loss {loss:.6f}")
    print(f"  ratio: {best['split order'][0] / best['length-sorted'][0]:.2f}x")


if __name__ == "__main__":
    main()
