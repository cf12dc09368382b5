"""benchmarks/bench_shift_walk.py times the walk it replaced and a prefix scan beside the Shift
Attender's own, and all three must give the same weights, with padding, on every shape it is asked
for."""

from __future__ import annotations

import pytest

from attnlab.attention.shift import ShiftAttender


@pytest.mark.parametrize(("batch", "source_len", "steps"), [(3, 5, 4), (2, 1, 3), (2, 4, 1), (3, 6, 9)])
def test_the_walks_agree_and_the_attender_keeps_its_own(load_benchmark_module, batch, source_len, steps):
    bench = load_benchmark_module("bench_shift_walk.py")
    walk = ShiftAttender._walk
    seconds = bench.compare(batch, source_len, steps, repeats=1)  # asserts the weights agree
    assert len(seconds) == 3 and min(seconds) > 0
    assert ShiftAttender._walk is walk
