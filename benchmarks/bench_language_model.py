"""Speed of the Daniluk et al. (2017) language models: training tokens/s side by side.

Prints, in one run, training tokens/s (forward + backward + Adam step on one BPTT segment of
``--batch`` streams × ``--bptt`` steps, state carried between segments) of the LSTM baseline and
of every attentive model at the same hidden size, and each model's ratio to the baseline. Target:
Key-Value-Predict ≥ 0.7× the LSTM baseline. Then, when WikiText-2 is present
(``../shared/data/wikitext-2``), evaluation perplexity of the (untrained) Key-Value-Predict model
over its whole test set, streamed segment by segment, with the peak device memory (the corpus
stays on the CPU).

Models are interleaved within each repeat so that machine noise hits all of them alike; the best
time of the repeats is reported. Segments hold random tokens with a document start every ~200
steps per stream (WikiText-2's documents are ~3,400 tokens), so the LSTM's split-at-reset path is
exercised.

Usage: ``.venv/bin/python benchmarks/bench_language_model.py [--device cuda] [--hidden 300]``
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from attnlab.evaluation.perplexity import evaluate_perplexity, segment_loss
from attnlab.models.language_model import LanguageModel, output_parts
from attnlab.tasks.corpus import (
    LMBatch,
    build_lm_vocabulary,
    count_words,
    encode_corpus_file,
    make_streams,
    segments,
)
from attnlab.training.allocator import keep_freed_memory
from attnlab.training.trainer import make_optimizer

MODELS = {
    "lstm": {"variant": "lstm"},
    "attention L=10": {"variant": "attention", "window": 10},
    "key_value L=10": {"variant": "key_value", "window": 10},
    "key_value_predict L=5": {"variant": "key_value_predict", "window": 5},
    "key_value_predict L=15": {"variant": "key_value_predict", "window": 15},
    "4-gram": {"variant": "ngram", "ngram": 4},
}
TARGET = ("key_value_predict L=5", 0.7)
WIKITEXT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "wikitext-2"


def _segments(args: argparse.Namespace, device: torch.device) -> list[LMBatch]:
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, args.bptt)
    result = []
    for _ in range(args.segments):
        resets = torch.rand(shape, generator=generator) < 1 / 200
        inputs = torch.randint(3, args.vocab, shape, generator=generator)
        targets = torch.randint(3, args.vocab, shape, generator=generator)
        result.append(LMBatch(inputs, targets, resets).to(device))
    return result


def _train_time(model: LanguageModel, batches: list[LMBatch], device: torch.device) -> float:
    optimizer = make_optimizer(model, 1e-3)
    state = None
    _sync(device)
    started = time.perf_counter()
    for batch in batches:
        output = model(batch.inputs, batch.resets, state)
        state = model.detach_state(output.state)
        nll, count = segment_loss(output.logits, batch)
        optimizer.zero_grad(set_to_none=True)
        (nll / count).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
    _sync(device)
    return time.perf_counter() - started


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _hidden(hidden: int, config: dict) -> int:
    parts = output_parts(config["variant"], config.get("ngram", 4))
    return hidden // parts * parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hidden", type=int, default=300)
    parser.add_argument("--embedding", type=int, default=300)
    parser.add_argument("--vocab", type=int, default=33278)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--segments", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-eval", action="store_true", help="skip the WikiText-2 evaluation pass")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(
        f"device {device} "
        f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor()})"
    )
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, vocab {args.vocab}, "
        f"batch {args.batch}, "
        f"bptt {args.bptt}, hidden {args.hidden} (rounded down to a multiple of the parts)"
    )
    batches = _segments(args, device)
    models = {}
    for name, config in MODELS.items():
        torch.manual_seed(0)
        models[name] = LanguageModel(
            args.vocab, embedding_dim=args.embedding, hidden_dim=_hidden(args.hidden, config), **config
        ).to(device)
        _train_time(models[name], batches[:2], device)  # warm-up
    best = {name: float("inf") for name in models}
    names = list(models)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            best[name] = min(best[name], _train_time(models[name], batches, device))
    tokens = args.batch * args.bptt * args.segments
    baseline = tokens / best["lstm"]
    print(f"\n{'model':26s} {'hidden':>6s} {'train tokens/s':>15s} {'vs LSTM':>8s}")
    for name in names:
        rate = tokens / best[name]
        print(f"{name:26s} {models[name].hidden_dim:6d} {rate:15,.0f} {rate / baseline:8.2f}")
    ratio = tokens / best[TARGET[0]] / baseline
    verdict = "OK" if ratio >= TARGET[1] else "MISSED"
    print(f"\ntarget: {TARGET[0]} >= {TARGET[1]}x LSTM training tokens/s: {ratio:.2f}x {verdict}")
    if not args.no_eval and WIKITEXT.is_dir():
        _evaluation(models["key_value_predict L=5"], args, device)


def _evaluation(model: LanguageModel, args: argparse.Namespace, device: torch.device) -> None:
    """Perplexity over the WikiText-2 test set, streamed; the model is untrained, so only speed and
    memory matter. The corpus stays on the CPU."""
    vocabulary = build_lm_vocabulary(count_words(WIKITEXT / "train.txt"))
    corpus = encode_corpus_file(WIKITEXT / "test.txt", vocabulary)
    if len(vocabulary) != model.vocab_size:
        model = LanguageModel(
            len(vocabulary),
            variant="key_value_predict",
            embedding_dim=args.embedding,
            hidden_dim=model.hidden_dim,
            window=5,
        ).to(device)
    streams = make_streams(
        corpus, args.batch, eos_id=vocabulary.eos_id, pad_id=vocabulary.pad_id, layout="auto"
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    started = time.perf_counter()
    metrics = evaluate_perplexity(model, segments(streams, args.bptt), device, attention_statistics=True)
    _sync(device)
    seconds = time.perf_counter() - started
    peak = (
        f", peak device memory {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB"
        if device.type == "cuda"
        else ""
    )
    print(
        f"\nWikiText-2 test, streamed ({metrics['tokens']:,} tokens, {streams.batch_size} streams x "
        f"{streams.length} steps): {metrics['tokens'] / seconds:,.0f} tokens/s{peak}; "
        f"untrained perplexity {metrics['perplexity']:.0f} (vocabulary {len(vocabulary):,})"
    )


if __name__ == "__main__":
    keep_freed_memory()  # as the CLI does
    torch.set_num_threads(max(1, torch.get_num_threads()))
    main()
