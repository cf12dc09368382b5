"""Probe: does Syntactic Attention's alignment collapse onto the sentence-final word on English–French?

Trains the ``mt_eng_fra`` model for ``--steps`` updates (batches and Adam as the config says) and
prints, every 50 updates, the mean training loss, the mean attention entropy (nats) over the real
target steps, and the share of steps whose attention peaks on the last source word. The numbers of
docs/results.md ("English–French … first BLEU") come from these settings:

* ``--mode paper``: the paper's training (add ``training.learning_rate=0.00015`` for its rate);
* ``--mode uniform --switch 300``: uniform alignment for the first 300 updates
  (``SyntacticAttentionSeq2Seq.uniform_alignment``; ``training.uniform_alignment_epochs`` in a run);
* ``--mode scaled``: scores divided by √(key size), as in scaled dot-product attention;
* ``--mode warmup --switch 1000``: the learning rate rises linearly over the first 1000 updates;
* ``--mode ramp --switch 600``: the scores are multiplied by ``min(1, step / 600)``.

Usage: ``python scripts/probe_alignment_collapse.py --mode uniform --switch 300 --steps 800``
(about 10 minutes on one CPU thread; data from ``../shared/data/mt-eng-fra``).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from attnlab.config import apply_overrides
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.scan import experiment as scan
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.tasks import scan_data
from attnlab.tasks.batching import bucketed_batches
from attnlab.tasks.examples import Seq2SeqBatch
from attnlab.training.trainer import make_optimizer, seed_everything

MODES = ("paper", "uniform", "scaled", "warmup", "ramp")
REPORT_EVERY = 50


def score_multiplier(mode: str, step: int, switch: int, key_dim: int) -> float:
    if mode == "scaled":
        return 1.0 / math.sqrt(key_dim)
    if mode == "ramp":
        return min(1.0, step / switch)
    return 1.0


def attention_statistics(
    model: SyntacticAttentionSeq2Seq, batch: Seq2SeqBatch, weights: torch.Tensor
) -> tuple[float, float]:
    """Mean entropy of the attention and the share of steps peaking on the last word (real steps)."""
    real = batch.target_output != model.pad_id
    entropy = -(weights.clamp_min(1e-12).log() * weights).sum(-1)[real].mean()
    last = (~batch.source_padding_mask).sum(1, keepdim=True) - 1
    on_last = (weights.argmax(-1) == last)[real].float().mean()
    return float(entropy), float(on_last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="key=value overrides of mt_eng_fra")
    parser.add_argument("--mode", choices=MODES, default="paper")
    parser.add_argument(
        "--switch", type=int, default=300, help="updates in the uniform / warm-up / ramp phase"
    )
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = scan.EXPERIMENT.parse_config(apply_overrides(resolve_config("mt_eng_fra", []), args.overrides))
    splits = scan_data.load_splits(config.data)
    source, target = scan_data.build_vocabularies(
        splits["train"].examples + splits["validation"].examples, config.data.unknown_words
    )
    train = scan_data.encode_split(splits["train"], source, target, "train")
    seed_everything(config.training.seed)
    model = scan.build_model(config.model, source, target)
    assert isinstance(model, SyntacticAttentionSeq2Seq)
    score = model.alignment.score
    step = 0
    model.alignment.score = lambda query, keys, state: (
        score(query, keys, state) * score_multiplier(args.mode, step, args.switch, keys.size(-1))
    )
    optimizer = make_optimizer(model, config.training.learning_rate)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: min(1.0, (done + 1) / args.switch) if args.mode == "warmup" else 1.0
    )
    generator = torch.Generator().manual_seed(config.training.seed)
    model.train()
    start, running = time.time(), 0.0
    while step < args.steps:
        for batch in bucketed_batches(
            train.dataset, config.training.batch_size, generator, config.training.bucket_pool
        ):
            model.uniform_alignment = args.mode == "uniform" and step < args.switch
            output = model(batch.source, batch.source_padding_mask, batch.target_input)
            loss = F.cross_entropy(
                output.logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=model.pad_id
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.training.gradient_clip or math.inf)
            optimizer.step()
            warmup.step()
            running += loss.item()
            step += 1
            if step % REPORT_EVERY == 0:
                entropy, on_last = attention_statistics(model, batch, output.attention.detach())
                print(
                    f"step {step} loss {running / REPORT_EVERY:.3f} attention entropy {entropy:.3f} "
                    f"peak on last word {on_last:.2f} ({time.time() - start:.0f} s)",
                    flush=True,
                )
                running = 0.0
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
