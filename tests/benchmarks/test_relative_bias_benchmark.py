"""benchmarks/bench_relative_bias.py times the per-pair relative bias (attnlab before session 43)
beside the table of distances, and both must give the same bias on every shape it is asked for."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("batch", "steps", "clip"), [(2, 5, 2), (3, 1, 4), (2, 7, 16)])
def test_the_per_pair_and_table_biases_agree(load_benchmark_module, batch, steps, clip):
    bench = load_benchmark_module("bench_relative_bias.py")
    seconds = bench.compare(batch, steps, clip, repeats=1)  # asserts the two biases agree
    assert len(seconds) == 2 and min(seconds) > 0
