"""How much of a memory-problem run's test error is explained by the sequence's length (issue 22).

Evaluates a run's checkpoint on its own test set and prints the correlation of the signed error with
the length, and how many sequences stay wrong once the part of the error linear in
``(L - mean L) · target``, ``L - mean L`` and ``target`` is removed (a least-squares fit). With the
padding masked, a marked step's share of the pooled context varies with the length; this shows
whether that is what keeps a run below 100%.

    PYTHONPATH=src python scripts/memory_error_by_length.py RUN_DIR [--checkpoint best|last]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from attnlab.config import load_yaml
from attnlab.experiments.memory.experiment import EXPERIMENT, model_from_checkpoint, test_set
from attnlab.tasks.memory_problems import TOLERANCE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoint", default="best", choices=["best", "last"])
    args = parser.parse_args()
    config = EXPERIMENT.parse_config(load_yaml(args.run_dir / "config.yaml"))
    model = model_from_checkpoint(args.run_dir / "checkpoints" / f"{args.checkpoint}.pt", torch.device("cpu"))
    errors, lengths, targets = [], [], []
    with torch.no_grad():
        for batch in test_set(config.data, torch.device("cpu")):
            errors.append(model(batch.inputs, batch.padding_mask).prediction - batch.targets)
            lengths.append(batch.lengths.double())
            targets.append(batch.targets.double())
    error, length, target = (torch.cat(parts).double().numpy() for parts in (errors, lengths, targets))
    centred = length - length.mean()
    design = np.stack([np.ones_like(centred), centred * target, centred, target], axis=1)
    coefficients, *_ = np.linalg.lstsq(design, error, rcond=None)
    residual = error - design @ coefficients
    print(f"{args.run_dir} ({args.checkpoint}.pt), {len(error)} test sequences")
    print(f"corr(error, length) = {np.corrcoef(error, length)[0, 1]:.3f}")
    print(f"corr(error, (length - mean) * target) = {np.corrcoef(error, centred * target)[0, 1]:.3f}")
    print(
        f"wrong (|error| >= {TOLERANCE}): {(np.abs(error) >= TOLERANCE).sum()}; after removing the "
        f"length-linear part: {(np.abs(residual) >= TOLERANCE).sum()}"
    )
    print(f"RMS error {np.sqrt((error**2).mean()):.4f}; RMS residual {np.sqrt((residual**2).mean()):.4f}")


if __name__ == "__main__":
    main()
