"""The Daniluk et al. (2017) language-model experiment end to end, on small synthetic corpora."""

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.config import load_yaml
from attnlab.experiments.language_model import experiment as lm
from attnlab.experiments.language_model.plots import document_attention
from attnlab.experiments.registry import EXPERIMENTS, experiment_for, resolve_config, system_modules
from attnlab.tasks.cbt import ClozeQuestion, write_cbt
from attnlab.tasks.corpus import copy_pattern_documents, write_wikitext_folder
from attnlab.tasks.corpus_data import load_split
from attnlab.training.checkpoint import load_checkpoint

SPAN = 5  # copy distance SPAN + 1 = 6 steps back


@pytest.fixture(scope="module")
def copy_corpus(tmp_path_factory):
    generator = torch.Generator().manual_seed(0)
    documents = {
        split: copy_pattern_documents(count, span=SPAN, words=20, generator=generator)
        for split, count in (("train", 240), ("valid", 16), ("test", 16))
    }
    return write_wikitext_folder(tmp_path_factory.mktemp("copy_corpus"), documents)


def _overrides(corpus, **extra):
    overrides = {
        "data.corpus": corpus,
        "model.variant": "key_value_predict",
        "model.window": SPAN + 1,
        "model.embedding_dim": 32,
        "model.hidden_dim": "null",
        "model.match_lstm_hidden": 64,
        "model.init_range": 0.5,
        "training.batch_size": 16,
        "training.epochs": 2,
        "training.learning_rate": 1e-2,
        "training.progress": "false",
        "training.device": "cpu",
        "evaluation.batch_size": 8,
        **extra,
    }
    return [f"{key}={value}" for key, value in overrides.items()]


def _config(corpus, **extra) -> lm.LMExperimentConfig:
    return lm.EXPERIMENT.parse_config(resolve_config("lm_wikitext2", _overrides(corpus, **extra)))


def _history(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _unigram_perplexity(corpus) -> float:
    """Perplexity on the test split of the training split's unigram distribution."""

    def tokens(split):
        return [
            t for line in (corpus / f"{split}.txt").read_text().splitlines() for t in [*line.split(), "<eos>"]
        ]

    counts, total = Counter(tokens("train")), len(tokens("train"))
    test = tokens("test")
    return math.exp(-sum(math.log(counts[t] / total) for t in test) / len(test))


def test_builtin_configs_are_the_papers_procedure():
    for name, corpus in (("lm_wikitext2", "wikitext-2"), ("lm_ptb", "ptb")):
        data = resolve_config(name, [])
        assert experiment_for(data) is lm.EXPERIMENT
        config = lm.EXPERIMENT.parse_config(data)
        training = config.training
        assert (training.learning_rate, training.batch_size, training.gradient_clip, training.bptt) == (
            1e-3,
            64,
            5.0,
            20,
        )
        assert config.model.match_lstm_hidden == 300 and config.model.embedding_dim == 300
        assert config.model.init_range == 0.1 and config.data.corpus.endswith(corpus)


@pytest.fixture(scope="module")
def trained_run(copy_corpus, tmp_path_factory):
    """A tiny Key-Value-Predict model trained for 5 epochs on the copy corpus (a few seconds)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    return run, lm.EXPERIMENT.train(_config(copy_corpus, **{"training.epochs": 5}), run)


def test_key_value_predict_learns_the_long_range_copy_pattern(copy_corpus, trained_run):
    """A tiny KVP model beats the unigram perplexity by a wide margin in a few seconds of CPU."""
    run, results = trained_run
    unigram = _unigram_perplexity(copy_corpus)
    assert results["test"]["perplexity"] < 0.4 * unigram, (results, unigram)
    assert results["test"]["tokens"] == 16 * (5 + 5 * (2 * SPAN + 2))
    attention = json.loads((run / "eval" / "attention.json").read_text())
    by_position = attention["test"]["attention_by_position"]
    assert len(by_position) == SPAN + 1 and sum(by_position) == pytest.approx(1.0, abs=1e-6)
    model = json.loads((run / "eval" / "model.json").read_text())
    assert model["hidden_dim"] % 3 == 0 and model["parts"] == 3


def test_evaluate_on_other_corpus_files_leaves_the_runs_results_alone(
    trained_run, copy_corpus, tmp_path, capsys
):
    run, results = trained_run
    summary = (run / "eval" / "summary.json").read_text()
    other = tmp_path / "other.txt"
    other.write_text((copy_corpus / "test.txt").read_text())
    assert main(["evaluate", str(run), "--data", str(other), "--device", "cpu"]) == 0
    assert "other" in capsys.readouterr().out
    record = json.loads((run / "eval" / "files" / "other.json").read_text())
    assert record["perplexity"] == pytest.approx(results["test"]["perplexity"], rel=1e-5)
    assert len(record["attention_by_position"]) == SPAN + 1
    assert (run / "eval" / "summary.json").read_text() == summary
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["evaluate", str(run), "--data", str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err
    assert main(["evaluate", str(run), "--data", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_generate_continues_the_copy_pattern_and_writes_the_attention(trained_run, tmp_path, capsys):
    run, _ = trained_run
    prompt, first = "= Document 0 =\n", "w3 w17 w0 w9 w12"  # documents start with their heading
    out = tmp_path / "generated.json"
    command = ["generate", str(run), "--prompt", f"{prompt}{first} ;", "--temperature", "0", "--words", "6"]
    assert main([*command, "--device", "cpu", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{prompt}{first} ; {first}\n")
    result = json.loads(out.read_text())
    assert result["prompt"] == ["=", "Document", "0", "=", "<eos>", *first.split(), ";"]
    assert result["unknown"] == []
    (sample,) = result["samples"]
    assert sample["words"] == [*first.split(), "<eos>"]
    attention = torch.tensor(sample["attention"])
    assert attention.shape == (6, SPAN + 1)
    torch.testing.assert_close(attention.sum(1), torch.ones(6))
    # Each copy reads the output of the step that took the word in, SPAN steps back: window
    # position 1 of SPAN + 1, oldest first.
    assert attention[:SPAN].argmax(1).tolist() == [1] * SPAN


def test_generate_samples_reproducibly_and_names_unknown_prompt_words(trained_run, capsys):
    run, _ = trained_run
    command = [
        "generate",
        str(run),
        "--prompt",
        "w1 zebra",
        "--words",
        "30",
        "--samples",
        "2",
        "--top-k",
        "5",
    ]
    assert main(command) == 0
    first = capsys.readouterr()
    assert "read as <unk>: ['zebra']" in first.err
    assert first.out.count("--- sample") == 2 and first.out.count("w1 zebra ") == 2
    assert main(command) == 0 and capsys.readouterr().out == first.out
    assert main([*command, "--seed", "1"]) == 0 and capsys.readouterr().out != first.out


def test_plot_draws_figure_3_and_the_training_curves(trained_run, capsys):
    run, _ = trained_run
    assert main(["plot", str(run), "--index", "0", "3", "--steps", "14", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.split()
    names = [
        "attention_test_0.png",
        "attention_test_3.png",
        "attention_by_position.png",
        "training_curves.png",
    ]
    assert [Path(path).name for path in printed] == names
    assert all((run / "plots" / name).stat().st_size > 0 for name in names)


def test_document_attention_reads_the_document_as_training_does(trained_run):
    run, _ = trained_run
    config = lm.EXPERIMENT.parse_config(load_yaml(run / "config.yaml"))
    model, vocabulary = lm.model_from_checkpoint(run / "checkpoints" / "best.pt", torch.device("cpu"))
    document = load_split(config.data, "test", vocabulary).documents()[0][:18]
    weights, words = document_attention(model, vocabulary, document)
    assert words == ["<eos>", *vocabulary.decode(document[:-1].tolist())]
    assert weights.shape == (18, SPAN + 1)
    # From the step that reads ";", each copied word is predicted by attending to the step that
    # read it, SPAN steps back: window position 1 of SPAN + 1, oldest first.
    copies = weights[words.index(";") :][:SPAN]
    assert copies.argmax(1).tolist() == [1] * SPAN, (words, copies)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--index", "99"], "--index [99] out of range: test has 16 documents"),
        (["--test-set", "train"], "--test-set 'train': choose one of ['valid', 'test']"),
        (["--steps", "1"], "--steps must be >= 2"),
    ],
)
def test_plot_refuses_bad_options(trained_run, arguments, message, capsys):
    assert main(["plot", str(trained_run[0]), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_plot_options_of_other_runs_are_refused(tmp_path, capsys):
    assert set(system_modules("plots")) == set(EXPERIMENTS)  # every experiment has its plots
    (tmp_path / "config.yaml").write_text("experiment: lookup\n")
    assert main(["plot", str(tmp_path), "--steps", "5"]) == 2
    assert "--steps applies to language-model runs only" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("experiment: bogus\n")
    assert main(["plot", str(tmp_path)]) == 2
    assert "unknown experiment 'bogus'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
        (["--temperature", "inf"], "--temperature must be a finite number >= 0"),
        (["--words", "0"], "--words must be >= 1"),
        (["--top-k", "0"], "--top-k must be >= 1"),
    ],
)
def test_generate_refuses_bad_options(trained_run, arguments, message, capsys):
    assert main(["generate", str(trained_run[0]), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_generate_refuses_runs_that_are_not_language_models(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("experiment: lookup\n")
    assert main(["generate", str(tmp_path)]) == 2
    assert "generate applies to language-model runs" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "missing")]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def _interrupt(config, run_dir, monkeypatch, at_update: int) -> None:
    """Train ``config`` in ``run_dir`` until update ``at_update`` raises KeyboardInterrupt."""
    calls = {"n": 0}
    original = lm.LMTrainingTask.training_loss

    def crash(self, model, batch):
        calls["n"] += 1
        if calls["n"] == at_update:
            raise KeyboardInterrupt
        return original(self, model, batch)

    monkeypatch.setattr(lm.LMTrainingTask, "training_loss", crash)
    with pytest.raises(KeyboardInterrupt):
        lm.EXPERIMENT.train(config, run_dir)
    monkeypatch.setattr(lm.LMTrainingTask, "training_loss", original)


def _assert_resume_matches(config, tmp_path, uninterrupted) -> None:
    assert lm.EXPERIMENT.train(config, tmp_path / "resumed", resume=True) == uninterrupted
    full = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")["model"]
    again = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(full[name], again[name]) for name in full)


def test_resume_after_interruption_matches_uninterrupted_run(copy_corpus, tmp_path, monkeypatch):
    config = _config(copy_corpus, **{"training.max_segments_per_epoch": 6})
    uninterrupted = lm.EXPERIMENT.train(config, tmp_path / "full")
    _interrupt(config, tmp_path / "resumed", monkeypatch, at_update=6 + 3)
    _assert_resume_matches(config, tmp_path, uninterrupted)


def test_resume_within_an_epoch_restores_the_carried_lstm_state_and_memory(
    copy_corpus, tmp_path, monkeypatch
):
    """``training.checkpoint_every``: interrupted after 5 segments of epoch 2 (``last.pt`` at the
    4th), the resumed run continues from the carried state and ends like an uninterrupted one."""
    config = _config(copy_corpus, **{"training.max_segments_per_epoch": 6, "training.checkpoint_every": 2})
    uninterrupted = lm.EXPERIMENT.train(config, tmp_path / "full")
    _interrupt(config, tmp_path / "resumed", monkeypatch, at_update=6 + 5)
    within = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")["within_epoch"]
    assert within["updates"] == 4
    assert set(within["carried_state"]["model_state"]) == {"h", "c", "memory"}
    _assert_resume_matches(config, tmp_path, uninterrupted)


def test_cli_train_evaluate_and_cbt(copy_corpus, tmp_path, capsys):
    cbt = tmp_path / "cbtest_NE_test_2500ex.txt"
    context = tuple(tuple(f"w{i} w{i + 1} ; w{i} w{i + 1}".split()) for i in range(20))
    write_cbt(cbt, [ClozeQuestion(context, ("w1", "w2", ";", "XXXXX", "w2"), "w1", ("w1", "w3", "w4"), 21)])
    run = tmp_path / "run"
    overrides = _overrides(copy_corpus, **{"training.epochs": 1, "data.cbt_files": f"[{cbt}]"})
    assert main(["train", "lm_wikitext2", *overrides, "--run-dir", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "perplexity" in printed and "test" in printed and "cbt_NE" in printed
    summary = json.loads((run / "eval" / "summary.json").read_text())
    assert summary["cbt_NE"]["questions"] == 1 and 0.0 <= summary["cbt_NE"]["accuracy"] <= 1.0
    assert lm.EXPERIMENT.evaluate(run, device_name="cpu") == summary
    assert (run / "vocabulary.txt").read_text().startswith("<pad>\n<unk>\n<eos>\n")


def test_vocabulary_file_that_does_not_match_the_checkpoint_is_refused(copy_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    lm.EXPERIMENT.train(
        _config(copy_corpus, **{"training.epochs": 1, "training.max_segments_per_epoch": 2}), run
    )
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text((run / "vocabulary.txt").read_text().replace("w1\n", "w999\n"))
    config_file = run / "config.yaml"
    config_file.write_text(
        config_file.read_text().replace("vocabulary_file: null", f"vocabulary_file: {vocabulary}")
    )
    assert main(["evaluate", str(run), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert str(vocabulary) in error and "does not match the vocabulary" in error and "line" in error


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.variant=gru", "variant"),
        ("model.hidden_dim=64", "exactly one of"),
        ("data.max_tokens={dev: 10}", "unknown split"),
        ("training.bptt=0", "bptt"),
        # the sizing built a model before the model's own checks: a traceback from the window's or
        # the N-gram's module
        ("model.window=0", "config.model: window must be >= 1, got 0"),
        ("model.ngram=0", "config.model: ngram must be >= 2, got 0"),
        ("model.dropout=1.0", "config.model: dropout must be in [0, 1), got 1.0"),
    ],
)
def test_bad_config_is_a_usage_error(copy_corpus, override, message, tmp_path, capsys):
    arguments = [
        "train",
        "lm_wikitext2",
        *_overrides(copy_corpus),
        override,
        "--run-dir",
        str(tmp_path / "r"),
    ]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("attnlab: error:") and message in error


def test_missing_split_file_is_named(copy_corpus, tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.txt").write_text((copy_corpus / "train.txt").read_text())
    (folder / "valid.txt").write_text((copy_corpus / "valid.txt").read_text())
    assert main(["train", "lm_wikitext2", *_overrides(folder), "--run-dir", str(tmp_path / "r")]) == 2
    error = capsys.readouterr().err
    assert str(folder) in error and "no test split" in error


def test_recipe_trains_only_the_chosen_models(copy_corpus, tmp_path):
    from attnlab.experiments.language_model import recipe as daniluk2017

    data_root = tmp_path / "data"
    (data_root / "wikitext-2").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (data_root / "wikitext-2" / f"{split}.txt").write_text((copy_corpus / f"{split}.txt").read_text())
    out = tmp_path / "out"
    report = daniluk2017.reproduce(
        out, quick=True, corpora=["wikitext-2"], data_root=data_root, models=["4-gram", "lstm"], seeds=[0, 1]
    )
    assert sorted(p.name for p in (out / "wikitext-2").iterdir() if p.is_dir()) == ["4-gram", "lstm"]
    assert sorted(p.name for p in (out / "wikitext-2" / "lstm").iterdir()) == ["seed0", "seed1"]
    configs = [load_yaml(out / "wikitext-2" / "lstm" / f"seed{s}" / "config.yaml") for s in (0, 1)]
    assert [config["training"]["seed"] for config in configs] == [0, 1]
    assert "4-gram" in report and "lstm" in report
    figure_2c = report.split("### Figure 2c")[1]
    four_gram = next(line for line in figure_2c.splitlines() if line.startswith("| 4-gram"))
    assert re.search(r"\| [+-]\d+\.\d\*? \[[+-]\d+\.\d, [+-]\d+\.\d\] \|", four_gram), four_gram
    assert re.search(r"\| \d+\.\d ± \d+\.\d \(n=2\) \|", four_gram), four_gram
    assert "over the test set's 16 documents" in figure_2c  # the copy corpus's test articles
    assert "mean over the model's seeds" in figure_2c
    assert (out / "wikitext-2" / "validation_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_recipe_reads_a_run_of_the_earlier_layout_as_seed_0(copy_corpus, tmp_path):
    from attnlab.experiments.language_model import recipe as daniluk2017

    legacy = tmp_path / "ptb" / "lstm"
    (legacy / "eval").mkdir(parents=True)
    (legacy / "config.yaml").write_text("experiment: language_model\n")
    summary = {split: {"perplexity": value} for split, value in (("valid", 120.0), ("test", 115.0))}
    (legacy / "eval" / "summary.json").write_text(json.dumps(summary))
    assert daniluk2017.seed_run_dir(legacy, 0) == legacy
    assert daniluk2017.seed_run_dir(legacy, 1) == legacy / "seed1"
    report = daniluk2017.report(tmp_path, ["ptb"])
    lstm = next(line for line in report.splitlines() if line.startswith("| lstm"))
    assert "| 120.0 | 115.0 |" in lstm


def test_recipe_refuses_an_unknown_model(tmp_path):
    from attnlab.config import ConfigError
    from attnlab.experiments.language_model import recipe as daniluk2017

    with pytest.raises(ConfigError, match="unknown model.*'gru_L5'"):
        daniluk2017.reproduce(tmp_path, quick=True, models=["lstm", "gru_L5"])
    assert not any(tmp_path.iterdir())


def test_figure_3b_leaves_out_windows_of_one(monkeypatch, tmp_path):
    """With L = 1 the attention is always 1.0 on its one position: nothing to show."""
    from attnlab.experiments.language_model import recipe as daniluk2017

    drawn = {}
    monkeypatch.setattr(
        daniluk2017, "plot_metric_by_test_set", lambda curves, path, **_: drawn.update(curves)
    )
    seeds = {
        "key_value_L1": [{"attention": {"test": {"attention_by_position": [1.0]}}}],
        "attention_L1": [{"attention": {"test": {"attention_by_position": [1.0]}}}],
        "attention_L5": [{"attention": {"test": {"attention_by_position": [0.1, 0.1, 0.2, 0.2, 0.4]}}}],
    }
    daniluk2017._figure_3b(seeds, tmp_path / "figure.png")
    assert list(drawn) == ["attention (L=5)"] and drawn["attention (L=5)"]["t-1"] == [0.4]


def test_figure_3b_draws_every_seed_of_the_largest_window(monkeypatch, tmp_path):
    from attnlab.experiments.language_model import recipe as daniluk2017

    drawn = {}
    monkeypatch.setattr(
        daniluk2017, "plot_metric_by_test_set", lambda curves, path, **_: drawn.update(curves)
    )
    seeds = {
        "key_value_predict_L2": [
            {"attention": {"test": {"attention_by_position": [0.3, 0.7]}}},
            {"attention": {"test": {"attention_by_position": [0.4, 0.6]}}},
            {"attention": {}},  # evaluated before attention statistics were written: left out
        ],
        "key_value_predict_L1": [{"attention": {"test": {"attention_by_position": [1.0]}}}],
    }
    daniluk2017._figure_3b(seeds, tmp_path / "figure.png")
    assert drawn == {"key_value_predict (L=2)": {"t-2": [0.3, 0.4], "t-1": [0.7, 0.6]}}


def test_evaluation_writes_the_nll_of_every_sentence(trained_run):
    run, results = trained_run
    lines = (run / "eval" / "test.sentences.csv").read_text().splitlines()
    assert lines[0] == "sentence,document,first_token,tokens,nll"
    rows = [line.split(",") for line in lines[1:]]
    tokens = [int(row[3]) for row in rows]
    assert sum(tokens) == results["test"]["tokens"]
    assert [int(row[2]) for row in rows] == [sum(tokens[:i]) for i in range(len(rows))]
    assert sorted(set(int(row[1]) for row in rows)) == list(range(16))  # the test split's documents
    assert sum(float(row[4]) for row in rows) / sum(tokens) == pytest.approx(
        results["test"]["loss"], rel=1e-9
    )


def _worse_copy(run: Path, tmp_path: Path, extra_nats_per_token: float) -> Path:
    """A copy of ``run`` whose test sentences each cost ``extra_nats_per_token`` more."""
    copy = tmp_path / "worse"
    (copy / "eval").mkdir(parents=True)
    (copy / "config.yaml").write_text((run / "config.yaml").read_text())
    header, *rows = (run / "eval" / "test.sentences.csv").read_text().splitlines()
    shifted = []
    for row in rows:
        sentence, document, first, tokens, nll = row.split(",")
        nll = repr(float(nll) + extra_nats_per_token * int(tokens))
        shifted.append(f"{sentence},{document},{first},{tokens},{nll}")
    (copy / "eval" / "test.sentences.csv").write_text("\n".join([header, *shifted]) + "\n")
    return copy


def test_compare_tells_a_worse_run_from_noise(trained_run, tmp_path, capsys):
    run, results = trained_run
    worse = _worse_copy(run, tmp_path, 0.2)
    out = tmp_path / "compare.json"
    assert main(["compare", str(run), str(run), str(worse), "--samples", "300", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "no significant difference" in table and "worse" in table
    comparisons = json.loads(out.read_text())["comparisons"]
    same, shifted = comparisons[str(run)], comparisons[str(worse)]
    assert same["p_value"] == 1.0 and same["difference"] == 0.0
    assert shifted["b"] == pytest.approx(results["test"]["perplexity"] * math.exp(0.2), rel=1e-6)
    assert shifted["low"] > 0 and shifted["p_value"] < 0.01 and not shifted["b_is_better"]
    assert shifted["units"] > 16
    assert main(["compare", str(run), str(worse), "--unit", "document", "--out", str(out)]) == 0
    by_document = json.loads(out.read_text())["comparisons"][str(worse)]
    assert by_document["units"] == 16 and by_document["b"] == pytest.approx(shifted["b"])


def test_compare_refuses_runs_it_cannot_compare(trained_run, tmp_path, capsys):
    run, _ = trained_run
    worse = _worse_copy(run, tmp_path, 0.0)
    csv_file = worse / "eval" / "test.sentences.csv"
    header, first, *rest = csv_file.read_text().splitlines()
    sentence, document, start, tokens, nll = first.split(",")
    changed = f"{sentence},{document},{start},{int(tokens) + 1},{nll}"
    csv_file.write_text("\n".join([header, changed, *rest]) + "\n")
    assert main(["compare", str(run), str(worse)]) == 2
    assert "evaluated on different data (unit 0" in capsys.readouterr().err
    one_document = [",".join([*row.split(",")[:1], "0", *row.split(",")[2:]]) for row in [first, *rest]]
    csv_file.write_text("\n".join([header, *one_document]) + "\n")
    assert main(["compare", str(run), str(worse), "--unit", "document"]) == 2
    assert "1 document(s) are too few units" in capsys.readouterr().err
    assert main(["compare", str(run), str(worse), "--unit", "word"]) == 2
    assert "--unit word" in capsys.readouterr().err
    csv_file.write_text("\n".join([header, "0,0,0,seven,1.5"]) + "\n")
    assert main(["compare", str(run), str(worse)]) == 2
    assert f"{csv_file} line 2" in capsys.readouterr().err
    assert main(["compare", str(run), str(worse), "--test-set", "valid"]) == 2
    error = capsys.readouterr().err
    assert "found neither" in error and "valid.sentences.csv" in error
    assert "it has them for test: name one with --test-set" in error  # not told to evaluate it again
    assert main(["compare", str(run)]) == 2
    assert "at least one run" in capsys.readouterr().err


def test_a_run_trained_on_a_relative_corpus_path_evaluates_from_any_directory(
    copy_corpus, tmp_path, monkeypatch
):
    monkeypatch.chdir(copy_corpus.parent)
    config = _config(copy_corpus.name, **{"training.epochs": 1, "data.max_tokens": "{train: 400}"})
    run_dir = tmp_path / "run"
    results = lm.EXPERIMENT.train(config, run_dir)
    assert load_yaml(run_dir / "config.yaml")["data"]["corpus"] == str(copy_corpus.resolve())
    monkeypatch.chdir(tmp_path)
    again = lm.EXPERIMENT.evaluate(run_dir, device_name="cpu")
    assert again["test"]["perplexity"] == pytest.approx(results["test"]["perplexity"], rel=1e-6)


def test_a_run_whose_corpus_moved_evaluates_with_the_new_path_given(copy_corpus, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.txt").write_text((copy_corpus / f"{split}.txt").read_text())
    config = _config(str(corpus), **{"training.epochs": 1, "data.max_tokens": "{train: 400}"})
    run_dir = tmp_path / "run"
    results = lm.EXPERIMENT.train(config, run_dir)
    moved = corpus.rename(tmp_path / "moved")
    assert main(["evaluate", str(run_dir), "--device", "cpu"]) == 2
    assert str(corpus) in capsys.readouterr().err
    assert main(["evaluate", str(run_dir), f"data.corpus={moved}", "--device", "cpu"]) == 0
    capsys.readouterr()
    summary = json.loads((run_dir / "eval" / "summary.json").read_text())
    assert summary["test"]["perplexity"] == pytest.approx(results["test"]["perplexity"], rel=1e-6)
    assert main(["evaluate", str(run_dir), "model.window=3", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "'model.window=3' would change what the run was trained with" in error


def test_figure_3a_is_skipped_with_a_warning_without_a_checkpoint(tmp_path, caplog):
    """A run copied without its checkpoints (e.g. back from another machine) still gets its
    report; only the heatmap, which needs the model, is left out."""
    from attnlab.experiments.language_model import recipe as daniluk2017

    run_dir = tmp_path / "key_value_predict_L5" / "seed0"
    (run_dir / "checkpoints").mkdir(parents=True)
    with caplog.at_level("WARNING"):
        daniluk2017._figure_3a(tmp_path, {"key_value_predict_L5": {"dir": run_dir}})
    assert "figure 3a skipped" in caplog.text and "best.pt" in caplog.text
    assert not (tmp_path / "figure3a_heatmap.png").exists()
