"""Speed and memory of Raffel & Ellis's network on very long sequences (issue 3's targets).

Prints, side by side in one run, training steps/s (forward + backward + Adam step on a batch of 100
addition-problem sequences of length uniform in [T0, 1.1 T0]) and peak memory for

* ``attnlab``: ``FeedForwardAttentionNetwork`` as the experiment builds it (``implementation=auto``:
  on the CPU, the fused kernel of ``attnlab.attention.fused_pooling``), and
* ``reference``: a straightforward eager PyTorch implementation of the same model
  (``benchmarks/reference_pooling_network.py``),

at T0 = 1000, 5000 and 10000, after checking that, from the same weights, both give the same loss
and gradients on one batch (float tolerance). Targets: attnlab ≥ 5x the reference's steps/s at
T0 = 5000, and attnlab's peak memory at T0 = 10,000 under 1 GB.

Each (implementation, T0) pair runs in a fresh subprocess, so its memory is measured alone. On the
CPU, *step memory* is the peak resident set size during the timed steps minus the resident size
just before them (torch loaded and paged in by a short warm-up step, model and batches built);
*process peak* is the whole process's peak RSS during those steps, torch's own libraries included.
On CUDA it is ``torch.cuda.max_memory_allocated``. The two implementations alternate
(``--repeats`` rounds, the order flipped every round) so machine noise hits both alike; each
reports its median step time over the rounds' steps.

Usage: ``.venv/bin/python benchmarks/bench_memory_problems.py [--t0 1000 5000 10000] [--json out.json]``
"""

from __future__ import annotations

import argparse
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

IMPLEMENTATIONS = ("attnlab", "reference")
SPEED_TARGET_T0, SPEED_TARGET = 5000, 5.0
MEMORY_TARGET_T0, MEMORY_TARGET_MB = 10_000, 1024.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t0", type=int, nargs="+", default=[1000, 5000, 10_000])
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=4, help="timed training steps per round")
    parser.add_argument("--repeats", type=int, default=2, help="alternating rounds per T0")
    parser.add_argument("--pooling", choices=["attention", "mean"], default="attention")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the machine is shared)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results here")
    parser.add_argument("--worker", nargs=2, metavar=("IMPLEMENTATION", "T0"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


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
    if implementation == "attnlab":
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
    torch.set_num_threads(args.threads)
    implementation, t0 = args.worker[0], int(args.worker[1])
    device = resolve_device(args.device)
    batches = make_batches(t0, args.batch_size, args.steps + 1, seed=1, device=device)
    model = build(implementation, args.pooling, device)
    optimizer = make_optimizer(model, 1e-3)
    # One step on short sequences first pages in the code and creates Adam's state, so that the
    # baseline below is the process as it will be during the measured steps, minus the step itself.
    (warmup,) = make_batches(300, args.batch_size, 1, seed=0, device=device)
    train_step(model, optimizer, warmup, device)
    baseline_mb = _status_mb("VmRSS")
    _reset_peak_resident()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for index, batch in enumerate(batches):
        start = time.perf_counter()
        train_step(model, optimizer, batch, device)
        if index > 0:  # the first long step is untimed (allocator warm-up)
            times.append(time.perf_counter() - start)
    process_peak_mb = _status_mb("VmHWM")
    step_mb = (
        torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda"
        else process_peak_mb - baseline_mb
    )
    return {"step_times": times, "step_memory_mb": step_mb, "process_peak_mb": process_peak_mb}


def run_worker(implementation: str, t0: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", implementation, str(t0)]
    for name in ("batch_size", "steps", "pooling", "device", "threads"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    environment = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {implementation} T0={t0} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_equivalence(t0: int, args: argparse.Namespace) -> dict[str, float]:
    """Loss and gradients of both implementations from the same weights on one batch."""
    device = resolve_device(args.device)
    (batch,) = make_batches(t0, args.batch_size, 1, seed=2, device=device)
    losses, grads = [], []
    for implementation in IMPLEMENTATIONS:
        model = build(implementation, args.pooling, device)
        loss = F.mse_loss(predict(model, batch), batch.targets)
        loss.backward()
        losses.append(loss.item())
        named = {name.replace("score_layer.", "pooling."): p.grad for name, p in model.named_parameters()}
        grads.append({name: grad.flatten() for name, grad in named.items()})
    relative = max(
        float((grads[0][name] - grads[1][name]).abs().max() / grads[1][name].abs().max().clamp_min(1e-12))
        for name in grads[1]
    )
    return {"loss_attnlab": losses[0], "loss_reference": losses[1], "max_relative_grad_diff": relative}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    torch.set_num_threads(args.threads)
    print(
        f"Raffel & Ellis network ({args.pooling} pooling), batch {args.batch_size}, "
        f"{args.steps} timed steps x {args.repeats} rounds, device {args.device}, {args.threads} thread(s), "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}"
    )
    rows: list[dict[str, Any]] = []
    ok = True
    for t0 in args.t0:
        equivalence = check_equivalence(t0, args)
        same = (
            abs(equivalence["loss_attnlab"] - equivalence["loss_reference"])
            <= 1e-5 * abs(equivalence["loss_reference"])
            and equivalence["max_relative_grad_diff"] < 1e-3
        )
        ok &= same
        results: dict[str, dict[str, list[float]]] = {
            name: {"times": [], "mem": [], "peak": []} for name in IMPLEMENTATIONS
        }
        for round_index in range(args.repeats):
            order = IMPLEMENTATIONS if round_index % 2 == 0 else IMPLEMENTATIONS[::-1]
            for implementation in order:
                measured = run_worker(implementation, t0, args)
                results[implementation]["times"] += measured["step_times"]
                results[implementation]["mem"].append(measured["step_memory_mb"])
                results[implementation]["peak"].append(measured["process_peak_mb"])
        row = {"t0": t0, **equivalence, "same_loss_and_gradients": same}
        for name in IMPLEMENTATIONS:
            row[f"{name}_steps_per_s"] = 1.0 / statistics.median(results[name]["times"])
            row[f"{name}_step_memory_mb"] = max(results[name]["mem"])
            row[f"{name}_process_peak_mb"] = max(results[name]["peak"])
        row["speedup"] = row["attnlab_steps_per_s"] / row["reference_steps_per_s"]
        rows.append(row)
        print(
            f"T0={t0:>6}: steps/s attnlab {row['attnlab_steps_per_s']:7.2f}  reference "
            f"{row['reference_steps_per_s']:6.2f}  ratio {row['speedup']:5.2f}x | step memory MB attnlab "
            f"{row['attnlab_step_memory_mb']:7.1f}  reference {row['reference_step_memory_mb']:7.1f} | "
            f"peak MB {row['attnlab_process_peak_mb']:.0f} / {row['reference_process_peak_mb']:.0f} | "
            f"loss {row['loss_attnlab']:.6f} vs {row['loss_reference']:.6f}, grads rel. diff "
            f"{row['max_relative_grad_diff']:.1e} {'OK' if same else 'DIFFERENT'}",
            flush=True,
        )
    by_t0 = {row["t0"]: row for row in rows}
    if SPEED_TARGET_T0 in by_t0:
        speedup = by_t0[SPEED_TARGET_T0]["speedup"]
        passed = speedup >= SPEED_TARGET
        ok &= passed
        print(
            f"target: steps/s ratio at T0={SPEED_TARGET_T0} >= {SPEED_TARGET}: {speedup:.2f} "
            f"{'PASS' if passed else 'FAIL'}"
        )
    if MEMORY_TARGET_T0 in by_t0:
        memory = by_t0[MEMORY_TARGET_T0]["attnlab_step_memory_mb"]
        passed = memory < MEMORY_TARGET_MB
        ok &= passed
        print(
            f"target: attnlab step memory at T0={MEMORY_TARGET_T0} < {MEMORY_TARGET_MB:.0f} MB: "
            f"{memory:.1f} MB {'PASS' if passed else 'FAIL'}"
        )
    if args.json:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        atomic_write_json(
            args.json, {"date": stamp, "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
        )
    return 0 if ok else 1


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    sys.exit(main())
