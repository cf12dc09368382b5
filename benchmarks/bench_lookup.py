"""Speed of the Lookup Tables system: training and evaluation examples/s of every attender.

Prints, side by side in one run, training examples/s (teacher-forced forward + backward + Adam
step) and evaluation examples/s (batched greedy decoding + metrics) of attnlab's
``RecurrentSeq2Seq`` with each attender and of a plain-PyTorch reference model of the same
architecture with scaled-dot attention (``benchmarks/reference_seq2seq.py``), then checks the
targets:

* attnlab's scaled-dot model is at least as fast as the reference (training and evaluation);
* Mix Attender training takes at most 1.6x the time of scaled-dot training;
* decoding is batched: one ``greedy_decode`` call per evaluation batch, looping over the steps
  only (checked with call counters on a short untimed pass).

Every model sees the same batches (generated Long Lookup Tables: training batches from the train
split, evaluation on the first ``--eval-examples`` of ``long5``, the longest inputs). The
reference starts from the same weights as attnlab's scaled-dot model and gets the same dropout
masks, so the two train along the same trajectory and decode the same number of steps. Models are
interleaved within each repeat (in a rotated order) so that machine noise hits all of them alike;
each repeat restarts from the initial weights, so repeats do identical work, and the best
(or ``--stat median``) time of the repeats is reported.

Usage: ``.venv/bin/python benchmarks/bench_lookup.py [--attenders mix scaled_dot] [--json out.json]``
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnlab.attention import ATTENDERS
from attnlab.evaluation.seq2seq import decoding_budget, evaluate_seq2seq, teacher_forced_loss
from attnlab.experiments.lookup.experiment import Seq2SeqModelConfig, build_model
from attnlab.io import atomic_write_json
from attnlab.tasks.batching import batches, encode_examples, epoch_generator
from attnlab.tasks.lookup_data import LookupDataConfig, load_splits
from attnlab.tasks.vocab import build_vocabularies
from attnlab.training.allocator import keep_freed_memory
from attnlab.training.trainer import make_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_seq2seq import ReferenceSeq2Seq, load_attnlab_state_dict  # noqa: E402
from reference_seq2seq import evaluate as reference_evaluate  # noqa: E402

REFERENCE = "reference"
WARMUP_BATCHES = 3
EVAL_SPLIT = "long5"
LEARNING_RATE = 1e-3
MIX_TARGET = 1.6
REFERENCE_TARGET = 1.0


@dataclass
class Contender:
    """A model under test and how to train / evaluate it."""

    name: str
    model: torch.nn.Module
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    evaluate: Callable[[torch.nn.Module, list], dict[str, float]]
    initial_state: dict[str, torch.Tensor] = field(init=False)
    train_times: list[float] = field(default_factory=list)
    eval_times: list[float] = field(default_factory=list)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    decode_steps: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.initial_state = copy.deepcopy(self.model.state_dict())

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--attenders",
        nargs="+",
        default=list(ATTENDERS),
        choices=list(ATTENDERS),
        metavar="NAME",
        help=f"attnlab attenders to time (default: {' '.join(ATTENDERS)})",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="training batch size (default 64)")
    parser.add_argument(
        "--train-batches",
        type=int,
        default=40,
        help=f"timed training batches per repeat, after {WARMUP_BATCHES} warm-up batches (default 40)",
    )
    parser.add_argument(
        "--eval-examples",
        type=int,
        default=2000,
        help=f"evaluation examples, the first of the {EVAL_SPLIT} split (default 2000)",
    )
    parser.add_argument(
        "--eval-batch-size",
        type=int,
        default=500,
        help="evaluation batch size (default 500, attnlab's evaluation default)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per model (default 5)")
    parser.add_argument(
        "--stat",
        choices=["best", "median"],
        default="best",
        help="how to summarise the repeats (default: best, i.e. the shortest time)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    for name in ("batch_size", "train_batches", "eval_examples", "eval_batch_size", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    args.attenders = list(dict.fromkeys(args.attenders))
    return args


# ------------------------------------------------------------------------------------ set-up


def load_data(args: argparse.Namespace):
    splits = load_splits(LookupDataConfig())
    source_vocab, target_vocab = build_vocabularies(splits["train"])
    train = encode_examples(splits["train"], source_vocab, target_vocab)
    evaluation = encode_examples(splits[EVAL_SPLIT][: args.eval_examples], source_vocab, target_vocab)
    needed = WARMUP_BATCHES + args.train_batches
    train_batches: list = []
    epoch = 0
    while len(train_batches) < needed:  # more batches than one epoch holds: take the next epochs'
        generator = epoch_generator(0, epoch)
        train_batches += batches(train, args.batch_size, shuffle=True, generator=generator, drop_last=True)
        epoch += 1
    eval_batches = list(batches(evaluation, args.eval_batch_size, shuffle=False))
    return source_vocab, target_vocab, train_batches[:needed], eval_batches


def build_contenders(args, source_vocab, target_vocab) -> tuple[list[Contender], int, int]:
    """attnlab's models (one per attender) and the reference; returns the two parameter counts."""
    contenders = []

    def attnlab_eval(model, eval_batches):
        return evaluate_seq2seq(model, eval_batches, torch.device("cpu"))

    for name in args.attenders:
        torch.manual_seed(0)
        model = build_model(Seq2SeqModelConfig(attender=name), source_vocab, target_vocab)
        contenders.append(Contender(name, model, teacher_forced_loss, attnlab_eval))
    # The reference starts from the weights of attnlab's scaled-dot model.
    torch.manual_seed(0)
    twin = build_model(Seq2SeqModelConfig(attender="scaled_dot"), source_vocab, target_vocab)
    reference = ReferenceSeq2Seq(
        len(source_vocab),
        len(target_vocab),
        embedding_dim=64,
        hidden_dim=128,
        dropout=0.5,
        pad_id=target_vocab.pad_id,
        sos_id=target_vocab.sos_id,
        eos_id=target_vocab.eos_id,
    )
    load_attnlab_state_dict(reference, twin.state_dict())

    def reference_loss(model, b):
        return model.loss(b.source, b.source_padding_mask, b.target_input, b.target_output)

    contenders.append(Contender(REFERENCE, reference, reference_loss, reference_evaluate))
    twin_count = sum(p.numel() for p in twin.parameters())
    reference_count = sum(p.numel() for p in reference.parameters())
    return contenders, twin_count, reference_count


# ----------------------------------------------------------------------------------- timing


def time_training(contender: Contender, train_batches: list) -> float:
    model = contender.model
    model.load_state_dict(contender.initial_state)
    model.train()
    optimizer = make_optimizer(model, LEARNING_RATE)
    torch.manual_seed(0)  # the same dropout masks for every model (and every repeat)

    def step(batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        contender.loss(model, batch).backward()
        optimizer.step()

    for batch in train_batches[:WARMUP_BATCHES]:
        step(batch)
    start = time.perf_counter()
    for batch in train_batches[WARMUP_BATCHES:]:
        step(batch)
    return time.perf_counter() - start


def time_evaluation(contender: Contender, eval_batches: list) -> float:
    """Evaluate the just-trained model; records the metrics and the decoded steps per batch."""
    model = contender.model
    steps: list[int] = []
    decode = model.greedy_decode

    def counting_decode(*args, **kwargs):
        output = decode(*args, **kwargs)
        tokens = output if isinstance(output, torch.Tensor) else output.tokens
        steps.append(tokens.size(1))
        return output

    model.greedy_decode = counting_decode  # one Python call per batch: negligible
    try:
        start = time.perf_counter()
        metrics = contender.evaluate(model, eval_batches)
        elapsed = time.perf_counter() - start
    finally:
        del model.greedy_decode
    contender.eval_metrics = metrics
    contender.decode_steps = steps
    return elapsed


def check_batched_decoding(contender: Contender, batch) -> tuple[bool, str]:
    """Count calls during one evaluation: one ``greedy_decode`` call for the batch, and inside
    it one decoder (and attender) call per decoded step, each on the whole batch."""
    model = contender.model.eval()
    is_reference = contender.name == REFERENCE
    recurrent = model.decoder.cell if is_reference else model.decoder
    calls: dict[str, list[int]] = {"greedy_decode": [], "decoder": [], "attender": []}
    steps: list[int] = []
    decoding = [False]

    def recorder(name: str):
        def hook(_module, inputs):
            if decoding[0]:
                calls[name].append(inputs[0].size(0))

        return hook

    hooks = [recurrent.register_forward_pre_hook(recorder("decoder"))]
    if not is_reference:
        hooks.append(model.attender.register_forward_pre_hook(recorder("attender")))
    decode = model.greedy_decode

    def counting_decode(source, *args, **kwargs):
        calls["greedy_decode"].append(source.size(0))
        decoding[0] = True
        try:
            output = decode(source, *args, **kwargs)
        finally:
            decoding[0] = False
        steps.append((output if isinstance(output, torch.Tensor) else output.tokens).size(1))
        return output

    model.greedy_decode = counting_decode
    try:
        if is_reference:
            reference_evaluate(model, [batch])
        else:
            evaluate_seq2seq(model, [batch], torch.device("cpu"))
    finally:
        del model.greedy_decode
        for hook in hooks:
            hook.remove()
    size, limit = len(batch), decoding_budget(batch.source.size(1))
    ok = (
        calls["greedy_decode"] == [size]
        and 1 <= steps[0] <= limit
        and len(calls["decoder"]) == steps[0]
        and (is_reference or len(calls["attender"]) == steps[0])
        and all(n == size for n in calls["decoder"] + calls["attender"])
    )
    return ok, (
        f"1 batch of {size}: {len(calls['greedy_decode'])} greedy_decode call, {steps[0]} steps, "
        f"{len(calls['decoder'])} decoder calls, all on {size} examples"
    )


def first_rows(batch, n: int):
    """The first ``n`` examples of ``batch`` (same padded widths)."""
    return type(batch)(
        source=batch.source[:n],
        source_padding_mask=batch.source_padding_mask[:n],
        target_input=batch.target_input[:n],
        target_output=batch.target_output[:n],
        gold_attention=None if batch.gold_attention is None else batch.gold_attention[:n],
    )


def summarise(times: list[float], stat: str) -> float:
    return min(times) if stat == "best" else statistics.median(times)


# ----------------------------------------------------------------------------------- report


def machine_description(args: argparse.Namespace) -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "cpu": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "cpu_busy_before_start": cpu_busy_fraction(),
    }


def cpu_busy_fraction(seconds: float = 0.5) -> float | None:
    """Fraction of all CPUs' time spent busy over ``seconds`` while this process sleeps (Linux)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle  # user..steal (guest time is already in user)

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return None if total <= 0 else 1.0 - (idle1 - idle0) / total


def ratio_line(
    label: str, value: float | None, comparison: str, target: float, missing: str
) -> tuple[str, bool | None]:
    if value is None:
        return f"{label}: skipped ({missing})", None
    ok = value >= target if comparison == ">=" else value <= target
    return f"{label}: {value:.2f}x (target {comparison} {target}): {'PASS' if ok else 'FAIL'}", ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    machine = machine_description(args)
    print(f"attnlab Lookup Tables benchmark, {machine['date']}")
    print(
        f"machine: {machine['cpu_count']} CPUs ({machine['usable_cpus']} usable), {machine['cpu']}, "
        f"{machine['platform']}; python {machine['python']}, torch {machine['torch']}, "
        f"{machine['threads']} thread{'s' if machine['threads'] != 1 else ''}"
    )
    busy = machine["cpu_busy_before_start"]
    load = machine["load_average_at_start"]
    busy_text = "?" if busy is None else f"{100 * busy:.0f}%"
    print(
        f"other load: CPUs {busy_text} busy in the 0.5 s before the start; "
        f"load average {' '.join(f'{x:.2f}' for x in load or [])}"
    )

    if busy is not None and busy > 0.25 and machine["threads"] > 1:
        print(
            f"warning: other processes kept the CPUs {100 * busy:.0f}% busy just before the start; with "
            f"{machine['threads']} threads, torch's parallel regions wait for descheduled threads, so "
            "absolute timings can be several times slower and noisier (the ratios, measured side by "
            "side, suffer less); --threads 1 is steadier on a busy machine"
        )
    source_vocab, target_vocab, train_batches, eval_batches = load_data(args)
    n_train = sum(len(b) for b in train_batches[WARMUP_BATCHES:])
    n_eval = sum(len(b) for b in eval_batches)
    train_width = max(b.source.size(1) for b in train_batches)
    eval_width = eval_batches[0].source.size(1)
    repeats = f"{args.repeats} repeat{'s' if args.repeats != 1 else ''}"
    print(
        f"data: generated Long Lookup Tables; training {args.train_batches} batches of {args.batch_size} "
        f"(after {WARMUP_BATCHES} warm-up batches, source length <= {train_width}); "
        f"evaluation {n_eval} {EVAL_SPLIT} examples in batches of {args.eval_batch_size} "
        f"(source length {eval_width}, decoding <= {decoding_budget(eval_width)} steps); "
        f"{repeats}, {args.stat} reported"
    )

    contenders, twin_count, reference_count = build_contenders(args, source_vocab, target_vocab)
    print(f"parameters: attnlab scaled_dot {twin_count:,}, reference {reference_count:,}")
    assert twin_count == reference_count, (
        f"the reference ({reference_count} parameters) is not the same architecture as attnlab's "
        f"scaled-dot model ({twin_count})"
    )

    batched: dict[str, tuple[bool, str]] = {}
    for contender in contenders:
        sample = first_rows(eval_batches[0], args.batch_size)
        batched[contender.name] = check_batched_decoding(contender, sample)

    started = time.perf_counter()
    for repeat in range(args.repeats):
        shift = repeat % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            contender.train_times.append(time_training(contender, train_batches))
            contender.eval_times.append(time_evaluation(contender, eval_batches))
        print(f"  repeat {repeat + 1}/{args.repeats} done ({time.perf_counter() - started:.0f}s)", flush=True)

    by_name = {c.name: c for c in contenders}
    train_time = {c.name: summarise(c.train_times, args.stat) for c in contenders}
    eval_time = {c.name: summarise(c.eval_times, args.stat) for c in contenders}
    ref_train, ref_eval = n_train / train_time[REFERENCE], n_eval / eval_time[REFERENCE]
    rows = []
    for contender in contenders:
        name = contender.name
        train_speed, eval_speed = n_train / train_time[name], n_eval / eval_time[name]
        rows.append(
            {
                "model": name if name == REFERENCE else f"attnlab {name}",
                "parameters": contender.parameters,
                "train_examples_per_s": train_speed,
                "eval_examples_per_s": eval_speed,
                "train_time_vs_scaled_dot": (
                    train_time[name] / train_time["scaled_dot"] if "scaled_dot" in train_time else None
                ),
                "train_speed_vs_reference": train_speed / ref_train,
                "eval_speed_vs_reference": eval_speed / ref_eval,
                "decode_steps_per_batch": contender.decode_steps,
                "eval_seq_acc": contender.eval_metrics.get("seq_acc"),
                "train_times_s": contender.train_times,
                "eval_times_s": contender.eval_times,
            }
        )

    header = (
        "model",
        "params",
        "train ex/s",
        "eval ex/s",
        "train time ÷ scaled_dot",
        "vs reference (train / eval)",
        "decode steps",
    )
    table = [header]
    for row in rows:
        ratio = row["train_time_vs_scaled_dot"]
        steps = row["decode_steps_per_batch"]
        table.append(
            (
                row["model"],
                f"{row['parameters']:,}",
                f"{row['train_examples_per_s']:,.0f}",
                f"{row['eval_examples_per_s']:,.0f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                f"{row['train_speed_vs_reference']:.2f}x / {row['eval_speed_vs_reference']:.2f}x",
                f"{min(steps)}-{max(steps)}" if min(steps) != max(steps) else str(steps[0]),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print()
    for i, line in enumerate(table):
        cells = [cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in enumerate(zip(line, widths))]
        print(" | ".join(cells))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    print()

    checks = []
    has_sd, has_mix = "scaled_dot" in by_name, "mix" in by_name
    sd_train = ref_eval_ratio = mix_ratio = None
    if has_sd:
        sd_train = (n_train / train_time["scaled_dot"]) / ref_train
        ref_eval_ratio = (n_eval / eval_time["scaled_dot"]) / ref_eval
    if has_sd and has_mix:
        mix_ratio = train_time["mix"] / train_time["scaled_dot"]
    no_sd, no_pair = "scaled_dot not benchmarked", "needs both mix and scaled_dot"
    for line_ok in (
        ratio_line("attnlab scaled_dot / reference train speed", sd_train, ">=", REFERENCE_TARGET, no_sd),
        ratio_line(
            "attnlab scaled_dot / reference eval speed", ref_eval_ratio, ">=", REFERENCE_TARGET, no_sd
        ),
        ratio_line("mix train time / scaled_dot train time", mix_ratio, "<=", MIX_TARGET, no_pair),
    ):
        print(line_ok[0])
        checks.append(line_ok)
    attnlab_batched = {name: result for name, result in batched.items() if name != REFERENCE}
    all_batched = all(ok for ok, _ in attnlab_batched.values())
    failing = [name for name, (ok, _) in attnlab_batched.items() if not ok]
    example = attnlab_batched.get("mix") or next(iter(attnlab_batched.values()))
    print(
        f"decoding batched: {'yes' if all_batched else 'NO'} (greedy_decode loops over steps only; "
        f"{len(attnlab_batched) - len(failing)}/{len(attnlab_batched)} attnlab models checked"
        + (f", failing: {', '.join(failing)}" if failing else "")
        + f"; e.g. {example[1]})"
    )

    if args.json is not None:
        atomic_write_json(
            args.json,
            {
                "machine": machine,
                "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "train_examples_timed": n_train,
                "eval_examples": n_eval,
                "parameters": {"attnlab_scaled_dot": twin_count, "reference": reference_count},
                "results": rows,
                "checks": {
                    "scaled_dot_vs_reference_train": sd_train,
                    "scaled_dot_vs_reference_eval": ref_eval_ratio,
                    "mix_vs_scaled_dot_train_time": mix_ratio,
                    "decoding_batched": all_batched,
                    "decoding_batched_details": {name: detail for name, (_, detail) in batched.items()},
                },
            },
        )
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    sys.exit(main())
