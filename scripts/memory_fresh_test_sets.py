"""A memory-problem run on test sets it never saw (issue 22): the run's checkpoint evaluated on
fresh held-out sets drawn like its own (same problem, T0 or length range, padding) from other
``data.seed`` values, so that "100% on the 1,000 test sequences" can be checked on many more.

    PYTHONPATH=src python scripts/memory_fresh_test_sets.py RUN_DIR [--seeds 1 2 ...] [--checkpoint best|last]

Prints one line per seed (accuracy, MSE, examples) and the total right.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from attnlab.config import load_yaml
from attnlab.experiments.memory.experiment import EXPERIMENT, evaluate_memory, model_from_checkpoint, test_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    parser.add_argument("--checkpoint", default="best", choices=["best", "last"])
    args = parser.parse_args()
    config = EXPERIMENT.parse_config(load_yaml(args.run_dir / "config.yaml"))
    if config.data.seed in args.seeds:
        parser.error(f"seed {config.data.seed} is the run's own test set (data.seed); choose others")
    device = torch.device("cpu")
    model = model_from_checkpoint(
        args.run_dir / "checkpoints" / f"{args.checkpoint}.pt", device, config.model
    )
    right = total = 0
    for seed in args.seeds:
        started = time.perf_counter()
        metrics = evaluate_memory(model, test_set(dataclasses.replace(config.data, seed=seed), device))
        right += round(metrics["accuracy"] * metrics["examples"] / 100)
        total += int(metrics["examples"])
        print(
            f"data.seed {seed}: accuracy {metrics['accuracy']:.2f}%, MSE {metrics['mse']:.3g}, "
            f"{int(metrics['examples'])} sequences, {time.perf_counter() - started:.1f} s"
        )
    print(f"fresh test sets: {right} of {total} right ({100 * right / total:.2f}%)")


if __name__ == "__main__":
    main()
