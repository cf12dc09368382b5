"""Sweep overhead: the same grid of tiny runs on the local Ray backend and on the local process pool.

Target (issue 7): 8 tiny runs on a local Ray instance take ≤ 1.2× the time of the same runs in the
local-process backend with the same parallelism. Prints, side by side in one run:

* ``local``: ``LocalBackend(jobs)`` (a fresh pool of forked single-threaded workers per sweep);
* ``ray cold``: ``RayBackend(num_cpus=jobs)`` including ``ray.init`` and the workers' first imports;
* ``ray warm``: the same sweep again on the running instance (workers already started), i.e. the
  per-sweep overhead once a cluster is up, which is the case the target is about.

    .venv/bin/python benchmarks/bench_sweep.py [--runs 8] [--jobs 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from attnlab.experiments.runner import LocalBackend, RayBackend
from attnlab.experiments.sweep import load_spec, run_sweep

TINY = [
    "data.t0=20",
    "data.test_size=200",
    "training.updates_per_epoch=20",
    "training.epochs=1",
    "training.stop_at_accuracy=null",
    "training.progress=false",
    "training.device=cpu",
]


def _spec(folder: Path, runs: int) -> Path:
    rates = [round(1e-3 * (index + 1), 6) for index in range(runs)]
    path = folder / "bench.yaml"
    data = {"config": "memory_addition", "overrides": TINY, "grid": {"training.learning_rate": rates}}
    path.write_text(yaml.safe_dump(data))
    return path


def _time_sweep(spec_path: Path, out: Path, backend) -> float:
    start = time.perf_counter()
    report = run_sweep(load_spec(spec_path), out, backend, log=lambda line: None)
    elapsed = time.perf_counter() - start
    if not report.ok or len(report.executed) != len(report.statuses):
        raise RuntimeError(f"benchmark sweep did not run every run: {report.counts()} {report.failures}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timed sweeps per backend (best is kept)")
    args = parser.parse_args()

    import ray

    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        spec = _spec(folder, args.runs)
        _time_sweep(spec, folder / "warmup", LocalBackend(1))  # imports, first-call costs, data caches

        local = min(
            _time_sweep(spec, folder / f"local{repeat}", LocalBackend(args.jobs))
            for repeat in range(args.repeats)
        )
        start = time.perf_counter()
        ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False)
        startup = time.perf_counter() - start
        try:
            cold = startup + _time_sweep(spec, folder / "ray_cold", RayBackend())
            warm = min(
                _time_sweep(spec, folder / f"ray{repeat}", RayBackend()) for repeat in range(args.repeats)
            )
        finally:
            ray.shutdown()

    print(f"{args.runs} tiny runs (memory_addition, T0=20, 20 updates), parallelism {args.jobs}")
    print(f"  local process pool : {local:6.2f} s")
    print(f"  ray, warm instance : {warm:6.2f} s   ratio {warm / local:.2f}  (target ≤ 1.2)")
    print(f"  ray, cold (init {startup:.1f} s + first imports): {cold:6.2f} s   ratio {cold / local:.2f}")


if __name__ == "__main__":
    main()
