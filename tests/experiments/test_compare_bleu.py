"""``attnlab compare --metric bleu`` on English–French runs' predictions files, and the Russin
recipe's GRU + attention baseline on English–French with its comparisons."""

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.cli import main
from attnlab.evaluation.bleu import corpus_bleu
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.scan import experiment
from attnlab.experiments.scan import recipe as russin2019

pytest.importorskip("sacrebleu")

WORDS = "je tu il elle suis es est très un une grand petite content contente fatigué ivre".split()


def _sentences(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Sources and French-looking references."""
    rng = np.random.default_rng(seed)
    references = [" ".join(rng.choice(WORDS, size=rng.integers(3, 8))) + " ." for _ in range(count)]
    return [f"source {index} ." for index in range(count)], references


def _garbled(references: list[str], rate: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join("oups" if rng.random() < rate else w for w in r.split()) for r in references]


def _mt_run(run_dir: Path, sources: list[str], targets: list[str], predictions: list[str]) -> float:
    """A finished English–French run as evaluation leaves it: ``eval/test.predictions.tsv``,
    ``eval/test.json`` and ``eval/summary.json`` with its BLEU; returns the BLEU."""
    bleu = corpus_bleu(predictions, targets)
    lines = ["example\tsource\ttarget\tprediction\tseq_acc"]
    lines += [
        f"{index}\t{source}\t{target}\t{prediction}\t{int(target == prediction)}"
        for index, (source, target, prediction) in enumerate(zip(sources, targets, predictions))
    ]
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "eval" / "test.predictions.tsv").write_text("\n".join(lines) + "\n")
    (run_dir / "eval" / "test.json").write_text(json.dumps({"test_set": "test", "bleu": bleu}))
    (run_dir / "eval" / "summary.json").write_text(json.dumps({"test": {"bleu": bleu}}))
    return bleu


def test_compare_bleu_of_two_mt_runs(tmp_path, capsys):
    sources, references = _sentences(40)
    worse, better = _garbled(references, 0.6, 1), _garbled(references, 0.1, 2)
    bleu_worse = _mt_run(tmp_path / "gru", sources, references, worse)
    bleu_better = _mt_run(tmp_path / "sa", sources, references, better)
    out = tmp_path / "compare.json"
    arguments = ["compare", str(tmp_path / "gru"), str(tmp_path / "sa"), "--metric", "bleu"]
    assert main([*arguments, "--samples", "300", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "test/test/bleu" in table and "better" in table and "40 examples" in table
    written = json.loads(out.read_text())
    assert written["metric"] == "test/test/bleu" and written["unit"] == "example"
    result = written["comparisons"][str(tmp_path / "sa")]
    assert result["statistic"] == "bleu" and result["units"] == 40
    assert result["a"] == bleu_worse and result["b"] == bleu_better  # exactly the reported BLEU
    assert result["low"] > 0 and result["p_value"] < 0.01 and result["b_is_better"]
    assert main([*arguments[:3], "--metric", "test/test/bleu", "--samples", "300", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["comparisons"][str(tmp_path / "sa")] == result


def test_compare_bleu_refuses_bad_predictions_files(tmp_path, capsys):
    sources, references = _sentences(12)
    _mt_run(tmp_path / "a", sources, references, references)
    _mt_run(tmp_path / "b", sources, references, references)
    predictions = tmp_path / "b" / "eval" / "test.predictions.tsv"
    text = predictions.read_text()
    arguments = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--metric", "bleu"]

    header = "example\tsource\ttarget\tprediction"
    predictions.write_text(text.replace(header, "example\tsource\thypothesis", 1))
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{predictions} line 1: expected a header starting {header!r}" in error
    assert len(error.strip().splitlines()) == 1

    lines = text.splitlines()
    lines[4] = "\t".join(lines[4].split("\t")[:3])  # the prediction and seq_acc lost
    predictions.write_text("\n".join(lines) + "\n")
    assert main(arguments) == 2
    assert f"{predictions} line 5: expected 5 tab-separated fields" in capsys.readouterr().err

    predictions.write_text(text)  # a BLEU that is not the one evaluation reported: stale predictions
    (tmp_path / "b" / "eval" / "test.json").write_text(json.dumps({"bleu": 12.5}))
    assert main(arguments) == 2
    assert "the BLEU of its predictions is 100.0000, but" in capsys.readouterr().err

    (tmp_path / "b" / "eval" / "test.json").write_text(json.dumps({"bleu": 100.0}))
    lines = text.splitlines()
    lines[3] = lines[3].replace("source 2 .", "source two .")
    predictions.write_text("\n".join(lines) + "\n")
    assert main(arguments) == 2
    assert "were evaluated on different data (unit 2: " in capsys.readouterr().err


def test_the_gru_baseline_on_english_french_is_scan_gru_attentions_model_with_the_mt_budget():
    cells = {folder: (config, overrides) for folder, config, overrides in russin2019.cells(["mt"])}
    assert list(cells) == ["mt/syntactic_attention", "mt/translate_from_context", "mt/gru_attention"]
    config, overrides = cells["mt/gru_attention"]
    data = russin2019.cell_config(config, overrides, False, Path("shared"), [])
    mt, gru = resolve_config("mt_eng_fra", []), resolve_config("scan_gru_attention", [])
    assert data["model"] == gru["model"] and data["model"]["architecture"] == "gru_attention"
    assert data["training"] == {**mt["training"], "uniform_alignment_epochs": 0}
    assert data["evaluation"] == mt["evaluation"] and data["data"]["unknown_words"] == "unk"
    parsed = experiment.EXPERIMENT.parse_config(data)
    assert parsed.model.previous_output and parsed.model.encoder_hidden_dim == 100


def test_russin2019_report_compares_each_mt_variant_with_the_gru_baseline_seed_by_seed(tmp_path):
    sources, references = _sentences(30)
    for seed in (0, 1):
        mt = tmp_path / "mt"
        _mt_run(mt / "gru_attention" / f"seed{seed}", sources, references, _garbled(references, 0.5, seed))
        better = _garbled(references, 0.05, seed)
        _mt_run(mt / "syntactic_attention" / f"seed{seed}", sources, references, better)
    text = russin2019.report(tmp_path)
    assert "| GRU + attn (Bastings et al.) |" in text  # in the BLEU table
    assert "against GRU + attn (Bastings et al.), seed by seed" in text
    rows = [line for line in text.splitlines() if line.startswith("| Syntactic Attention, seed")]
    assert len(rows) == 2 and all(row.rstrip(" |").endswith("better") for row in rows)
    assert "c_i used for translation" not in text  # no runs of that variant
