"""Where a trained Syntactic Attention run with ``end_marker`` and ``stop_from_attention`` stops
early, and whether a coverage gate on the stop would help; post hoc, without writing into the run.

Syntactic Attention never reads its own outputs, so one pass of ``max_length`` alignment steps
gives every step greedy decoding could take, whatever it emits; each stop rule is then a choice of
the first step allowed to emit ``<eos>`` (the other steps emit the most probable other token). On
the commands right with the output length given that plain greedy decoding gets wrong by stopping
early, it prints:

* class (a), a part skipped: some primitive word (``--words``: the words that say an action) has
  received less than 0.5 of the attention, summed over the steps before the stop; class (b): every
  primitive word attended, a repetition cut short — and, for (b), the repetition words of the
  conjunct being decoded at the stop (the one holding the word most attended just before it);
* the attention on the end marker at the stop, and the output length at the stop against the
  target's;

then the exact match with ``<eos>`` of these stop rules, none of which reads the target:

* ``plain``: ``<eos>`` when it is the most probable token (``α_end`` outweighs the best action);
* ``tau=τ``: ``evaluation.stop_threshold=τ``, ``<eos>`` exactly when ``α_end ≥ τ``;
* ``cov_all=c``: plain, and only once every source word (not the end marker) has received at least
  ``c`` of the attention summed over the steps so far (a coverage gate; the idea of tracking
  coverage is Tu et al. 2016, "Modeling Coverage for Neural Machine Translation");
* ``cov_words=c``: the same over the primitive words only;
* ``persist=k:κ``: plain, and only when the end marker holds at least ``κ`` of the attention summed
  over the next ``k`` steps (the alignment stays at the end);
* ``residue<θ``: plain, and only when the words' share of the attention (``1 − α_end``) reads out
  its best action with probability below ``θ`` (nothing left to say).

Usage: ``python scripts/scan_stop_coverage.py RUN_DIR [--split test|validation]`` (about 30 s for
the 7,706 add-jump test commands on one CPU thread). The numbers of docs/results.md on the early
stops of the length split come from it.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from scan_stop_rules import load_test_run, target_lengths  # scripts/ is on sys.path as a script

from attnlab.models.syntactic_attention import SyntacticAttentionSeq2Seq
from attnlab.tasks import batching
from attnlab.tasks.scan_data import encode_split, load_splits

REPETITIONS = ("twice", "thrice", "around", "opposite")


@dataclass
class Trajectory:
    """Every step of one command's decoding: attention ``[T, n + 1]`` (last: the end marker), the
    plain greedy stop, the most probable other token and how sure the words' share is of it."""

    words: list[str]
    attention: torch.Tensor
    plain_stop: torch.Tensor
    others: torch.Tensor
    residue: torch.Tensor
    gold: torch.Tensor

    def first(self, allowed: torch.Tensor) -> int:
        steps = torch.nonzero(allowed)
        return int(steps[0]) if len(steps) else allowed.size(0)

    @property
    def right_given_length(self) -> bool:
        length = self.gold.size(0)
        return length <= self.others.size(0) and bool((self.others[:length] == self.gold).all())


def trajectories(run_dir: Path, split: str) -> list[Trajectory]:
    config, model, source, target, data = load_test_run(run_dir, "best")
    if not isinstance(model, SyntacticAttentionSeq2Seq) or not model.stop_from_attention:
        raise SystemExit(f"{run_dir}: needs Syntactic Attention with end_marker and stop_from_attention")
    if split != "test":
        data = encode_split(load_splits(config.data)[split], source, target, split)
    steps = config.evaluation.max_length
    result = []
    for batch in batching.batches(data.dataset, config.evaluation.batch_size, shuffle=False):
        with torch.no_grad():  # the decoder never reads target_input's tokens, only its width
            output = model(batch.source, batch.source_padding_mask, batch.source.new_zeros(len(batch), steps))
        logits, attention = output.logits, output.attention
        plain = (logits + model.never_predicted).argmax(dim=-1) == model.eos_id
        best, others = (logits + model.never_predicted_given_length).max(dim=-1)
        real = (~batch.source_padding_mask).sum(dim=1)
        is_end = torch.arange(attention.size(-1)) == real.view(-1, 1, 1)
        words_mass = (attention * ~is_end).sum(dim=-1)  # 1 − α_end without the rounding of 1 − ~1
        residue = (best - words_mass.clamp_min(1e-30).log()).exp()
        for b, (n, length) in enumerate(zip(real.tolist(), target_lengths(model, batch).tolist())):
            result.append(
                Trajectory(
                    [source.id_to_token(int(i)) for i in batch.source[b, :n]],
                    attention[b, :, : n + 1],
                    plain[b],
                    others[b],
                    residue[b],
                    batch.target_output[b, :length],
                )
            )
    return result


Rule = Callable[[Trajectory], torch.Tensor]


def coverage_gate(c: float, words: set[str] | None) -> Rule:
    def allowed(t: Trajectory) -> torch.Tensor:
        kept = [j for j, w in enumerate(t.words) if words is None or w in words]
        covered = (t.attention[:, kept].cumsum(dim=0) >= c).all(dim=-1)
        return t.plain_stop & covered

    return allowed


def threshold(tau: float) -> Rule:
    """``evaluation.stop_threshold=τ``: ``<eos>`` exactly when ``p(<eos>) = α_end ≥ τ``."""

    def allowed(t: Trajectory) -> torch.Tensor:
        return t.attention[:, -1] >= tau

    return allowed


def persistence_gate(k: int, kappa: float) -> Rule:
    def allowed(t: Trajectory) -> torch.Tensor:
        end = t.attention[:, -1]
        padded = torch.cat([end, end.new_ones(k)])  # past the budget counts as staying at the end
        ahead = padded.unfold(0, k, 1)[1 : end.size(0) + 1].sum(dim=-1)
        return t.plain_stop & (ahead >= kappa)

    return allowed


def residue_gate(theta: float) -> Rule:
    def allowed(t: Trajectory) -> torch.Tensor:
        return t.plain_stop & (t.residue < theta)

    return allowed


def outcome(runs: list[Trajectory], rule: Rule) -> tuple[float, int, int]:
    """Exact match (percent) and, among the commands right with the length given, stops early/late."""
    correct, early, late = 0, 0, 0
    for t in runs:
        stop, length = t.first(rule(t)), t.gold.size(0)
        if t.right_given_length:
            correct += stop == length
            early += stop < length
            late += stop > length
    return 100 * correct / len(runs), early, late


def quantiles(values: list[float]) -> str:
    levels = torch.tensor([0, 0.1, 0.5, 0.9, 1.0], dtype=torch.float64)
    points = torch.tensor(values, dtype=torch.float64).quantile(levels)
    return "min/10%/median/90%/max " + " ".join(f"{float(v):.4g}" for v in points)


def describe_early_stops(runs: list[Trajectory], words: set[str]) -> None:
    early = [t for t in runs if t.right_given_length and t.first(t.plain_stop) < t.gold.size(0)]
    print(f"right with the length given, stopping early with plain greedy: {len(early)}")
    if not early:
        return
    classes: Counter[str] = Counter()
    parts: Counter[tuple[str, str]] = Counter()
    on_end: list[float] = []
    at_true_end: list[float] = []
    before_true_end: Counter[int] = Counter()
    stops_at_true_end = 0
    lengths: Counter[tuple[int, int]] = Counter()
    for t in early:
        stop = t.first(t.plain_stop)
        covered = t.attention[:stop].sum(dim=0)
        least = min((float(v) for w, v in zip(t.words, covered.tolist()) if w in words), default=1.0)
        classes["(a) a primitive word below 0.5" if least < 0.5 else "(b) every primitive word >= 0.5"] += 1
        cut = next((t.words.index(w) for w in ("and", "after") if w in t.words), None)
        attended = int(t.attention[stop - 1, :-1].argmax())
        if cut is None:
            part, position = t.words, "single"
        else:
            first = attended < cut if t.words[cut] == "and" else attended > cut
            part = t.words[:cut] if attended < cut else t.words[cut + 1 :]
            position = "first-decoded conjunct" if first else "second-decoded conjunct"
        parts[(position, " ".join(w for w in part if w in REPETITIONS) or "-")] += 1
        on_end.append(float(t.attention[stop, -1]))
        at_true_end.append(float(t.attention[t.gold.size(0), -1]))
        stops_at_true_end += bool(t.plain_stop[t.gold.size(0)])
        before_true_end[int(t.plain_stop[: t.gold.size(0)].sum())] += 1
        lengths[(stop, t.gold.size(0))] += 1
    print("  classes:", dict(classes))
    print("  conjunct decoded at the stop, its repetition words:", dict(parts.most_common()))
    print("  attention on the end marker at the stop:", quantiles(on_end))
    print("  attention on the end marker at the true end:", quantiles(at_true_end))
    print(f"  plain greedy would stop at the true end: {stops_at_true_end}; steps before it where it would")
    print("  stop (count: commands):", dict(sorted(before_true_end.items())))
    stops: Counter[int] = Counter()
    targets: Counter[int] = Counter()
    for (stop, length), count in lengths.items():
        stops[stop] += count
        targets[length] += count
    print("  output length at the stop:", dict(sorted(stops.items())))
    print("  target length:", dict(sorted(targets.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--split", default="test", choices=("test", "validation"))
    parser.add_argument("--words", default="walk,look,run,jump,left,right", help="the primitive words")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = trajectories(args.run_dir, args.split)
    words = set(args.words.split(","))
    print(f"{args.run_dir} ({args.split}): {len(runs)} commands")
    describe_early_stops(runs, words)
    rules: dict[str, Rule] = {"plain": lambda t: t.plain_stop}
    rules |= {f"tau={tau}": threshold(tau) for tau in (0.99, 0.999, 0.9999)}
    rules |= {f"cov_all={c}": coverage_gate(c, None) for c in (0.01, 0.1, 0.5)}
    rules |= {f"cov_words={c}": coverage_gate(c, words) for c in (0.5, 0.9, 1.5, 2.0)}
    rules |= {f"persist={k}:{kappa}": persistence_gate(k, kappa) for k in (2, 3, 5) for kappa in (0.05, 0.2)}
    rules |= {f"residue<{theta}": residue_gate(theta) for theta in (0.9, 0.95, 0.99, 0.999)}
    for name, rule in rules.items():
        accuracy, early, late = outcome(runs, rule)
        print(f"{name}: <eos> {accuracy:.2f}%, stop-only failures {early} early, {late} late", flush=True)


if __name__ == "__main__":
    main()
