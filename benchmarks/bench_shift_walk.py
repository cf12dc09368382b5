"""The Shift Attender's walk: one candidate per move and step, the moves as matrices, a prefix scan.

Prints, side by side in one run, the CPU time of the Shift Attender's forward and backward pass
over all decoder steps at once (as a teacher-forced Transformer calls it) with

* **candidates**: the recurrence as the module docstring writes it, one candidate attention per
  move and step, mixed by ``pi_t`` (the walk before session 29);
* **matrices**: :meth:`attnlab.attention.shift.ShiftAttender._walk` (the walk now): ``stay`` and
  the shifts as matrices side by side, so one product a step moves ``alpha_{t-1}`` by all of them,
  and the moves that do not depend on it mixed for all steps at once.

* **prefix scan** (measured in session 40, not used): the walk is the linear recurrence
  ``alpha_t = alpha_{t-1} A_t + c_t`` with ``A_t = sum_l pi_tl M_l`` (``M_l`` the linear moves'
  matrices), so all steps follow from ``log2(steps)`` rounds of batched products of the pairs
  ``(A, c)`` (a Hillis–Steele scan) instead of a product per step. Fewer operations, but each
  round multiplies ``source × source`` matrices for every step: slower on every shape measured.

All three give the same weights (checked here, and in tests/attention/test_shift_attender.py). Shapes:
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


def prefix_scan_walk(attender: ShiftAttender, pis: torch.Tensor, state, found) -> torch.Tensor:
    """The same recurrence by a prefix scan over the steps (module docstring)."""
    batch, steps, _ = pis.shape
    previous = state["previous_attention"]
    source_len = previous.size(-1)
    linear, fixed = attender.linear_moves, attender.other_moves
    candidates = [
        found[move] if move in found else state[move].unsqueeze(1).expand(batch, steps, source_len)
        for move in (attender.moves[k] for k in fixed)
    ]
    offsets = torch.einsum("btk,btks->bts", pis[..., fixed], torch.stack(candidates, dim=2))
    per_move = state["linear_maps"].view(batch, source_len, len(linear), source_len).transpose(1, 2)
    transitions = torch.bmm(pis[..., linear], per_move.reshape(batch, len(linear), -1))
    transitions = transitions.view(batch, steps, source_len, source_len)  # A_t
    first = torch.baddbmm(offsets[:, :1], previous.unsqueeze(1), transitions[:, 0])  # alpha_0
    rows, products = torch.cat([first, offsets[:, 1:]], dim=1), transitions
    span = 1  # after a round, step t holds alpha_t as a map of alpha_{t - 2 span}
    while span < steps:
        moved = torch.matmul(rows[:, :-span].unsqueeze(2), products[:, span:]).squeeze(2)
        rows = torch.cat([rows[:, :span], moved + rows[:, span:]], dim=1)
        if 2 * span < steps:  # the products that a later round reads
            later = torch.matmul(products[:, span:-span], products[:, 2 * span :])
            products = torch.cat([products[:, : 2 * span], later], dim=1)
        span *= 2
    return rows


def timed(call: Callable[[], torch.Tensor], repeats: int) -> tuple[float, torch.Tensor]:
    """Best CPU seconds of forward + backward over ``repeats`` calls, and the last weights."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        weights = call()
        weights.sum().backward()
        best = min(best, time.process_time() - start)
    return best, weights.detach()


def compare(batch: int, source_len: int, steps: int, repeats: int) -> tuple[float, float, float]:
    """Best CPU seconds of the three walks (candidates, matrices, prefix scan) on one random batch."""
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
        for name, implementation in (
            ("candidates", candidates_walk),
            ("matrices", walk),
            ("prefix scan", prefix_scan_walk),
        ):
            ShiftAttender._walk = implementation  # type: ignore[method-assign,assignment]
            results[name] = timed(call, repeats)
    finally:
        ShiftAttender._walk = walk  # type: ignore[method-assign]
    torch.testing.assert_close(results["candidates"][1], results["matrices"][1])
    torch.testing.assert_close(results["prefix scan"][1], results["matrices"][1])
    return results["candidates"][0], results["matrices"][0], results["prefix scan"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", action="append", help="BATCH,SOURCE,STEPS (repeatable)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shapes = [tuple(int(n) for n in s.split(",")) for s in args.shape or ["16,9,23", "64,14,8"]]
    print(f"Shift Attender forward + backward, moves {list(MOVES)}, gumbel choice, best of {args.repeats}")
    print(
        f"{'batch, source, steps':<22} {'candidates ms':>14} {'matrices ms':>12} {'speed-up':>9}"
        f" {'prefix scan ms':>15} {'matrices / scan':>16}"
    )
    for batch, source_len, steps in shapes:
        before, after, scan = compare(batch, source_len, steps, args.repeats)
        shape = f"{batch}, {source_len}, {steps}"
        print(
            f"{shape:<22} {before * 1e3:>14.2f} {after * 1e3:>12.2f} {before / after:>8.2f}x"
            f" {scan * 1e3:>15.2f} {after / scan:>15.2f}x"
        )


if __name__ == "__main__":
    main()
