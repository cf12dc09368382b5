"""Where a trained SCAN run translates wrong with the output length given, without writing into it.

Decodes the run's test set with the output length given and, for every command it gets wrong,
finds the first wrong step: the gold and the predicted action, the source word with the largest
attention at that step (and its weight), what that word's translation alone reads out
(``word_translations()``), and the command's template. Each failure is then put in one class:

* ``alignment``: the attended word's own readout is the predicted action (the right translation of
  the wrong word);
* ``mixing``: the attended word's own readout is the gold action (the right word, outweighed by
  what the rest of the attention reads out);
* ``other``: neither.

Usage: ``python scripts/scan_translation_errors.py RUN_DIR [--dump FILE.jsonl]`` (about 25 s for the
7,706 add-jump test commands on one CPU thread). The numbers of docs/results.md ("Why the options'
model translates wrong", issue 29) come from it.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from scan_stop_rules import (  # scripts/ is on sys.path when run as a script
    load_test_run,
    parse_rule,
    stop_rule_outcome,
    target_lengths,
)

from attnlab.attention.syntactic import ComposedWordEmbedding
from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.tasks import batching
from attnlab.tasks.vocab import Vocabulary


def template(words: list[str]) -> dict[str, str]:
    """The command's conjunction, the half holding "jump", and that half with the verb as ``X``."""
    for conjunction in ("and", "after"):
        if conjunction in words:
            cut = words.index(conjunction)
            halves = [words[:cut], words[cut + 1 :]]
            break
    else:
        conjunction, halves = "none", [words]
    where = [i for i, half in enumerate(halves) if "jump" in half]
    label = "both" if len(where) == 2 else ("first" if where == [0] else "second")
    if conjunction == "none":
        label = "only"
    jump_half = halves[where[0]] if where else []
    return {
        "conjunction": conjunction,
        "jump_half": label,
        "jump_part": " ".join("X" if w == "jump" else w for w in jump_half),
    }


def align_as(model: SyntacticAttentionSeq2Seq, source: Vocabulary, spec: str) -> None:
    """``WORD=W1,W2``: the alignment stream reads WORD as the mean of W1, W2's alignment embeddings."""
    word, _, others = spec.partition("=")
    embedding = model.alignment_embedding
    table = embedding.embedding if isinstance(embedding, ComposedWordEmbedding) else embedding
    ids = [source.token_to_id(w) for w in others.split(",")]
    with torch.no_grad():
        table.weight[source.token_to_id(word)] = table.weight[ids].mean(dim=0)
    if isinstance(embedding, ComposedWordEmbedding):
        embedding.composed[source.token_to_id(word)] = True
    print(f"alignment stream: {word} read as the mean of {others}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    parser.add_argument("--dump", type=Path, help="write one JSON line per failure")
    parser.add_argument(
        "--align-as",
        metavar="WORD=W1,W2",
        help="before decoding, give WORD the mean alignment embedding of W1, W2, … (in memory only)",
    )
    parser.add_argument(
        "--stop-rules",
        nargs="*",
        default=[],
        metavar="RULE",
        help="also decode with <eos>: none (plain greedy), tau=X (stop_threshold), rho=X (stop_lookahead)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    config, model, source, target, test = load_test_run(args.run_dir, args.checkpoint)
    assert isinstance(model, SyntacticAttentionSeq2Seq)
    if args.align_as:
        align_as(model, source, args.align_as)
    full = model.word_translations()  # [source words (+ end marker), target tokens]
    readouts = full.clone()
    readouts[:, model.eos_id] = 0.0
    word_reads = readouts.argmax(dim=-1)
    rows = list(source.tokens) + (["<end>"] if readouts.size(0) > len(source) else [])
    print(f"{args.run_dir}: word translations (top two, <eos> included):")
    for word in (
        "jump",
        "walk",
        "run",
        "look",
        "turn",
        "left",
        "right",
        "around",
        "opposite",
        "twice",
        "thrice",
        "and",
        "after",
        "<end>",
    ):
        if word in rows:
            probabilities, tokens = full[rows.index(word)].topk(2)
            shown = ", ".join(
                f"{target.tokens[t]} {p:.3f}" for p, t in zip(probabilities.tolist(), tokens.tolist())
            )
            print(f"  {word:9s} {shown}")
    failures = []
    total = 0
    batches = list(batching.batches(test.dataset, config.evaluation.batch_size, shuffle=False))
    for batch in batches:
        lengths = target_lengths(model, batch)
        decoded = model.decode_with_lengths(batch.source, batch.source_padding_mask, lengths)
        assert decoded.tokens is not None
        for b in range(batch.source.size(0)):
            total += 1
            n = int(lengths[b])
            gold = batch.target_output[b, :n]
            predicted = decoded.tokens[b, :n]
            wrong = (gold != predicted).nonzero()
            if len(wrong) == 0:
                continue
            step = int(wrong[0])
            words = [source.tokens[i] for i in batch.source[b][~batch.source_padding_mask[b]].tolist()]
            weights = decoded.attention[b, step]
            position = int(weights.argmax())
            word = words[position] if position < len(words) else "<end>"
            word_id = batch.source[b, position] if position < len(words) else readouts.size(0) - 1
            reads = int(word_reads[int(word_id)])
            gold_id, predicted_id = int(gold[step]), int(predicted[step])
            kind = "alignment" if reads == predicted_id else ("mixing" if reads == gold_id else "other")
            jump_mass = float(sum(weights[i] for i, w in enumerate(words) if w == "jump"))
            failures.append(
                {
                    "command": " ".join(words),
                    "step": step,
                    "length": n,
                    "gold": target.tokens[gold_id],
                    "predicted": target.tokens[predicted_id],
                    "attended": word,
                    "weight": round(float(weights[position]), 3),
                    "jump_mass": round(jump_mass, 3),
                    "attended_reads": target.tokens[reads],
                    "kind": kind,
                    **template(words),
                }
            )
    print(
        f"{len(failures)} of {total} wrong with the length given "
        f"({100 * (1 - len(failures) / total):.2f}% right)"
    )
    for key in ("kind", "conjunction", "jump_half", "jump_part"):
        print(f"by {key}: {Counter(f[key] for f in failures).most_common(20)}")
    pairs = Counter(f"{f['gold']}->{f['predicted']} on {f['attended']}" for f in failures)
    print(f"gold -> predicted on the attended word: {pairs.most_common(15)}")
    per_kind = Counter(f"{f['kind']}: {f['gold']}->{f['predicted']} on {f['attended']}" for f in failures)
    print(f"by kind: {per_kind.most_common(12)}")
    for rule in args.stop_rules:
        correct, _, _ = stop_rule_outcome(model, batches, config.evaluation.max_length, parse_rule(rule))
        print(f"<eos>, {rule}: {100 * correct / total:.2f}%", flush=True)
    if args.dump:
        args.dump.write_text("".join(json.dumps(f) + "\n" for f in failures))


if __name__ == "__main__":
    main()
