"""Speed of Syntactic Attention training: batched (attnlab) vs one example at a time (the paper's setting).

Prints, side by side in one run, training examples/s (forward + backward + gradient clipping + Adam
step, as in :class:`attnlab.training.trainer.Trainer`) of the paper-sized Syntactic Attention model
(Russin et al. 2019: 120-d ``m_j``, 2 × 200 encoder, 400 decoder) on SCAN's simple split:

* **batched**: attnlab's training batches (``--batch-size`` examples, bucketed by output length, as
  :mod:`attnlab.experiments.scan` trains);
* **one at a time**: the same model code and the same examples, batch size 1 (Russin et al. trained
  200,000 iterations with a batch size of 1).

Both start from the same weights and see the same examples in the same order; the measurements are
interleaved (``--repeats`` rounds, best round reported) so that machine noise hits both alike. The
target is a ratio ≥ 20×. ``--converge OUT_DIR`` adds the other half of the target, equal accuracy
after training to convergence: it trains both settings (early stopping on the held-out 20%, epoch caps
``--batched-epochs`` and ``--one-at-a-time-epochs``; finished runs in ``OUT_DIR`` are reused) and
prints their whole-training throughput, their training time up to the best checkpoint and their
test accuracies. The one-at-a-time run takes hours on a CPU.

Usage: ``.venv/bin/python benchmarks/bench_scan.py [--batch-size 64] [--threads 1] [--device cpu]``
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import yaml
from torch import nn

from attnlab.evaluation.seq2seq import teacher_forced_loss
from attnlab.experiments.aggregate import summarize
from attnlab.experiments.registry import resolve_config, train_or_resume
from attnlab.experiments.scan import experiment
from attnlab.metric_names import read_metrics, read_summary, valid_name
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.reporting.tables import stats_text
from attnlab.tasks import scan_data
from attnlab.tasks.batching import EncodedDataset, bucketed_order, collate, encode_examples
from attnlab.tasks.scan import generate_standard_split, load_standard_split
from attnlab.tasks.vocab import build_vocabularies
from attnlab.training.allocator import keep_freed_memory
from attnlab.training.trainer import make_optimizer

TARGET_RATIO = 20.0
SCAN_ROOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "scan"


def simple_split_training_set() -> tuple[EncodedDataset, str]:
    if (SCAN_ROOT / "simple_split").is_dir():
        split, origin = load_standard_split("simple", SCAN_ROOT), f"{SCAN_ROOT.resolve()}/simple_split"
    else:
        split, origin = generate_standard_split("simple"), "generated simple split"
    source, target = build_vocabularies(split.train)
    return encode_examples(split.train, source, target), origin


def train_steps(
    model: nn.Module, dataset: EncodedDataset, batches: list[torch.Tensor], device: torch.device
) -> float:
    """Seconds to train on ``batches`` (row indices of ``dataset``), as the Trainer does."""
    optimizer = make_optimizer(model, 1e-3)
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for rows in batches:
        loss = teacher_forced_loss(model, collate(dataset, rows).to(device))  # type: ignore[arg-type]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    dataset, origin = simple_split_training_set()
    print(f"data: {origin}, {len(dataset)} training examples")
    generator = torch.Generator().manual_seed(0)
    batched = bucketed_order(dataset, args.batch_size, generator, pool=50)[: args.batched_batches]
    single_rows = torch.cat(batched)[: args.single_examples].split(1)
    torch.manual_seed(0)
    model = SyntacticAttentionSeq2Seq(dataset.source.max().item() + 1, dataset.target_output.max().item() + 1)
    initial = copy.deepcopy(model.state_dict())
    best = {"batched": float("inf"), "one_at_a_time": float("inf")}
    counts = {"batched": sum(len(rows) for rows in batched), "one_at_a_time": len(single_rows)}
    train_steps(model.to(device), dataset, batched[:2], device)  # warm-up
    for repeat in range(args.repeats):
        order = ["batched", "one_at_a_time"] if repeat % 2 == 0 else ["one_at_a_time", "batched"]
        for name in order:
            model.load_state_dict(initial)
            seconds = train_steps(model, dataset, batched if name == "batched" else list(single_rows), device)
            best[name] = min(best[name], seconds)
            print(f"  round {repeat + 1} {name:14s} {counts[name] / seconds:9.1f} examples/s", flush=True)
    return {name: counts[name] / best[name] for name in best}


SETTINGS = ("batched", "one_at_a_time")
"""The two protocols of ``--converge``: attnlab's batches, and the paper's one example at a time."""


def converge(args: argparse.Namespace) -> None:
    """Train both protocols on ``--split`` for every ``--seeds`` seed and compare them.

    Run directories are ``<--converge>/<setting>/seed<S>``; finished ones are reused and interrupted
    ones resumed, so the same command reports a campaign trained earlier by ``attnlab train`` with
    the same settings. Batch 1 keeps the length bucketing of the config: with one example a batch it
    only reorders an already shuffled order. Prints, per run, the epochs and updates it trained, its
    whole training time (the trainer's per-epoch seconds, validation included), examples/s over that
    time, the epoch and time of its best checkpoint (the lowest validation loss, which is evaluated),
    and its test accuracy with the model emitting ``<eos>`` and with the output length given; then
    per protocol the mean ± std (median) over seeds, and the time and accuracy of the two side by side.
    """
    epochs = {"batched": args.batched_epochs, "one_at_a_time": args.one_at_a_time_epochs}
    batch_sizes = {"batched": args.batch_size, "one_at_a_time": 1}
    rows: dict[str, list[dict[str, float]]] = {setting: [] for setting in SETTINGS}
    header = (
        "setting",
        "seed",
        "epochs",
        "updates",
        "seconds",
        "ex/s",
        "best ep",
        "s to best",
        "seq_acc",
        "given",
    )
    lines = ["\n{:14s} {:>4s} {:>6s} {:>8s} {:>8s} {:>7s} {:>7s} {:>9s} {:>8s} {:>9s}".format(*header)]
    for seed in args.seeds:
        for setting in SETTINGS:
            run_dir = Path(args.converge) / setting / f"seed{seed}"
            if not (run_dir / "eval" / "summary.json").is_file():
                print(
                    f"training {setting}, seed {seed}, into {run_dir} ({epochs[setting]} epochs at most)",
                    flush=True,
                )
                overrides = protocol_overrides(args, batch_sizes[setting], epochs[setting], seed)
                train_or_resume(resolve_config("scan", overrides), run_dir)
            row = finished_run(run_dir, batch_sizes[setting])
            rows[setting].append(row)
            lines.append(
                f"{setting:14s} {seed:4d} {row['epochs']:6.0f} {row['updates']:8.0f} {row['seconds']:8.0f}"
                f" {row['examples_per_s']:7.1f} {row['best_epoch']:7.0f} {row['seconds_to_best']:9.0f}"
                f" {row['seq_acc']:7.2f}% {row['seq_acc_given_length']:8.2f}%"
            )
    print("\n".join(lines))
    print(compare_protocols(rows))


def protocol_overrides(args: argparse.Namespace, batch_size: int, epochs: int, seed: int) -> list[str]:
    """The ``scan`` config overrides of one ``--converge`` run: the split, the protocol's batch size
    and epoch cap, the seed, then ``--overrides`` (the same for both protocols, e.g. the stop options
    ``model.end_marker=true model.stop_from_attention=true model.alignment_word_dropout=0.1``)."""
    return [
        f"data.split={args.split}",
        f"data.root={SCAN_ROOT.resolve()}",
        f"training.batch_size={batch_size}",
        f"training.epochs={epochs}",
        f"training.seed={seed}",
        f"training.device={args.device}",
        "training.progress=false",
        *args.overrides,
    ]


def compare_protocols(rows: dict[str, list[dict[str, float]]]) -> str:
    """Per protocol, mean ± std (median; n) over seeds of the test accuracies and of the time to the
    best checkpoint, and how many times shorter that time is batched."""
    lines = []
    for setting in SETTINGS:
        runs = rows[setting]
        accuracy = stats_text(summarize([run["seq_acc"] for run in runs]), median=True)
        given = stats_text(summarize([run["seq_acc_given_length"] for run in runs]), median=True)
        seconds = statistics.fmean(run["seconds_to_best"] for run in runs)
        lines.append(
            f"{setting}: <eos> {accuracy}; length given {given}; {seconds:.0f} s to the best checkpoint"
        )
    batched, single = (statistics.fmean(run["seconds_to_best"] for run in rows[s]) for s in SETTINGS)
    lines.append(f"time to the best checkpoint: {single / batched:.1f}x shorter batched (target: >= 10x)")
    return "\n".join(lines)


def finished_run(run_dir: Path, batch_size: int) -> dict[str, float]:
    """Training cost and test accuracy of a finished SCAN run directory.

    ``best_epoch`` is the epoch of the lowest validation loss (the checkpoint evaluated), and
    ``seconds_to_best`` the training time up to and including it: the time to convergence as early
    stopping defines it.
    """
    history = read_metrics(run_dir / "metrics.jsonl")
    test = read_summary(run_dir / "eval" / "summary.json")["test"]
    config = experiment.EXPERIMENT.parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    training_examples = len(scan_data.load_splits(config.data)["train"].examples)
    seconds = sum(record["seconds"] for record in history)
    best_epoch = min(history, key=lambda record: record[valid_name("loss")])["epoch"]
    return {
        "best_epoch": best_epoch,
        "seconds_to_best": sum(record["seconds"] for record in history[:best_epoch]),
        "epochs": len(history),
        "updates": len(history) * -(-training_examples // batch_size),
        "seconds": seconds,
        "examples_per_s": len(history) * training_examples / seconds,
        "seq_acc": test["seq_acc"],
        "seq_acc_given_length": test["seq_acc_given_length"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--batched-batches", type=int, default=24, help="batches timed in the batched setting"
    )
    parser.add_argument("--single-examples", type=int, default=96, help="examples timed one at a time")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--converge", metavar="OUT_DIR", help="also train both settings (or reuse their runs) in OUT_DIR"
    )
    parser.add_argument("--split", default="simple", help="SCAN split of --converge (e.g. addprim_jump)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds of --converge")
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides of both --converge protocols (e.g. model.end_marker=true)",
    )
    parser.add_argument(
        "--batched-epochs", type=int, default=50, help="epoch cap of the batched runs (the config's)"
    )
    parser.add_argument(
        "--one-at-a-time-epochs",
        type=int,
        default=17,
        help="epoch cap of the batch-1 runs (17 add-jump epochs = 199,512 updates; the paper: 200,000)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cpu = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, {device}, {args.threads} thread(s), {os.cpu_count()} cores ({cpu})")
    speeds = measure(args, device)
    ratio = speeds["batched"] / speeds["one_at_a_time"]
    print(f"\n{'setting':22s} {'examples/s':>10s}")
    print(f"{'batched (' + str(args.batch_size) + ')':22s} {speeds['batched']:10.1f}")
    print(f"{'one at a time (1)':22s} {speeds['one_at_a_time']:10.1f}")
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(f"ratio: {ratio:.1f}x (target >= {TARGET_RATIO:.0f}x: {verdict})")
    if args.converge:
        converge(args)


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    main()
