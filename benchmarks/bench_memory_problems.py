"""Speed, memory and float64-checked gradients of Raffel & Ellis's network on very long sequences.

Prints, side by side in one run, training steps/s (forward + backward + Adam step on a batch of 100
addition-problem sequences of length uniform in [T0, 1.1 T0]) and peak memory for

* ``fused_v1``: ``FeedForwardAttentionNetwork(implementation="fused_v1")``, the fused kernel as it
  was before issue 22 (``attnlab/attention/fused_pooling_v1.py``), 1 thread;
* ``fused``: the network as the experiment builds it (``implementation=auto``: on the CPU the numba
  kernels of ``attnlab/attention/fused_pooling.py``), 1 thread, and ``fused x2`` with ``--threads``
  (default 2) threads;
* ``reference``: a straightforward eager PyTorch implementation of the same model
  (``benchmarks/reference_pooling_network.py``), 1 thread,

with the ratios fused / fused_v1 (issue 22: >= 4x at T0 = 10,000), fused x2 / fused (>= 1.6x) and
fused / reference (issue 3: >= 5x at T0 = 5,000), and each one's achieved GFLOP/s: the useful
floating-point work of a step (:func:`step_flops`, recomputation not counted) over its median step
time, beside a bound measured in the same run, a float32 ``torch.mm`` of 1024 x 1024 matrices on 1
and on ``--threads`` threads.

The workers run with ``OMP_WAIT_POLICY=PASSIVE`` (``--omp-wait-policy``): PyTorch's idle OpenMP
threads then sleep instead of spinning, which on a 2-core machine would take the core that the
kernel's second thread needs (measured on the loaded box: 0.17-0.25 CPU s per 2-thread step with
spinning against 0.09 without, at T0 = 10,000). One-thread runs are not affected.

*CPU s/step* is the process's CPU time (all threads, ``time.process_time``) per step: on a
loaded machine it shows the work done, which wall time hides (a 2-thread step that takes as much
CPU time as a 1-thread step would take half its wall time on idle cores).

Gradient check, per T0: on one batch and from the same weights, every implementation's float32
loss and gradients are compared with a float64 computation of the same loss (the eager reference
in float64). The error of a parameter tensor is ``max|g - g64| / max|g64|``; an implementation
passes when its worst tensor's error is <= :data:`GRAD_TOLERANCE` and its loss is within
:data:`LOSS_TOLERANCE` relative. The tolerance: a float32 sum of ``N`` terms of one sign computed
with random rounding errors is off by about ``sqrt(N) * 6e-8`` relative; ``N = B * T ~ 1e6`` gives
6e-5. Errors above it come from a recursive float32 running sum over ~1e6 terms, whose rounding
errors add up (measured: 1e-3 for the eager reference's ``W_xh`` and fused_v1's ``W_hc`` gradients).

Each (implementation, T0) pair runs in a fresh subprocess, so its memory is measured alone. On the
CPU, *step memory* is the peak resident set size during the timed steps minus the resident size
just before them (torch loaded and paged in by a short warm-up step, model and batches built);
*process peak* is the whole process's peak RSS during those steps, torch's own libraries included.
On CUDA it is ``torch.cuda.max_memory_allocated``. The implementations take turns (``--repeats``
rounds, the order reversed every round) so machine noise hits them alike; each reports its median
step time over the rounds' steps.

Usage: ``.venv/bin/python benchmarks/bench_memory_problems.py [--t0 1000 5000 10000] [--json out.json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attnlab.io import atomic_write_json
from attnlab.models.pooling_network import FeedForwardAttentionNetwork
from attnlab.tasks.memory_problems import MemoryBatch, generate_memory_batch, sample_lengths
from attnlab.training.allocator import keep_freed_memory
from attnlab.training.trainer import make_optimizer, resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_pooling_network import ReferencePoolingNetwork, load_attnlab_state_dict  # noqa: E402

VARIANTS: dict[str, tuple[str, int | None]] = {
    "fused_v1": ("fused_v1", 1),
    "fused": ("auto", 1),
    "fused x2": ("auto", None),  # None: --threads threads
    "reference": ("reference", 1),
}
"""Label -> (implementation, threads)."""
SPEED_TARGET_T0, SPEED_TARGET = 5000, 5.0  # fused / reference (issue 3)
KERNEL_TARGET_T0, KERNEL_TARGET, THREADS_TARGET = 10_000, 4.0, 1.6  # fused / fused_v1, x2 / x1 (issue 22)
MEMORY_TARGET_T0, MEMORY_TARGET_MB = 10_000, 1024.0
GRAD_TOLERANCE = 1e-4
LOSS_TOLERANCE = 1e-5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t0", type=int, nargs="+", default=[1000, 5000, 10_000])
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per round")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds per T0")
    parser.add_argument("--pooling", choices=["attention", "mean"], default="attention")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=2, help="threads of the 'fused x2' variant")
    parser.add_argument(
        "--omp-wait-policy",
        default="PASSIVE",
        help="OMP_WAIT_POLICY of the workers ('' leaves it unset: idle OpenMP threads spin)",
    )
    parser.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS), help="what to measure"
    )
    parser.add_argument(
        "--check-batch-size",
        type=int,
        default=None,
        help="sequences of the float64 gradient check (default: --batch-size; its eager float64 "
        "reference needs ~4 x 8 x B x 1.1 T0 x 100 bytes, so lower it for T0 = 100,000)",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results here")
    parser.add_argument(
        "--worker", nargs=3, metavar=("IMPLEMENTATION", "T0", "THREADS"), help=argparse.SUPPRESS
    )
    return parser.parse_args(argv)


def step_flops(lengths: torch.Tensor, input_dim: int, hidden_dim: int, attention: bool) -> float:
    """Useful floating-point operations of a training step's per-step layer and pooling (the rest of
    the network is ``O(B D^2)``, negligible). Per real step, with ``K`` inputs and ``D`` units:
    forward ``z = W x + b`` 2KD, LReLU D, ``w . h`` 2D, ``sum p_t h_t`` 2D; backward ``g . h`` 2D,
    ``dL/dz = S (alpha g + delta w)`` 4D, ``dW~ += dz x~^T`` 2(K+1)D, ``dw += delta h`` 2D: (4K + 15) D.
    For the mean: forward 2KD + D + 2D, backward 2D + 2(K+1)D: (4K + 7) D. States recomputed by a
    kernel are not counted."""
    per_step = (4 * input_dim + (15 if attention else 7)) * hidden_dim
    return float(lengths.sum()) * per_step


def matmul_gflops(threads: int, size: int = 1024, repeats: int = 5) -> float:
    """A bound for this machine: float32 ``torch.mm`` GFLOP/s (best of ``repeats``) on ``threads`` threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    left, right = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.perf_counter()
        torch.mm(left, right)
        best = min(best, time.perf_counter() - start)
    torch.set_num_threads(previous)
    return 2 * size**3 / best / 1e9


def make_batches(t0: int, batch_size: int, count: int, seed: int, device: torch.device) -> list[MemoryBatch]:
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = sample_lengths("fixed", batch_size, generator, t0)
        batch = generate_memory_batch("addition", batch_size, lengths, generator)
        batches.append(batch.to(device))
    return batches


def build(implementation: str, pooling: str, device: torch.device, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    attnlab = FeedForwardAttentionNetwork(pooling=pooling)  # type: ignore[arg-type]
    if implementation != "reference":
        attnlab.implementation = implementation  # same weights, another implementation
        return attnlab.to(device)
    reference = ReferencePoolingNetwork(pooling=pooling)
    load_attnlab_state_dict(reference, attnlab.state_dict())
    return reference.to(device)


def predict(model: torch.nn.Module, batch: MemoryBatch) -> torch.Tensor:
    if isinstance(model, FeedForwardAttentionNetwork):
        return model(batch.inputs, batch.padding_mask).prediction
    return model(batch.inputs, batch.padding_mask)


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: MemoryBatch, device: torch.device
) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.mse_loss(predict(model, batch), batch.targets).backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _status_mb(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of this process, in MB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak_resident() -> None:
    """Restart ``VmHWM`` from the current RSS (``clear_refs`` 5, Linux >= 4.0); ``ru_maxrss`` cannot
    be used: a subprocess inherits its parent's peak through fork."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One implementation at one T0 in this (fresh) process: median step time and peak memory."""
    implementation, t0, threads = args.worker[0], int(args.worker[1]), int(args.worker[2])
    torch.set_num_threads(threads)
    device = resolve_device(args.device)
    batches = make_batches(t0, args.batch_size, args.steps + 1, seed=1, device=device)
    model = build(implementation, args.pooling, device)
    optimizer = make_optimizer(model, 1e-3)
    # One step on short sequences first pages in the code (and loads the numba kernels from their
    # cache) and creates Adam's state, so that the baseline below is the process as it will be
    # during the measured steps, minus the step itself.
    (warmup,) = make_batches(300, args.batch_size, 1, seed=0, device=device)
    train_step(model, optimizer, warmup, device)
    baseline_mb = _status_mb("VmRSS")
    _reset_peak_resident()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, cpu_times, flops = [], [], []
    for index, batch in enumerate(batches):
        start, cpu_start = time.perf_counter(), time.process_time()
        train_step(model, optimizer, batch, device)
        if index > 0:  # the first long step is untimed (allocator warm-up)
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            flops.append(step_flops(batch.lengths, batch.inputs.size(2), 100, args.pooling == "attention"))
    process_peak_mb = _status_mb("VmHWM")
    step_mb = (
        torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda"
        else process_peak_mb - baseline_mb
    )
    return {
        "step_times": times,
        "cpu_times": cpu_times,
        "flops": flops,
        "step_memory_mb": step_mb,
        "process_peak_mb": process_peak_mb,
    }


def variant_threads(label: str, args: argparse.Namespace) -> int:
    return VARIANTS[label][1] or args.threads


def run_worker(label: str, t0: int, args: argparse.Namespace) -> dict[str, Any]:
    threads = variant_threads(label, args)
    command = [sys.executable, __file__, "--worker", VARIANTS[label][0], str(t0), str(threads)]
    for name in ("batch_size", "steps", "pooling", "device"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if args.omp_wait_policy:
        environment["OMP_WAIT_POLICY"] = args.omp_wait_policy
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {label} T0={t0} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def loss_and_gradients(
    model: torch.nn.Module, batch: MemoryBatch, dtype: torch.dtype
) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss and the parameters' gradients (float64, named as attnlab names them) of one batch."""
    model = model.to(dtype)
    cast = dataclasses.replace(batch, inputs=batch.inputs.to(dtype), targets=batch.targets.to(dtype))
    loss = F.mse_loss(predict(model, cast), cast.targets)
    loss.backward()
    grads = {
        name.replace("score_layer.", "pooling."): param.grad.detach().to(torch.float64).flatten()
        for name, param in model.named_parameters()
    }
    return loss.item(), grads


def check_against_float64(t0: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Loss and gradients of every variant (float32) against the float64 eager reference, one batch."""
    device = resolve_device(args.device)
    (batch,) = make_batches(t0, args.check_batch_size or args.batch_size, 1, seed=2, device=device)
    exact_loss, exact = loss_and_gradients(build("reference", args.pooling, device), batch, torch.float64)
    results = {}
    previous = torch.get_num_threads()
    for label in args.variants:
        torch.set_num_threads(variant_threads(label, args))
        model = build(VARIANTS[label][0], args.pooling, device)
        loss, grads = loss_and_gradients(model, batch, torch.float32)
        errors = {
            name: float((grads[name] - exact[name]).abs().max() / exact[name].abs().max().clamp_min(1e-30))
            for name in exact
        }
        worst = max(errors, key=errors.__getitem__)
        loss_error = abs(loss - exact_loss) / abs(exact_loss)
        results[label] = {
            "loss": loss,
            "loss_float64": exact_loss,
            "loss_relative_error": loss_error,
            "grad_errors": errors,
            "worst_parameter": worst,
            "max_grad_error": errors[worst],
            "pass": errors[worst] <= GRAD_TOLERANCE and loss_error <= LOSS_TOLERANCE,
        }
    torch.set_num_threads(previous)
    return results


def _ratio(row: dict[str, Any], numerator: str, denominator: str) -> float | None:
    if f"{numerator} steps/s" not in row or f"{denominator} steps/s" not in row:
        return None
    return row[f"{numerator} steps/s"] / row[f"{denominator} steps/s"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    torch.set_num_threads(1)
    bounds = {1: matmul_gflops(1), args.threads: matmul_gflops(args.threads)}
    print(
        f"Raffel & Ellis network ({args.pooling} pooling), batch {args.batch_size}, "
        f"{args.steps} timed steps x {args.repeats} rounds, device {args.device}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}\n"
        f"bound: float32 1024^3 matmul {bounds[1]:.1f} GFLOP/s on 1 thread, "
        f"{bounds[args.threads]:.1f} on {args.threads}; gradient check: max|g - g64|/max|g64| per "
        f"parameter tensor <= {GRAD_TOLERANCE:.0e}, loss within {LOSS_TOLERANCE:.0e}, on "
        f"{args.check_batch_size or args.batch_size} sequences",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    ok = True
    for t0 in args.t0:
        check = check_against_float64(t0, args)
        ok &= all(result["pass"] for result in check.values())
        measured: dict[str, dict[str, list[float]]] = {
            label: {"times": [], "cpu": [], "flops": [], "mem": [], "peak": []} for label in args.variants
        }
        for round_index in range(args.repeats):
            order = args.variants if round_index % 2 == 0 else args.variants[::-1]
            for label in order:
                result = run_worker(label, t0, args)
                measured[label]["times"] += result["step_times"]
                measured[label]["cpu"] += result["cpu_times"]
                measured[label]["flops"] += result["flops"]
                measured[label]["mem"].append(result["step_memory_mb"])
                measured[label]["peak"].append(result["process_peak_mb"])
        row: dict[str, Any] = {"t0": t0, "check": check}
        print(f"T0={t0}:")
        for label in args.variants:
            seconds = statistics.median(measured[label]["times"])
            threads = variant_threads(label, args)
            gflops = statistics.mean(measured[label]["flops"]) / seconds / 1e9
            row[f"{label} steps/s"] = 1.0 / seconds
            row[f"{label} CPU s/step"] = cpu = statistics.median(measured[label]["cpu"])
            row[f"{label} GFLOP/s"] = gflops
            row[f"{label} step memory MB"] = max(measured[label]["mem"])
            row[f"{label} process peak MB"] = max(measured[label]["peak"])
            result = check[label]
            memory, peak = row[f"{label} step memory MB"], row[f"{label} process peak MB"]
            print(
                f"  {label:<10} {threads} thr  {1.0 / seconds:7.2f} steps/s  CPU {cpu:6.3f} s/step  "
                f"{gflops:6.2f} GFLOP/s "
                f"({100 * gflops / bounds[threads]:4.1f}% of matmul)  step memory {memory:7.1f} MB  "
                f"peak {peak:5.0f} MB | vs float64: loss {result['loss_relative_error']:.1e}, grads "
                f"{result['max_grad_error']:.1e} ({result['worst_parameter']}) "
                f"{'PASS' if result['pass'] else 'FAIL'}",
                flush=True,
            )
        ratios = {
            "fused / fused_v1": _ratio(row, "fused", "fused_v1"),
            "fused x2 / fused": _ratio(row, "fused x2", "fused"),
            "fused / reference": _ratio(row, "fused", "reference"),
        }
        row["ratios"] = ratios
        print("  ratios: " + ", ".join(f"{name} {value:.2f}x" for name, value in ratios.items() if value))
        rows.append(row)
    ok &= report_targets({row["t0"]: row for row in rows})
    if args.json:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        arguments = {key: str(value) for key, value in vars(args).items()}
        atomic_write_json(
            args.json, {"date": stamp, "bounds_gflops": bounds, "args": arguments, "rows": rows}
        )
    return 0 if ok else 1


def report_targets(by_t0: dict[int, dict[str, Any]]) -> bool:
    """Print the issues' targets that this run measured, PASS or FAIL; True when all pass."""
    ok = True
    targets = [
        (SPEED_TARGET_T0, "fused / reference", SPEED_TARGET),
        (KERNEL_TARGET_T0, "fused / fused_v1", KERNEL_TARGET),
        (KERNEL_TARGET_T0, "fused x2 / fused", THREADS_TARGET),
    ]
    for t0, name, target in targets:
        value = by_t0[t0]["ratios"][name] if t0 in by_t0 else None
        if value is not None:
            ok &= value >= target
            verdict = "PASS" if value >= target else "FAIL"
            print(f"target: {name} at T0={t0} >= {target}: {value:.2f} {verdict}")
    if MEMORY_TARGET_T0 in by_t0 and "fused step memory MB" in by_t0[MEMORY_TARGET_T0]:
        memory = by_t0[MEMORY_TARGET_T0]["fused step memory MB"]
        passed = memory < MEMORY_TARGET_MB
        ok &= passed
        print(
            f"target: fused step memory at T0={MEMORY_TARGET_T0} < {MEMORY_TARGET_MB:.0f} MB: "
            f"{memory:.1f} MB {'PASS' if passed else 'FAIL'}"
        )
    return ok


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    sys.exit(main())
