"""The Shift Attender's walk: one candidate per move and step vs the moves as matrices.

Prints, side by side in one run, the CPU time of the Shift Attender's forward and backward pass
over all decoder steps at once (as a teacher-forced Transformer calls it) with

* **candidates**: the recurrence as the module docstring writes it, one candidate attention per
  move and step, mixed by ``pi_t`` (the walk before session 29);
* **matrices**: :meth:`attnlab.attention.shift.ShiftAttender._walk` (the walk now): ``stay`` and
  the shifts as matrices side by side, so one product a step moves ``alpha_{t-1}`` by all of them,
  and the moves that do not depend on it mixed for all steps at once.

Both give the same weights (checked here, and in tests/attention/test_shift_attender.py). Shapes:
SCAN's length split (batch 16, commands of up to 9 words, 23 steps) and Lookup Tables (batch 64,
sources of 14 words, 8 steps), or ``--shape BATCH,SOURCE,STEPS``.

Usage: ``.venv/bin/python benchmarks/bench_shift_walk.py [--shape 16,9,23 ...] [--repeats 30]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from attnlab.attention.shift import ShiftAttender

DIM = 32
MOVES = ("content", "stay", "forward", "backward", "start", "end")


def candidates_walk(attender: ShiftAttender, pis: torch.Tensor, state, found) -> torch.Tensor:
    """``alpha_t = sum_k pi_tk candidate_tk``, a candidate per move and step."""
    previous = state["previous_attention"]
    finals = []
    for t, pi in enumerate(pis.unbind(1)):
        candidates = []
        for move in attender.moves:
            if move in found:
                candidates.append(found[move][:, t])
            elif move == "stay":
                candidates.append(previous)
            elif move in attender.strides:
                targets = state[f"{move}_targets"]
                candidates.append(torch.zeros_like(previous).scatter_add(1, targets, previous))
            else:
                candidates.append(state[move])
        previous = torch.einsum("bk,bks->bs", pi, torch.stack(candidates, dim=1))
        finals.append(previous)
    return torch.stack(finals, dim=1)


def timed(call: Callable[[], torch.Tensor], repeats: int) -> tuple[float, torch.Tensor]:
    """Best CPU seconds of forward + backward over ``repeats`` calls, and the last weights."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        weights = call()
        weights.sum().backward()
        best = min(best, time.process_time() - start)
    return best, weights.detach()


def compare(batch: int, source_len: int, steps: int, repeats: int) -> tuple[float, float]:
    """Best CPU seconds of the two walks (candidates, matrices) on one random batch."""
    torch.manual_seed(0)
    attender = ShiftAttender(DIM, DIM, DIM, moves=MOVES).train()
    queries = torch.randn(batch, steps, DIM, requires_grad=True)
    keys = torch.randn(batch, source_len, DIM)
    mask = torch.arange(source_len) >= torch.randint(1, source_len + 1, (batch, 1))

    def call() -> torch.Tensor:
        torch.manual_seed(1)  # the same Gumbel draws for both
        return attender(queries, keys, keys, mask).weights

    walk = ShiftAttender._walk
    results = {}
    try:
        for name, implementation in (("candidates", candidates_walk), ("matrices", walk)):
            ShiftAttender._walk = implementation  # type: ignore[method-assign,assignment]
            results[name] = timed(call, repeats)
    finally:
        ShiftAttender._walk = walk  # type: ignore[method-assign]
    torch.testing.assert_close(results["candidates"][1], results["matrices"][1])
    return results["candidates"][0], results["matrices"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", action="append", help="BATCH,SOURCE,STEPS (repeatable)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = [tuple(int(n) for n in s.split(",")) for s in args.shape or ["16,9,23", "64,14,8"]]
    print(f"Shift Attender forward + backward, moves {list(MOVES)}, gumbel choice, best of {args.repeats}")
    print(f"{'batch, source, steps':<22} {'candidates ms':>14} {'matrices ms':>15} {'speed-up':>9}")
    for batch, source_len, steps in shapes:
        before, after = compare(batch, source_len, steps, args.repeats)
        shape = f"{batch}, {source_len}, {steps}"
        print(f"{shape:<22} {before * 1e3:>14.2f} {after * 1e3:>15.2f} {before / after:>8.2f}x")


if __name__ == "__main__":
    main()
