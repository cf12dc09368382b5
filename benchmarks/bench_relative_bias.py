"""Shaw et al.'s relative-position bias in self-attention: per pair against the table of distances.

Prints, side by side in one run, the CPU time of one forward and backward pass of the bias of one
relative self-attention layer (:class:`attnlab.attention.positions.SelfAttentionPositions`) two ways:

* **per pair**: a ``[B, Q, K, D]`` tensor of each pair's distance embedding, multiplied by the
  queries (attnlab before session 43; :func:`per_pair_relative_bias`);
* **table**: each query scored once against the ``2 * clip + 1`` distance embeddings and each
  pair's score gathered from those (``SelfAttentionPositions._relative_bias``, now).

Both give the same numbers (checked here, and against Shaw's formula in tests/models/test_transformer.py).
Shapes: SCAN's decoder at the length split (batch 16, 4 heads, 24 steps, clip 16) and at the cut-off
40 (41 steps, clip 40), or ``--shape BATCH,STEPS,CLIP``. The whole update is timed with
``bench_training_step.py --relative-per-pair NAME``.

Usage: ``.venv/bin/python benchmarks/bench_relative_bias.py [--shape 16,24,16 ...] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from attnlab.attention.positions import SelfAttentionPositions

HEADS, HEAD_DIM, CALLS = 4, 32, 50


def per_pair_relative_bias(
    scheme: SelfAttentionPositions,
    query: torch.Tensor,
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
) -> torch.Tensor:
    """Shaw's ``q_i^T a_{clip(j - i)} / sqrt(d)`` from a ``[B, Q, K, D]`` tensor of each pair's
    distance embedding (attnlab before session 43): the same numbers as the table of distances."""
    assert scheme.relative is not None
    embeddings = scheme.relative(scheme.relative_index(query_positions, key_positions))  # [B, Q, K, D]
    return torch.einsum("bhqd,bqkd->bhqk", query, embeddings) / math.sqrt(scheme.head_dim)


def compare(batch: int, steps: int, clip: int, repeats: int) -> tuple[float, float]:
    """Best milliseconds of a forward and backward pass, per pair and by the table."""
    torch.manual_seed(0)
    scheme = SelfAttentionPositions("relative", HEADS, HEAD_DIM, clip)
    query = torch.randn(batch, HEADS, steps, HEAD_DIM, requires_grad=True)
    positions = torch.arange(float(steps)).expand(batch, steps)
    ways = {
        "per pair": lambda: per_pair_relative_bias(scheme, query, positions, positions),
        "table": lambda: scheme._relative_bias(query, positions, positions),
    }
    torch.testing.assert_close(ways["table"](), ways["per pair"]())
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(repeats):
        for name, way in ways.items():
            start = time.process_time()
            for _ in range(CALLS):
                way().sum().backward()
            best[name] = min(best[name], (time.process_time() - start) / CALLS * 1e3)
    return best["per pair"], best["table"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", action="append", help="BATCH,STEPS,CLIP (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = [tuple(int(n) for n in s.split(",")) for s in args.shape or ["16,24,16", "16,41,40"]]
    print(f"relative bias, {HEADS} heads of {HEAD_DIM}, forward + backward, best of {args.repeats} x {CALLS}")
    print(f"{'batch, steps, clip':<20} {'per pair ms':>12} {'table ms':>9} {'speed-up':>9}")
    for batch, steps, clip in shapes:
        per_pair, table = compare(batch, steps, clip, args.repeats)
        print(f"{f'{batch}, {steps}, {clip}':<20} {per_pair:>12.3f} {table:>9.3f} {per_pair / table:>8.2f}x")


if __name__ == "__main__":
    main()
