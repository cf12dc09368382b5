"""What keeping freed memory in the process (``attnlab.training.allocator``) gains on the CPU.

Runs ``bench_language_model.py`` (training tokens/s of the Daniluk et al. models) in child
processes, alternately with glibc's default ``malloc`` (``ATTNLAB_KEEP_FREED_MEMORY=0``) and with
freed memory kept, as the CLI does; prints the best tokens/s of each model under each setting and
their ratio, measured side by side in this one run. Arguments after ``--`` go to
``bench_language_model.py`` (default: the scaled-down WikiText-2 setting of the Daniluk
reproduction, hidden 64, embeddings 64, batch 16).

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_allocator.py [--repeats 2] [-- ARGS]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from attnlab.training.allocator import OPT_OUT_VARIABLE

LANGUAGE_MODEL_BENCHMARK = Path(__file__).resolve().parent / "bench_language_model.py"
DEFAULT_ARGS = ["--hidden", "64", "--embedding", "64", "--batch", "16", "--segments", "10", "--repeats", "2"]
ROW = re.compile(r"^(?P<name>\S.*?)\s+(?P<hidden>\d+)\s+(?P<rate>[\d,]+)\s+[\d.]+$")
SETTINGS = {"default malloc": "0", "freed memory kept": "1"}


def tokens_per_second(setting: str, args: list[str]) -> dict[str, float]:
    """One child run of the language-model benchmark; model name → training tokens/s."""
    environment = {**os.environ, OPT_OUT_VARIABLE: SETTINGS[setting]}
    result = subprocess.run(
        [sys.executable, str(LANGUAGE_MODEL_BENCHMARK), "--no-eval", *args],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    rates = {}
    for line in result.stdout.splitlines():
        match = ROW.match(line)
        if match:
            rates[match["name"]] = float(match["rate"].replace(",", ""))
    if not rates:
        raise RuntimeError(f"no results in the output of {LANGUAGE_MODEL_BENCHMARK}:\n{result.stdout}")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="child runs per setting (best kept)")
    parser.add_argument("child_args", nargs="*", help="arguments for bench_language_model.py (after --)")
    args = parser.parse_args()
    child_args = args.child_args or DEFAULT_ARGS
    print(f"bench_language_model.py {' '.join(child_args)}; {args.repeats} child runs per setting")
    best: dict[str, dict[str, float]] = {setting: {} for setting in SETTINGS}
    order = list(SETTINGS)
    for repeat in range(args.repeats):
        for setting in order if repeat % 2 == 0 else order[::-1]:
            for name, rate in tokens_per_second(setting, child_args).items():
                best[setting][name] = max(best[setting].get(name, 0.0), rate)
    default, kept = order
    print(f"\n{'model':26s} {default:>15s} {kept:>18s} {'ratio':>6s}")
    for name, rate in best[default].items():
        print(f"{name:26s} {rate:15,.0f} {best[kept][name]:18,.0f} {best[kept][name] / rate:6.2f}")


if __name__ == "__main__":
    main()
