"""benchmarks/bench_shift_walk.py times the walk it replaced beside the Shift Attender's own, and
both must give the same weights, with padding, on every shape it is asked for."""

from __future__ import annotations

import pytest

from attnlab.attention.shift import ShiftAttender


@pytest.mark.parametrize(("batch", "source_len", "steps"), [(3, 5, 4), (2, 1, 3)])
def test_the_two_walks_agree_and_the_attender_keeps_its_own(load_benchmark_module, batch, source_len, steps):
    bench = load_benchmark_module("bench_shift_walk.py")
    walk = ShiftAttender._walk
    before, after = bench.compare(batch, source_len, steps, repeats=1)  # asserts the weights agree
    assert before > 0 and after > 0
    assert ShiftAttender._walk is walk
