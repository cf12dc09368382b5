"""Run trees as attnlab wrote them before issue 24 (the legacy metric names ``train_loss`` and
``validation_<metric>`` in ``metrics.jsonl``), one per paper's recipe, in the recipes' layouts.

Only the standard library and PyYAML are used, so that the same trees can be built for the code of
before issue 24, whose ``--report-only`` output is kept in ``fixtures/legacy_reports/``
(``python tests/experiments/legacy_runs.py OUT`` writes the four trees to ``OUT/<paper>``). The
numbers are arbitrary but fixed (a seeded ``random.Random``).
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import yaml

PAPERS = ("dubois2020", "raffel2015", "daniluk2017", "russin2019")


def write_legacy_run(
    run_dir: Path,
    experiment: str,
    validation: dict[str, list[float]],
    summary: dict[str, dict[str, float]] | None,
    config: dict[str, Any] | None = None,
) -> None:
    """A run directory as the earlier trainer left it: ``config.yaml``, ``metrics.jsonl`` with one
    record per epoch (``epoch``, ``train_loss``, ``validation_<metric>`` for each list of
    ``validation``, ``seconds``) and, for a finished run, ``eval/summary.json``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"experiment": experiment, **(config or {})}))
    epochs = len(next(iter(validation.values())))
    records = []
    for epoch in range(epochs):
        record: dict[str, Any] = {"epoch": epoch + 1, "train_loss": round(2.0 / (epoch + 1), 6)}
        record.update({f"validation_{name}": values[epoch] for name, values in validation.items()})
        record["seconds"] = 12.5
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    if summary is not None:
        (run_dir / "eval").mkdir(exist_ok=True)
        (run_dir / "eval" / "summary.json").write_text(json.dumps(summary, indent=2))


def _curve(rng: random.Random, epochs: int, end: float) -> list[float]:
    """An accuracy curve rising to ``end`` (percent)."""
    return [
        round(end * (index + 1) / epochs - rng.uniform(0.0, 1.0) * (epochs - 1 - index), 2)
        for index in range(epochs)
    ]


def build_dubois2020(out: Path) -> None:
    """Lookup Tables: long and reversed, three attenders, two seeds; seqAcc, seqAccBE, attnLoss."""
    rng = random.Random(2020)
    test_sets = ("interpolation", "long1", "long2", "long3", "long4", "long5")
    for task in ("long", "reversed"):
        for attender in ("additive", "location", "mix"):
            for seed in (0, 1):
                summary = {}
                for level, name in enumerate(test_sets):
                    seq_acc = round(rng.uniform(100.0 - 20.0 * level, 100.0 - 15.0 * level), 3)
                    summary[name] = {
                        "seq_acc": seq_acc,
                        "seq_acc_be": round(min(100.0, seq_acc + rng.uniform(0.0, 5.0)), 3),
                        "loss": round(rng.uniform(0.01, 1.0), 5),
                        "attn_loss": round(rng.uniform(1.0, 3.0) * (level + 1), 4),
                        "examples": 500.0,
                    }
                validation = {
                    "loss": [round(1.0 / (epoch + 1), 5) for epoch in range(4)],
                    "seq_acc": _curve(rng, 4, 99.0),
                    "attn_loss": [round(rng.uniform(1.0, 2.0), 4) for _ in range(4)],
                }
                run = out / task / attender / f"seed{seed}"
                write_legacy_run(run, "lookup", validation, summary, {"data": {"variant": task}})


def build_raffel2015(out: Path) -> None:
    """Memory problems: learning-rate runs of Table 1 cells (reaching 100% or capped) and of the
    variable-length setting, told apart by their ``validation_accuracy`` per epoch."""
    rng = random.Random(2015)
    cells = {
        ("addition", "t0_50", "attention"): {0.01: [92.5, 100.0], 0.001: [60.0, 95.5, 100.0]},
        ("addition", "t0_50", "mean"): {0.01: [88.25, 99.5, 100.0]},
        ("addition", "t0_1000", "attention"): {0.003: [70.0, 99.9, 99.95, 100.0]},
        ("multiplication", "t0_10000", "mean"): {0.001: [40.0, 70.25, 80.75], 0.0003: [35.0, 60.5, 79.0]},
        ("multiplication", "t0_100", "attention"): {0.01: [55.5, 97.0, 100.0]},
        ("addition", "variable", "attention"): {0.01: [97.0, 99.5, 99.95]},
        ("multiplication", "variable", "mean"): {0.003: [20.0, 40.5, 54.25]},
    }
    for (problem, setting, pooling), runs in cells.items():
        goal = 100.0 if setting != "variable" else 99.9
        for learning_rate, accuracies in runs.items():
            validation = {
                "loss": [round(rng.uniform(1e-4, 1e-2), 7) for _ in accuracies],
                "accuracy": accuracies,
            }
            summary = {"test": {"accuracy": accuracies[-1], "mse": validation["loss"][-1], "examples": 1000}}
            config = {
                "data": {"problem": problem, "padding": "masked"},
                "training": {"learning_rate": learning_rate, "stop_at_accuracy": goal},
            }
            run = out / problem / setting / pooling / f"lr{learning_rate:g}" / "seed0"
            write_legacy_run(run, "memory", validation, summary, config)
        # The record of an ended race (trees older than it are finished by running the recipe over
        # them again, which trains nothing); without it the report marks the cell unfinished.
        race = {"learning_rates": sorted(runs), "max_epochs": 100}
        (out / problem / setting / pooling / "race_seed0.json").write_text(json.dumps(race) + "\n")


def _sentences_csv(rng: random.Random, scale: float) -> str:
    """``eval/test.sentences.csv``: 48 sentences in 16 documents, NLLs in nats."""
    lines = ["sentence,document,first_token,tokens,nll"]
    first = 0
    for sentence in range(48):
        tokens = 8 + sentence % 7
        nll = tokens * scale * rng.uniform(0.9, 1.1)
        lines.append(f"{sentence},{sentence // 3},{first},{tokens},{nll!r}")
        first += tokens
    return "\n".join(lines) + "\n"


def build_daniluk2017(out: Path) -> None:
    """Language models on WikiText-2: the LSTM and attention models (two seeds of some), N-gram
    RNNs; perplexities, CBT accuracies, model sizes, attention by position, per-sentence NLLs."""
    rng = random.Random(2017)
    models = {
        "lstm": (0, 1),
        "attention_L1": (0,),
        "attention_L5": (0, 1),
        "attention_L10": (0,),
        "key_value_L5": (0,),
        "4-gram": (0,),
        "2-gram": (0,),
    }
    for model, seeds in models.items():
        for seed in seeds:
            perplexity = {"valid": rng.uniform(110.0, 140.0), "test": rng.uniform(100.0, 130.0)}
            summary: dict[str, dict[str, float]] = {
                split: {
                    "loss": round(math.log(value), 6),
                    "perplexity": round(value, 4),
                    "tokens": 245569.0 if split == "test" else 217646.0,
                }
                for split, value in perplexity.items()
            }
            for name in ("NE", "CN"):
                summary[name] = {"accuracy": round(rng.uniform(0.3, 0.6), 4), "questions": 2500}
            validation = {
                "loss": [round(rng.uniform(4.8, 5.2), 5) for _ in range(3)],
                "perplexity": [round(rng.uniform(120.0, 180.0), 3) for _ in range(3)],
            }
            run = out / "wikitext-2" / model / f"seed{seed}"
            write_legacy_run(run, "language_model", validation, summary, {"training": {"seed": seed}})
            window = int(model.split("_L")[1]) if "_L" in model else 0
            size = {"hidden_dim": 300 + 10 * len(model), "parameters_without_embeddings": 721200 + 999 * seed}
            (run / "eval" / "model.json").write_text(json.dumps(size))
            if window:
                weights = [rng.uniform(0.0, 1.0) for _ in range(window)]
                by_position = [weight / sum(weights) for weight in weights]
                attention = {"window": window, "test": {"attention_by_position": by_position}}
                (run / "eval" / "attention.json").write_text(json.dumps(attention))
            scale = 4.6 + 0.05 * len(model) + 0.01 * seed
            (run / "eval" / "test.sentences.csv").write_text(_sentences_csv(rng, scale))


def build_russin2019(out: Path) -> None:
    """SCAN: Table 1 splits for the three models, the Table 2 ablations, English–French BLEU."""
    rng = random.Random(2019)

    def scan_runs(folder: str, seeds: int, low: float, high: float) -> None:
        for seed in range(seeds):
            seq_acc = round(rng.uniform(low, high), 3)
            given_length = round(min(100.0, seq_acc + 5.0), 3)
            test = {"seq_acc": seq_acc, "seq_acc_given_length": given_length, "loss": 0.2, "examples": 7706.0}
            last = round(rng.uniform(95.0, 100.0), 2)
            validation = {"loss": [0.5, 0.3, 0.2], "seq_acc": [50.0, 80.0, last]}
            write_legacy_run(out / folder / f"seed{seed}", "scan", validation, {"test": test})

    for model in ("gru_attention", "gru_attention_nodep", "syntactic_attention"):
        ranges = {"simple": (99.0, 100.0), "length": (10.0, 20.0), "addprim_jump": (30.0, 95.0)}
        for split, (low, high) in ranges.items():
            scan_runs(f"table1/{split}/{model}", 3, low, high)
    scan_runs("table2/translation_rnn", 2, 0.0, 5.0)
    scan_runs("table2/translate_from_context", 1, 20.0, 60.0)
    for variant in ("syntactic_attention", "translate_from_context"):
        for seed in range(2):
            bleu = {
                name: {"bleu": round(rng.uniform(25.0, 35.0), 3), "seq_acc": 10.0}
                for name in ("test", "test_no_unk")
            }
            validation = {"loss": [2.0, 1.5], "seq_acc": [5.0, 9.5]}
            write_legacy_run(out / "mt" / variant / f"seed{seed}", "scan", validation, bleu)


BUILDERS = {
    "dubois2020": build_dubois2020,
    "raffel2015": build_raffel2015,
    "daniluk2017": build_daniluk2017,
    "russin2019": build_russin2019,
}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for paper, build in BUILDERS.items():
        build(root / paper)
