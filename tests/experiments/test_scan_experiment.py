"""The SCAN experiment: learning, run directories, metrics, BLEU, ``<unk>`` and bad input."""

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.config import ConfigError, load_yaml
from attnlab.evaluation.bleu import BLEU_STATISTIC
from attnlab.evaluation.seq2seq import ExampleOutcomes, evaluate_split, teacher_forced_loss
from attnlab.experiments.compare import read_units
from attnlab.experiments.driver import load_trained
from attnlab.experiments.registry import experiment_for, resolve_config
from attnlab.experiments.scan import experiment
from attnlab.experiments.scan.plots import plot_attention
from attnlab.experiments.unit_scores import read_prediction_errors
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks import scan, scan_data
from attnlab.tasks.batching import collate
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.scan import generate_scan, sentence_actions, write_scan_file
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import TARGET_SPECIALS, UnknownTokenError, Vocabulary, build_vocabularies

TINY_MODEL = {
    "model.embedding_dim": 16,
    "model.encoder_hidden_dim": 16,
    "model.decoder_hidden_dim": 32,
    "model.encoder_layers": 1,
    "model.dropout": 0.0,
}

LEARNING_MODEL = {
    **TINY_MODEL,
    "model.embedding_dim": 32,
    "model.encoder_hidden_dim": 32,
    "model.decoder_hidden_dim": 64,
    "model.dropout": 0.1,
    "training.epochs": 14,
}
"""The learning tests' model and training (about 15 s a run on one CPU thread)."""


@pytest.fixture(scope="module")
def scan_slice(tmp_path_factory) -> dict[str, Path]:
    """A small slice of SCAN (no 'around', no 'thrice'), as IN/OUT files: 1,000 train, 200 test."""
    examples = [ex for ex in generate_scan() if not {"around", "thrice"} & set(ex.source)]
    random.Random(0).shuffle(examples)
    folder = tmp_path_factory.mktemp("scan_slice")
    paths = {"train": folder / "train.txt", "test": folder / "test.txt", "small": folder / "small.txt"}
    write_scan_file(paths["train"], examples[:1000])
    write_scan_file(paths["test"], examples[-200:])
    write_scan_file(paths["small"], examples[1000:1100])
    return paths


@pytest.fixture(scope="module")
def add_jump_slice(tmp_path_factory) -> dict[str, Path]:
    """Add-jump in miniature: 1,000 commands without 'jump' (no 'around', no 'thrice') plus 50
    copies of 'jump' → I_JUMP for training; 200 composed 'jump' commands for testing."""
    examples = [ex for ex in generate_scan() if not {"around", "thrice"} & set(ex.source)]
    random.Random(0).shuffle(examples)
    folder = tmp_path_factory.mktemp("add_jump_slice")
    paths = {"train": folder / "train.txt", "test": folder / "test.txt"}
    without_jump = [ex for ex in examples if "jump" not in ex.source][:1000]
    write_scan_file(paths["train"], without_jump + [Seq2SeqExample(("jump",), ("I_JUMP",))] * 50)
    composed = [ex for ex in examples if "jump" in ex.source and len(ex.source) > 1]
    write_scan_file(paths["test"], composed[:200])
    return paths


@pytest.fixture(scope="module")
def add_jump_alone_slice(tmp_path_factory) -> dict[str, Path]:
    """The miniature add-jump with SCAN's other one-word commands: 1,000 composed commands without
    'jump' (no 'around', no 'thrice'), 5 x each of 'walk', 'run', 'look' alone and 50 x 'jump'
    for training; the same 200 composed 'jump' commands for testing."""
    examples = [ex for ex in generate_scan() if not {"around", "thrice"} & set(ex.source)]
    random.Random(0).shuffle(examples)
    folder = tmp_path_factory.mktemp("add_jump_alone_slice")
    paths = {"train": folder / "train.txt", "test": folder / "test.txt"}
    without_jump = [ex for ex in examples if "jump" not in ex.source][:1000]
    composed = [ex for ex in without_jump if len(ex.source) > 1]
    alone = [Seq2SeqExample((word,), (f"I_{word.upper()}",)) for word in ("walk", "run", "look")] * 5
    write_scan_file(paths["train"], composed + alone + [Seq2SeqExample(("jump",), ("I_JUMP",))] * 50)
    test = [ex for ex in examples if "jump" in ex.source and len(ex.source) > 1]
    write_scan_file(paths["test"], test[:200])
    return paths


def config(files: dict[str, Path], **overrides: object) -> experiment.ScanExperimentConfig:
    settings = {
        "data.split": "files",
        "data.train_file": files["train"],
        "data.test_files": f"{{test: {files['test']}}}",
        "training.batch_size": 16,
        "training.learning_rate": 0.003,
        "training.progress": "false",
        **overrides,
    }
    return experiment.EXPERIMENT.parse_config(
        resolve_config("scan", [f"{key}={value}" for key, value in settings.items()])
    )


def test_small_syntactic_attention_learns_a_slice_of_scan(scan_slice, tmp_path):
    """Learning test: ~15 s on one CPU thread, fixed seed (seeds 0 and 3 reach 99.5%)."""
    run_config = config(scan_slice, **LEARNING_MODEL)
    results = experiment.EXPERIMENT.train(run_config, tmp_path / "run")
    assert results["test"]["seq_acc"] >= 95.0
    assert results["test"]["seq_acc_given_length"] >= results["test"]["seq_acc"]
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["valid/seq_acc"] >= 90.0


def test_stopping_from_the_end_marker_learns_when_to_stop_on_a_tiny_add_jump(add_jump_slice, tmp_path):
    """Learning test of ``model.stop_from_attention`` (~30 s on one CPU thread, fixed seed).

    On the miniature add-jump split today's model translates much better than it stops (seeds
    0–2: 0.0 / 20.5 / 0.0% with ``<eos>`` against 37.0 / 48.0 / 86.5% with the length given);
    with the stop decision taken from the attention on the end marker the two agree within 3
    points (49.5 / 52.5, 75.5 / 75.5, 16.0 / 17.0).
    """
    overrides = {**LEARNING_MODEL, "training.seed": 1}
    today = experiment.EXPERIMENT.train(config(add_jump_slice, **overrides), tmp_path / "today")["test"]
    assert today["seq_acc"] <= today["seq_acc_given_length"] - 20.0
    stop = {"model.end_marker": "true", "model.stop_from_attention": "true"}
    stopping = experiment.EXPERIMENT.train(config(add_jump_slice, **overrides, **stop), tmp_path / "stop")[
        "test"
    ]
    assert stopping["seq_acc"] >= stopping["seq_acc_given_length"] - 2.0
    assert stopping["seq_acc"] >= 60.0
    plots = plot_attention(tmp_path / "stop", ["jump twice after walk left"], device_name="cpu")
    assert plots[0].is_file()  # the heatmap has a column for the end marker
    # Why today's model cannot stop: "jump" is only seen alone, so both of its decoding steps read
    # out m_jump, and maximum likelihood splits m_jump between I_JUMP and <eos>; words also seen
    # composed ("walk") read out their action alone.
    today_readout = word_readouts(tmp_path / "today")
    assert today_readout["jump"]["<eos>"] >= 0.1
    assert today_readout["walk"]["<eos>"] <= 0.01 and today_readout["walk"]["I_WALK"] >= 0.9


def test_the_alignment_reading_never_composed_words_as_unknown_solves_the_tiny_add_jump(
    add_jump_slice, tmp_path
):
    """Learning test of ``model.alignment_word_dropout`` with the stop from attention (~15 s).

    On the miniature add-jump split, seeds 0-4, this model stops by itself at 95.0 / 98.0 / 99.0 /
    93.5 / 97.0% (length given 95.0 / 99.0 / 99.0 / 94.0 / 97.0); today's model at 0.0 / 20.5 /
    0.0 / 0.0 / 26.0% (length given 37.0 / 48.0 / 86.5 / 96.0 / 86.5), with the stop from attention
    alone at 52.5 / 75.5 / 17.0 / 23.0 / 60.5% given the length (docs/results.md).
    """
    mechanism = {
        "model.end_marker": "true",
        "model.stop_from_attention": "true",
        "model.alignment_word_dropout": 0.1,
    }
    run = config(add_jump_slice, **LEARNING_MODEL, **mechanism, **{"training.seed": 1})
    results = experiment.EXPERIMENT.train(run, tmp_path / "run")["test"]
    assert results["seq_acc"] >= 95.0
    assert results["seq_acc"] >= results["seq_acc_given_length"] - 2.0


@pytest.mark.parametrize("decoder_init", ["summary", "learned"])
def test_aligning_an_alone_only_word_as_its_peers_solves_the_tiny_add_jump(
    add_jump_alone_slice, tmp_path, decoder_init
):
    """Learning test of ``model.alignment_peers`` with the stop from attention (~10 s).

    On this miniature, seeds 0-4 all reach 100.0% with ``<eos>`` and with the length given; the
    three options of the test above (word dropout instead of peers) 99.0 / 99.5 / 99.0 / 94.5 /
    99.5% (docs/results.md, session 17). Seed 3, the worst of those, is the one trained here,
    also with ``model.decoder_init=learned`` (the decoder's start of issue 29's turn-left fix),
    which must not cost add-jump its stop.
    """
    mechanism = {
        "model.end_marker": "true",
        "model.stop_from_attention": "true",
        "model.alignment_peers": "true",
        "model.decoder_init": decoder_init,
    }
    run = config(add_jump_alone_slice, **LEARNING_MODEL, **mechanism, **{"training.seed": 3})
    results = experiment.EXPERIMENT.train(run, tmp_path / "run")["test"]
    assert results["seq_acc"] >= 99.0
    assert results["seq_acc_given_length"] >= 99.0


def word_readouts(run_dir: Path) -> dict[str, dict[str, float]]:
    """The readout of each source word's translation alone, by output token."""
    model, source_vocab, target_vocab = load_trained(experiment.EXPERIMENT, run_dir, "cpu").loaded
    table = model.word_translations()
    return {
        word: {token: float(table[row, column]) for column, token in enumerate(target_vocab.tokens)}
        for row, word in enumerate(source_vocab.tokens)
    }


def test_run_directory_evaluation_and_resume(scan_slice, tmp_path, capsys):
    run_dir = tmp_path / "run"
    first = experiment.EXPERIMENT.train(config(scan_slice, **TINY_MODEL, **{"training.epochs": 1}), run_dir)
    assert set(first["test"]) == {"seq_acc", "seq_acc_given_length", "loss", "examples"}
    assert first["test"]["examples"] == 200.0
    summary = json.loads((run_dir / "eval" / "summary.json").read_text())
    assert summary == json.loads(json.dumps(first))
    after_one_epoch = tmp_path / "after_one_epoch"  # its per-example results, for compare below
    (after_one_epoch / "eval").mkdir(parents=True)
    (after_one_epoch / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    predictions = (run_dir / "eval" / "test.predictions.tsv").read_text()
    (after_one_epoch / "eval" / "test.predictions.tsv").write_text(predictions)
    header, *rows = [line.split("\t") for line in predictions.splitlines()]
    assert header == ["example", "source", "target", "prediction", "seq_acc", "seq_acc_given_length"]
    assert [row[0] for row in rows] == [str(index) for index in range(200)]
    assert 100 * sum(row[4] == "1" for row in rows) / 200 == pytest.approx(first["test"]["seq_acc"])
    assert 100 * sum(row[5] == "1" for row in rows) / 200 == pytest.approx(
        first["test"]["seq_acc_given_length"]
    )
    with pytest.raises(ConfigError, match="already holds a run"):
        experiment.EXPERIMENT.train(config(scan_slice, **TINY_MODEL, **{"training.epochs": 1}), run_dir)
    resumed = experiment.EXPERIMENT.train(
        config(scan_slice, **TINY_MODEL, **{"training.epochs": 2}), run_dir, resume=True
    )
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    again = experiment.EXPERIMENT.evaluate(run_dir, device_name="cpu")
    assert again["test"]["seq_acc"] == resumed["test"]["seq_acc"]
    other = experiment.EXPERIMENT.evaluate(run_dir, data_files=[str(scan_slice["small"])], device_name="cpu")
    assert other["small"]["examples"] == 100.0
    assert json.loads((run_dir / "eval" / "files" / "small.json").read_text())["examples"] == 100.0
    assert json.loads((run_dir / "eval" / "summary.json").read_text())["test"] == again["test"]
    assert len((run_dir / "eval" / "files" / "small.predictions.tsv").read_text().splitlines()) == 101
    out = tmp_path / "compare.json"
    arguments = ["compare", str(after_one_epoch), str(run_dir), "--metric", "seq_acc_given_length"]
    assert main([*arguments, "--samples", "200", "--out", str(out)]) == 0
    comparison = json.loads(out.read_text())["comparisons"][str(run_dir)]
    assert comparison["a"] == pytest.approx(first["test"]["seq_acc_given_length"])
    assert comparison["b"] == pytest.approx(again["test"]["seq_acc_given_length"])
    assert comparison["units"] == 200 and comparison["statistic"] == "accuracy"
    assert json.loads(out.read_text())["metric"] == "test/test/seq_acc_given_length"
    assert "test/test/seq_acc_given_length" in capsys.readouterr().out  # the table names the metric
    full_name = ["compare", str(after_one_epoch), str(run_dir), "--metric", "test/test/seq_acc_given_length"]
    assert main([*full_name, "--samples", "200", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["comparisons"][str(run_dir)] == comparison
    assert main([*full_name, "--test-set", "small"]) == 2
    assert "names test set 'test', --test-set 'small'" in capsys.readouterr().err
    assert main(["compare", str(after_one_epoch), str(run_dir), "--metric", "rouge"]) == 2
    assert "has the metrics seq_acc, seq_acc_given_length, bleu" in capsys.readouterr().err
    assert main(["compare", str(after_one_epoch), str(run_dir), "--metric", "bleu", "--samples", "50"]) == 0
    assert "test/test/bleu" in capsys.readouterr().out  # BLEU of any predictions file
    assert main(["compare", str(run_dir), str(run_dir), "--test-set", "small"]) == 0
    assert "100 examples" in capsys.readouterr().out
    plots = plot_attention(run_dir, ["jump twice after walk left"], device_name="cpu")
    assert plots[0].is_file() and plots[0].suffix == ".png"
    assert main(["plot", str(run_dir), "--index", "0", "5", "--device", "cpu"]) == 0
    printed = [Path(line).name for line in capsys.readouterr().out.split()]
    expected = ["attention_test_0.png", "attention_test_5.png", "translations.png", "training_curves.png"]
    assert printed == expected
    assert main(["plot", str(run_dir), "--index", "200"]) == 2
    assert "--index [200] out of range: test has 200 examples (0..199)" in capsys.readouterr().err
    assert main(["plot", str(run_dir), "--data", str(scan_slice["small"]), "--index", "3"]) == 0
    assert Path(capsys.readouterr().out.split()[0]).name == "attention_small_3.png"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))}


def test_a_trained_run_is_evaluated_with_other_evaluation_settings_into_another_folder(
    scan_slice, tmp_path, capsys, monkeypatch
):
    """``attnlab evaluate RUN evaluation.KEY=VALUE --out OUT``: the settings apply (the decoding
    budget shows in the predictions, the stop threshold reaches the decoder), the results and
    ``evaluation.yaml`` go to OUT, and the run's ``eval/`` keeps its bytes."""
    run_dir = tmp_path / "run"
    tiny = {**TINY_MODEL, "data.train_limit": 64, "training.epochs": 1}
    experiment.EXPERIMENT.train(config(scan_slice, **tiny), run_dir)
    capsys.readouterr()
    own, tsv = _files(run_dir / "eval"), "test.predictions.tsv"
    thresholds = []

    def spy(model, split, target, options, device, **kwargs):
        thresholds.append(options.stop_threshold)
        return evaluate_split(model, split, target, options, device, **kwargs)

    monkeypatch.setattr(experiment, "evaluate_split", spy)
    out = tmp_path / "stop"
    changed = ["evaluation.stop_threshold=0.8", "evaluation.max_length=3"]
    assert main(["evaluate", str(run_dir), *changed, "--out", str(out), "--device", "cpu"]) == 0
    assert f"results: {out}" in capsys.readouterr().out
    assert thresholds == [0.8]
    assert _files(run_dir / "eval") == own
    assert sorted(_files(out)) == [
        "evaluation.yaml",
        "summary.json",
        "test.errors.json",
        "test.json",
        "test.predictions.tsv",
    ]
    counts = json.loads((out / "test.errors.json").read_text())
    assert counts == read_prediction_errors(out / "test.predictions.tsv") and counts["examples"] == 200
    record = load_yaml(out / "evaluation.yaml")
    assert record["run"] == str(run_dir.resolve()) and record["overrides"] == changed
    assert record["checkpoint"] == str((run_dir / "checkpoints" / "best.pt").resolve())
    assert record["evaluation"]["stop_threshold"] == 0.8 and record["evaluation"]["max_length"] == 3
    assert json.loads((out / "test.json").read_text())["checkpoint"] == record["checkpoint"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"test"} and summary["test"]["examples"] == 200.0
    longest = {
        name: max(len(line.split("\t")[3].split()) for line in text.splitlines()[1:])
        for name, text in [("out", (out / tsv).read_text()), ("own", own[tsv].decode())]
    }
    assert longest["out"] <= 3 < longest["own"]
    # without overrides, --out redirects the run's own evaluation (and records it)
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "again"), "--device", "cpu"]) == 0
    assert load_yaml(tmp_path / "again" / "evaluation.yaml")["overrides"] == []
    assert (tmp_path / "again" / tsv).read_bytes() == own[tsv]
    assert _files(run_dir / "eval") == own
    capsys.readouterr()
    for arguments, message in [
        (["evaluation.stop_threshold=0.8"], "evaluation.stop_threshold=0.8 would evaluate"),
        (["evaluation.bleu=true"], "give --out DIR for the results"),
        (["evaluation.stop_treshold=0.8", "--out", str(out)], "unknown key(s) ['stop_treshold']; valid keys"),
        (["evaluation.stop_threshold=2", "--out", str(out)], "stop_threshold must be a probability"),
        (["model.dropout=0.5", "--out", str(out)], "a trained model cannot be changed"),
        (["evaluation.bleu=true", "--out", str(run_dir / "eval")], "inside the run's own results folder"),
        (["evaluation.bleu=true", "--out", str(run_dir)], "holds other files and no evaluation.yaml"),
    ]:
        assert main(["evaluate", str(run_dir), *arguments, "--device", "cpu"]) == 2, arguments
        error = capsys.readouterr().err
        assert error.startswith("attnlab: error: ") and message in error and "Traceback" not in error
    assert _files(run_dir / "eval") == own
    assert load_yaml(out / "evaluation.yaml") == record  # the refused evaluations wrote nothing
    assert not (run_dir / "evaluation.yaml").exists()
    bad = tmp_path / "bad.txt"
    bad.write_text("IN: walk OUT: I_WALK\nIN: OUT: I_WALK\n")
    fresh = tmp_path / "fresh"
    assert main(["evaluate", str(run_dir), "--data", str(bad), "--out", str(fresh), "--device", "cpu"]) == 2
    assert "bad.txt line 2: empty command" in capsys.readouterr().err
    assert not (fresh / "evaluation.yaml").exists()  # no record of an evaluation that never ran
    # a folder an earlier evaluation wrote is reused
    again = ["evaluate", str(run_dir), "evaluation.max_length=4", "--out", str(out), "--device", "cpu"]
    assert main(again) == 0
    assert load_yaml(out / "evaluation.yaml")["overrides"] == ["evaluation.max_length=4"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"model.architecture": "gru_attention", "model.previous_output": "false"},
        {"model.architecture": "gru_attention"},
        {
            "model.architecture": "gru_attention",
            "model.attender": "shift",
            "model.end_marker": "true",
            "model.stop_from_attention": "true",
        },
        {
            "model.architecture": "gru_attention",
            "model.attender": "shift",
            "model.decoder_cell": "lstm",
            "model.end_marker": "true",
            "model.stop_from_attention": "true",
        },
        {"model.translation_encoder": "rnn"},
        {"model.translate_from_context": "true"},
        {"model.end_marker": "true"},
        {"model.end_marker": "true", "model.stop_from_attention": "true", "evaluation.given_length": "true"},
        {"training.uniform_alignment_epochs": "1", "training.epochs": "2"},
    ],
)
def test_baselines_and_ablations_train(scan_slice, tmp_path, overrides):
    tiny = {**TINY_MODEL, "data.train_limit": 64, "training.epochs": 1, "evaluation.given_length": "false"}
    results = experiment.EXPERIMENT.train(config(scan_slice, **{**tiny, **overrides}), tmp_path / "run")
    assert 0.0 <= results["test"]["seq_acc"] <= 100.0
    assert ("seq_acc_given_length" in results["test"]) == (overrides.get("evaluation.given_length") == "true")


def _uniform_alignment_task(scan_slice, epochs: int):
    """A training task and model with ``training.uniform_alignment_epochs = epochs``."""
    parsed = config(scan_slice, **TINY_MODEL, **{"training.uniform_alignment_epochs": epochs})
    splits = scan_data.load_splits(parsed.data)
    source, target = build_vocabularies(splits["train"].examples)
    train, validation = (
        scan_data.encode_split(splits[name], source, target, name) for name in ("train", "validation")
    )
    task = experiment.ScanTrainingTask(train, validation, target, parsed, torch.device("cpu"))
    return task, experiment.build_model(parsed.model, source, target)


def test_uniform_alignment_is_on_for_the_first_epochs_only(scan_slice):
    task, model = _uniform_alignment_task(scan_slice, 2)
    switched = []
    for epoch in range(4):
        task.start_epoch(model, epoch)
        switched.append(model.uniform_alignment)
    assert switched == [True, True, False, False]


def test_validation_in_a_uniform_epoch_sees_the_model_as_it_is_evaluated(scan_slice, monkeypatch):
    """The best checkpoint is evaluated with its alignment on, so validation measures it that way."""
    task, model = _uniform_alignment_task(scan_slice, 1)
    seen = []
    monkeypatch.setattr(
        experiment,
        "validate_split",
        lambda model, *args, **kwargs: seen.append(model.uniform_alignment) or {"loss": 1.0, "seq_acc": 0.0},
    )
    task.start_epoch(model, 0)
    task.validate(model)
    assert seen == [False] and model.uniform_alignment  # validated without it, then switched back


@pytest.mark.parametrize(
    ("stop_threshold", "stop_lookahead", "seq_acc"),
    [(None, None, 0.0), (0.6, None, 0.0), (0.9, None, 100.0), (None, 0.7, 100.0), (None, 0.5, 0.0)],
)
def test_evaluation_stop_rules_are_the_stop_rules_of_seq_acc_only(
    stop_threshold, stop_lookahead, seq_acc, scripted_decoder
):
    """``a b a``: p(<eos>) is 0.3, 0.6, 0.2, 0.95, 1.0 by step, so plain greedy stops after ``a``,
    and a threshold above 0.6 or a lookahead above 0.6 stop after ``a b a``; the given-length
    accuracy never moves."""
    script = torch.tensor(
        [
            [0, 0, 0.3, 0.7, 0],
            [0, 0, 0.6, 0, 0.4],
            [0, 0, 0.2, 0.8, 0],
            [0, 0, 0.95, 0, 0.05],
            [0, 0, 1.0, 0, 0],
        ]
    )
    source, target = (
        Vocabulary(["<pad>", "x"]),
        Vocabulary(["<pad>", "<sos>", "<eos>", "a", "b"], TARGET_SPECIALS),
    )
    split = scan_data.encode_split(
        scan_data.Split([Seq2SeqExample(("x",), ("a", "b", "a"))], "a test"), source, target, "test"
    )
    options = dataclasses.replace(
        experiment.ScanEvaluationConfig(),
        max_length=len(script),  # the scripted steps; the lookahead decodes the whole budget
        stop_threshold=stop_threshold,
        stop_lookahead=stop_lookahead,
    )
    metrics = evaluate_split(scripted_decoder(script), split, target, options, torch.device("cpu"))
    assert metrics["seq_acc"] == seq_acc and metrics["seq_acc_given_length"] == 100.0


def test_evaluation_in_length_sorted_batches_reports_every_example_in_the_splits_order():
    """Batches of similar length are an evaluation shortcut only: each example's prediction and
    verdict, put back in the split's order, are those of the example decoded alone."""
    examples = generate_scan()[::97][:40]
    source, target = build_vocabularies(examples)
    split = scan_data.encode_split(scan_data.Split(examples, "a test"), source, target, "test")
    torch.manual_seed(0)
    tiny = {"d_model": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "ff_dim": 32, "dropout": 0.0}
    model = TransformerSeq2Seq(len(source), len(target), **tiny)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    everything = collate(split.dataset, list(range(len(examples))))
    for _ in range(60):  # a little training: outputs that differ from example to example
        optimizer.zero_grad()
        teacher_forced_loss(model, everything).backward()
        optimizer.step()
    model.eval()
    options = dataclasses.replace(experiment.ScanEvaluationConfig(), batch_size=8, max_length=12)
    outcomes = ExampleOutcomes()
    evaluate_split(model, split, target, options, torch.device("cpu"), outcomes=outcomes)
    alone = []
    for row in range(len(examples)):
        batch = collate(split.dataset, [row])
        tokens = model.greedy_decode(batch.source, batch.source_padding_mask, 12).tokens[0].tolist()
        alone.append(tokens[: tokens.index(model.eos_id)] if model.eos_id in tokens else tokens)
    assert len({tuple(p) for p in alone}) > 5  # the examples are told apart, so an order error shows
    assert outcomes.predictions == alone
    assert len(outcomes.correct["seq_acc"]) == len(examples)


def test_unknown_words_become_counted_unk_and_bleu_is_reported(tmp_path):
    pytest.importorskip("sacrebleu")
    train = [
        Seq2SeqExample(tuple(f"w{i} w{i + 1} .".split()), tuple(f"m{i} m{i + 1} .".split()))
        for i in range(40)
    ]
    test = [
        Seq2SeqExample(("w1", "daxy", "."), ("m1", "daxiste", ".")),
        *(Seq2SeqExample((f"w{i}", f"w{i + 1}", "."), (f"m{i}", f"m{i + 1}", ".")) for i in range(3, 14)),
    ]
    write_scan_file(tmp_path / "train.txt", train)
    write_scan_file(tmp_path / "test.txt", test)
    files = {"train": tmp_path / "train.txt", "test": tmp_path / "test.txt"}
    overrides = {**TINY_MODEL, "data.unknown_words": "unk", "evaluation.bleu": "true", "training.epochs": 1}
    results = experiment.EXPERIMENT.train(config(files, **overrides), tmp_path / "run")["test"]
    assert results["unknown_source_words"] == 1.0 and results["unknown_target_words"] == 1.0
    assert 0.0 <= results["bleu"] <= 100.0
    # the predictions file keeps the raw references BLEU was scored against: compare's BLEU of it
    # on the whole test set is the reported BLEU exactly
    _, first, *_ = (tmp_path / "run" / "eval" / "test.predictions.tsv").read_text().splitlines()
    assert first.split("\t")[1:3] == ["w1 <unk> .", "m1 daxiste ."]
    units = read_units(tmp_path / "run", "test", None, "bleu")
    assert BLEU_STATISTIC.of_sums(units.scores.values.sum(axis=0, keepdims=True))[0] == results["bleu"]


def test_unknown_word_at_evaluation_names_file_and_line(scan_slice, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("IN: walk OUT: I_WALK\nIN: walk quickly OUT: I_WALK\n")
    with pytest.raises(UnknownTokenError, match=rf"{bad} line 2 \(source\)"):
        experiment.EXPERIMENT.train(
            config(scan_slice, **TINY_MODEL, **{"training.epochs": 1, "data.test_files": f"{{t: {bad}}}"}),
            tmp_path / "run",
        )


def test_output_markers_are_learnt_and_exact_match_is_scored_without_them(scan_slice, tmp_path, monkeypatch):
    """Learning test of ``data.output_markers`` (~10 s on one CPU thread, fixed seed): the model
    writes the markers, and ``seq_acc`` compares its output with the markers stripped."""
    ignored: list[list[str]] = []

    def recording(model, split, target, *args, **kwargs):
        ignored.append([target.id_to_token(i) for i in kwargs["ignored_ids"]])
        return evaluate_split(model, split, target, *args, **kwargs)

    monkeypatch.setattr(experiment, "evaluate_split", recording)
    run_config = config(scan_slice, **LEARNING_MODEL, **{"data.output_markers": "[repetition, sentence]"})
    results = experiment.EXPERIMENT.train(run_config, tmp_path / "run")
    assert ignored == [["<rep>", "<sep>"]]
    assert results["test"]["seq_acc"] >= 95.0
    rows = (tmp_path / "run" / "eval" / "test.predictions.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    fields = [dict(zip(header, row.split("\t"))) for row in rows[1:]]
    predictions = [row["prediction"].split() for row in fields]
    assert sum("<rep>" in p for p in predictions) > 20 and sum("<sep>" in p for p in predictions) > 100
    for row, prediction in zip(fields, predictions):
        gold = scan.marked_actions(row["source"], ["repetition", "sentence"])
        assert tuple(row["target"].split()) == gold
        assert row["seq_acc"] == str(int(scan.strip_markers(prediction) == scan.strip_markers(gold)))
    errors = json.loads((tmp_path / "run" / "eval" / "test.errors.json").read_text())
    assert errors["wrong"] == sum(row["seq_acc"] == "0" for row in fields)  # counted without the markers


def test_output_markers_need_the_grammars_commands_and_outputs(scan_slice, tmp_path):
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("IN: walk OUT: I_WALK\nIN: walk twice OUT: I_WALK\n")
    markers = {"data.output_markers": "[repetition]"}
    with pytest.raises(
        DataFormatError, match=r"wrong.txt line 2: .*the output of 'walk twice' is not its interpretation"
    ):
        scan_data.load_splits(config({**scan_slice, "test": wrong}, **markers).data)
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("IN: walk OUT: I_WALK\nIN: fly OUT: I_FLY\n")
    with pytest.raises(DataFormatError, match=r"unknown.txt line 2: data.output_markers needs SCAN commands"):
        scan_data.load_splits(config({**scan_slice, "test": unknown}, **markers).data)


def test_bad_lines_in_a_data_file_are_data_errors(scan_slice, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("IN: walk OUT: I_WALK\nIN: OUT: I_WALK\n")
    with pytest.raises(DataFormatError, match="line 2: empty command"):
        scan_data.load_splits(config({**scan_slice, "test": bad}).data)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.split=add jump"], "split must be a public split name"),
        (["data.split=template_around_right", "data.generate=true"], "generate: true builds the splits"),
        (["data.split=files"], "needs train_file and test_files"),
        (["data.split=length", "data.max_train_actions=26"], "max_train_actions=26 applies to the generated"),
        (["data.split=addprim_jump", "data.template=walk twice"], "template='walk twice' applies to split"),
        (
            ["data.split=addprim_jump", "data.generate=true", "data.oversample_fraction=0"],
            "oversample_fraction=0.0 applies to split: primitive only; the generated split 'addprim_jump'",
        ),
        (["data.split=primitive", "data.test_fraction=0.1"], "test_fraction=0.1 applies to split: random"),
        (["data.train_file=x.txt"], "need split: files"),
        (["model.previous_output=false"], "gru_attention only"),
        (["model.architecture=gru_attention", "model.translation_encoder=rnn"], "syntactic_attention only"),
        (
            ["model.architecture=transformer", "model.end_marker=true"],
            "end_marker / stop_from_attention apply to syntactic_attention and gru_attention",
        ),
        (["model.attender=shift"], "attender / attender_options / decoder_cell apply to gru_attention"),
        (["model.decoder_cell=lstm"], "attender / attender_options / decoder_cell apply to gru_attention"),
        (["model.architecture=gru_attention", "model.decoder_cell=rnn"], "decoder_cell"),
        (
            ["model.architecture=gru_attention", "model.attender=nosuch"],
            "model: unknown attender 'nosuch'",
        ),
        (
            [
                "model.architecture=gru_attention",
                "model.attender=shift",
                "model.attender_options={moves: [sideways]}",
            ],
            "model: ShiftAttender: option moves",
        ),
        (
            ["model.architecture=gru_attention", "model.stop_from_attention=true"],
            "stop_from_attention needs end_marker: true",
        ),
        (["model.stop_from_attention=true"], "stop_from_attention needs end_marker: true"),
        (
            ["model.architecture=gru_attention", "model.alignment_word_dropout=0.1"],
            "syntactic_attention only",
        ),
        (["model.alignment_word_dropout=1.0"], r"alignment_word_dropout must be in \[0, 1\), got 1.0"),
        (["model.architecture=gru_attention", "model.alignment_peers=true"], "syntactic_attention only"),
        (["model.architecture=gru_attention", "model.decoder_init=learned"], "syntactic_attention only"),
        (["model.decoder_init=zeros"], "decoder_init"),
        (
            ["model.architecture=transformer", "model.transformer.stop_from_attention=true"],
            "a SCAN command ends in a word, so it needs transformer.end_marker: true",
        ),
        (
            ["model.architecture=transformer", "model.transformer.cross_attention=[dot, dott]"],
            r"config.model.transformer: cross_attention\[1\]: unknown head 'dott'; expected 'dot' or",
        ),
        (["model.decoder_hidden_dim=300"], "2 \\* encoder_hidden_dim"),
        (["training.patience=0"], "patience"),
        (["training.uniform_alignment_epochs=-1"], "uniform_alignment_epochs must be >= 0"),
        (
            ["model.architecture=gru_attention", "training.uniform_alignment_epochs=1"],
            "uniform_alignment_epochs applies to model.architecture: syntactic_attention only",
        ),
        (["data.validation_fraction=1.5"], "validation_fraction"),
        (
            ["data.output_markers=[clause]"],
            r"output_markers must be a list of kinds among \['repetition', 'sentence'\]",
        ),
        (["data.output_markers=[sentence, sentence]"], "output_markers names a kind twice"),
        (["evaluation.stop_threshold=0"], r"evaluation: stop_threshold must be a probability in \(0, 1\]"),
        (["evaluation.stop_threshold=1.5"], r"stop_threshold must be a probability in \(0, 1\] .*, got 1.5"),
        (["evaluation.stop_lookahead=0"], r"evaluation: stop_lookahead must be a probability in \(0, 1\]"),
        (["model.attenders=additive"], "unknown key"),
    ],
)
def test_config_errors_name_the_problem(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        parsed = experiment.EXPERIMENT.parse_config(resolve_config("scan", overrides))
        experiment.build_model(parsed.model, *build_vocabularies([Seq2SeqExample(("a",), ("b",))]))


def test_builtin_configs_select_the_scan_experiment():
    for name in ("scan", "scan_robust", "scan_gru_attention", "scan_gru_shift", "mt_eng_fra"):
        data = resolve_config(name, [])
        assert experiment_for(data) is experiment.EXPERIMENT
        experiment.EXPERIMENT.parse_config(data)


def test_the_robust_config_is_the_papers_model_with_the_measured_options():
    """scan_robust must stay the configuration docs/results.md measured: scan.yaml plus four options."""
    options = [
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_peers=true",
        "model.decoder_init=learned",
    ]
    assert resolve_config("scan_robust", []) == resolve_config("scan", options)


def test_generated_splits_hold_out_twenty_percent_for_validation():
    data = experiment.EXPERIMENT.parse_config(
        resolve_config("scan", ["data.split=addprim_jump", "data.generate=true"])
    ).data
    splits = scan_data.load_splits(data)
    assert len(splits["train"].examples) + len(splits["validation"].examples) == 14_670
    assert len(splits["validation"].examples) == round(0.2 * 14_670)
    assert len(splits["test"].examples) == 7_706
    cut_at_26 = scan_data.load_splits(
        experiment.EXPERIMENT.parse_config(
            resolve_config("scan", ["data.split=length", "data.generate=true", "data.max_train_actions=26"])
        ).data
    )
    assert max(len(ex.target) for part in ("train", "validation") for ex in cut_at_26[part].examples) == 26
    assert min(len(ex.target) for ex in cut_at_26["test"].examples) == 27
    template = scan_data.load_splits(
        experiment.EXPERIMENT.parse_config(
            resolve_config("scan", ["data.split=template", "data.test_limit=10"])
        ).data
    )
    assert all("jump around right" in " ".join(ex.source) for ex in template["test"].examples)
    assert len(template["test"].examples) == 10


def test_length_splits_report_exact_match_by_the_longest_sentence(caplog):
    commands = ["walk", "jump around left thrice", "walk and jump around left thrice", "run twice"]
    correct = {"seq_acc": [True, True, False, False], "seq_acc_given_length": [True, True, True, False]}
    metrics = experiment.sentence_length_metrics("test", commands, correct, 22)
    # two commands have a 24-action sentence, two only short ones
    assert metrics == {
        "long_sentence_examples": 2,
        "seq_acc_short_sentences": 50.0,
        "seq_acc_long_sentence": 50.0,
        "seq_acc_given_length_short_sentences": 50.0,
        "seq_acc_given_length_long_sentence": 100.0,
    }
    cut_at_24 = experiment.sentence_length_metrics("test", commands, {"seq_acc": correct["seq_acc"]}, 24)
    assert cut_at_24 == {"long_sentence_examples": 0, "seq_acc_short_sentences": 50.0}
    assert experiment.sentence_length_metrics("test", ["walk", "fly"], correct, 22) == {}
    assert "test: no exact match by sentence length: not a SCAN command: 'fly'" in caplog.text


def test_a_length_split_run_reports_its_test_commands_by_the_longest_sentence(tmp_path):
    run_config = experiment.EXPERIMENT.parse_config(
        resolve_config(
            "scan",
            [
                "data.split=length",
                "data.generate=true",
                "data.train_limit=200",
                "data.test_limit=60",
                "training.epochs=1",
                "training.progress=false",
                *(f"{key}={value}" for key, value in TINY_MODEL.items()),
            ],
        )
    )
    results = experiment.EXPERIMENT.train(run_config, tmp_path / "run")["test"]
    rows = (tmp_path / "run" / "eval" / "test.predictions.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    fields = [row.split("\t") for row in rows[1:]]
    longer = [max(sentence_actions(row[header.index("source")])) > 22 for row in fields]
    assert results["long_sentence_examples"] == sum(longer) > 0
    for metric in ("seq_acc", "seq_acc_given_length"):
        right = [row[header.index(metric)] == "1" for row in fields]
        for suffix, group in (("short_sentences", False), ("long_sentence", True)):
            flags = [flag for flag, long in zip(right, longer) if long == group]
            assert results[f"{metric}_{suffix}"] == pytest.approx(100 * sum(flags) / len(flags))


def test_russin2019_report_puts_mean_std_median_beside_the_paper(tmp_path):
    from attnlab.experiments.scan import recipe as russin2019

    for folder, values in {
        "table1/addprim_jump/syntactic_attention": (100.0, 50.0, 90.0),
        "table1/simple/gru_attention": (100.0, 100.0, 100.0),
        "table2/translation_rnn": (2.0, 4.0, 0.0),
        "table1/length/syntactic_attention": (12.0,),
    }.items():
        for seed, value in enumerate(values):
            summary = tmp_path / folder / f"seed{seed}" / "eval" / "summary.json"
            summary.parent.mkdir(parents=True)
            summary.write_text(json.dumps({"test": {"seq_acc": value, "seq_acc_given_length": 100.0}}))
    text = russin2019.report(tmp_path)
    assert "80.0 ± 26.5 (median 90.0; n=3)" in text  # add-jump, ours
    assert "78.4 ± 27.4 (median 91.0; n=25)" in text  # add-jump, paper
    assert "| GRU + attn (Bastings et al.) (paper) | 100.0 ± 0.0 | 18.1 ± 1.1 |" in text
    assert "RNN for translation encoding | 2.0 ± 2.0 (median 2.0; n=3)" in text
    assert "| 12.0 (n=1) |" in text  # one seed: no spread shown
    assert (tmp_path / "results.md").read_text().strip() == text.strip()
    assert "Stopping by itself" not in text  # no run of the stop table yet
    for seed, (eos, given) in enumerate([(90.0, 95.0), (80.0, 85.0)]):
        summary = tmp_path / "stop" / "composed_words" / f"seed{seed}" / "eval" / "summary.json"
        summary.parent.mkdir(parents=True)
        summary.write_text(json.dumps({"test": {"seq_acc": eos, "seq_acc_given_length": given}}))
    summary = tmp_path / "stop" / "composed_words" / "length" / "seed0" / "eval" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"test": {"seq_acc": 21.0, "seq_acc_given_length": 50.0}}))
    stop_table = russin2019.report(tmp_path).split("#### Stopping by itself")[1]
    # columns: add jump, add turn left, simple, length; the paper's model is Table 1's runs
    assert "| Syntactic Attention (<eos>) | 80.0 ± 26.5 (median 90.0; n=3) |  |  | 12.0 (n=1) |" in stop_table
    assert (
        "| + never-composed words aligned as unknown (<eos>) | 85.0 ± 7.1 (median 85.0; n=2) |  |  "
        "| 21.0 (n=1) |" in stop_table
    )
    assert (
        "| + never-composed words aligned as unknown (length given) | 90.0 ± 7.1 (median 90.0; n=2) "
        "|  |  | 50.0 (n=1) |" in stop_table
    )
    assert "| Syntactic Attention (paper, length given) | 78.4 ± 27.4 (median 91.0; n=25) |" in stop_table
    assert "+ end marker" not in stop_table  # no runs: no row
    folders = [folder for folder, _, _ in russin2019.cells(["table2"])]
    assert folders == [
        "table1/addprim_jump/syntactic_attention",
        "table2/translation_rnn",
        "table2/translate_from_context",
    ]


def test_russin2019_cells_filter_keeps_pattern_order_and_refuses_patterns_matching_nothing():
    from attnlab.experiments.scan import recipe as russin2019

    found = russin2019.cells(["table1", "table2"])
    chosen = russin2019.select_cells(found, ["table2/*", "table1/*/syntactic_attention"])
    assert [folder for folder, _, _ in chosen] == [
        "table2/translation_rnn",
        "table2/translate_from_context",
        *(f"table1/{split}/syntactic_attention" for split in russin2019.SPLITS),
    ]
    assert russin2019.select_cells(found, None) == found
    with pytest.raises(ConfigError, match=r"--cells: 'mt/\*' matches no cell"):
        russin2019.select_cells(found, ["mt/*"])


def _public_layout(root: Path) -> None:
    """A checkout of the SCAN repository in miniature: standard, template, filler and a train file
    whose test file is missing."""
    for name in (
        "add_prim_split/tasks_{}_addprim_jump",
        "template_split/tasks_{}_template_around_right",
        "filler_split/tasks_{}_filler_num1",
    ):
        for part, examples in (
            ("train", [Seq2SeqExample(("walk",), ("I_WALK",))] * 10),
            ("test", [Seq2SeqExample(("jump",), ("I_JUMP",))]),
        ):
            write_scan_file(root / f"{name.format(part)}.txt", examples)
    write_scan_file(
        root / "filler_split" / "tasks_train_filler_num2.txt", [Seq2SeqExample(("run",), ("I_RUN",))]
    )


@pytest.mark.parametrize("split", ["addprim_jump", "template_around_right", "filler_num1"])
def test_every_public_split_folder_is_read_by_name(split, tmp_path):
    _public_layout(tmp_path)
    data = experiment.EXPERIMENT.parse_config(
        resolve_config("scan", [f"data.split={split}", f"data.root={tmp_path}"])
    ).data
    splits = scan_data.load_splits(data)
    assert [ex.source for ex in splits["test"].examples] == [("jump",)]
    assert split in splits["test"].origin


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ("template_jump_around_right", "no file named tasks_train_template_jump_around_right.txt"),
        ("filler_num2", "no file named tasks_test_filler_num2.txt"),
    ],
)
def test_a_missing_public_split_is_one_clear_error_listing_the_splits_there(split, message, tmp_path, capsys):
    _public_layout(tmp_path)
    overrides = [
        f"data.split={split}",
        f"data.root={tmp_path}",
        "training.epochs=1",
        *(f"{key}={value}" for key, value in TINY_MODEL.items()),
    ]
    assert main(["train", "scan", *overrides, "--run-dir", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert "the splits here are: addprim_jump, filler_num1, template_around_right" in error
    assert len(error.strip().splitlines()) == 1


def test_russin2019_stop_table_cells_add_each_option_to_the_one_before():
    from attnlab.experiments.scan import recipe as russin2019

    found = {folder: overrides for folder, _, overrides in russin2019.cells(["stop"])}
    variants = ["end_marker", "stop_from_attention", "composed_words", "peers", "learned_init"]
    assert list(found) == [
        "table1/addprim_jump/syntactic_attention",
        *(f"stop/{variant}" for variant in variants),
        *(
            folder
            for split in ("addprim_turn_left", "simple", "length")
            for folder in (
                f"table1/{split}/syntactic_attention",
                *(f"stop/{variant}/{split}" for variant in variants),
            )
        ),
    ]
    assert found["stop/learned_init/length"] == (
        "data.split=length",
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_peers=true",
        "model.decoder_init=learned",
    )
    assert len(russin2019.cells(["table1", "stop"])) == len(russin2019.cells(["table1"])) + 5 * 4
    assert found["stop/peers"] == (
        "data.split=addprim_jump",
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_peers=true",
    )
    assert found["stop/composed_words"] == (
        "data.split=addprim_jump",
        "model.end_marker=true",
        "model.stop_from_attention=true",
        "model.alignment_word_dropout=0.1",
    )
