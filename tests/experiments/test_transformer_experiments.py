"""The Transformer (issue 28) through ``attnlab train`` / ``evaluate``: SCAN and Lookup Tables."""

import json
import logging
import math
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.config import ConfigError, to_dict
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config
from attnlab.experiments.scan import experiment as scan
from attnlab.experiments.scan.plots import decoding_outcome
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.vocab import build_vocabularies
from attnlab.training.checkpoint import load_checkpoint, save_checkpoint

TINY = {
    "model.transformer.d_model": 16,
    "model.transformer.heads": 2,
    "model.transformer.encoder_layers": 1,
    "model.transformer.decoder_layers": 2,
    "model.transformer.ff_dim": 32,
    "training.epochs": 1,
    "training.batch_size": 32,
    "training.progress": "false",
}


def _overrides(settings: dict[str, object]) -> list[str]:
    return [f"{key}={value}" for key, value in settings.items()]


def _lookup_data(files: dict[str, Path]) -> dict[str, object]:
    """Overrides that train on the small ``lookup_files`` and test on their ``long1``."""
    return {
        "data.train_file": files["train"],
        "data.validation_file": files["validation"],
        "data.test_files": f"{{long1: {files['long1']}}}",
    }


def _scan_data(files: dict[str, Path]) -> dict[str, object]:
    """Overrides that train on the small ``scan_files`` and test on their test file."""
    return {
        "data.split": "files",
        "data.train_file": files["train"],
        "data.test_files": f"{{test: {files['test']}}}",
    }


def _train_scan(run_dir: Path, files: dict[str, Path], options: dict[str, object], *flags: str) -> int:
    """``attnlab train scan_transformer`` of the TINY model on the small ``scan_files``."""
    settings = {**TINY, **_scan_data(files), **options}
    return main(["train", "scan_transformer", "--run-dir", str(run_dir), *flags, *_overrides(settings)])


def test_scan_transformer_trains_and_evaluates_through_the_cli(scan_files, tmp_path):
    run_dir = tmp_path / "run"
    options = {
        "model.transformer.positional": "rope",
        "model.transformer.cross_attention": "[dot, [dot, location]]",
    }
    assert _train_scan(run_dir, scan_files, options) == 0
    metrics = json.loads((run_dir / "eval" / "test.json").read_text())
    assert {"seq_acc", "seq_acc_given_length", "loss"} <= set(metrics)
    assert main(["evaluate", str(run_dir)]) == 0
    # attnlab plot: the mean heatmap and, beside it, every decoder layer's and head's cross-attention
    assert main(["plot", str(run_dir), "--index", "0", "--device", "cpu"]) == 0
    pngs = sorted(path.name for path in (run_dir / "plots").glob("*.png"))
    assert pngs == ["attention_test_0.png", "attention_test_0_heads.png", "training_curves.png"]
    assert all((run_dir / "plots" / name).stat().st_size > 1000 for name in pngs)


@pytest.mark.parametrize(
    ("outputs", "outcome"),
    [
        (["A", "B", "<eos>"], "right: 2 actions"),
        (["A", "<eos>"], "wrong: stops after 1 action of 2; first difference at action 2"),
        (["A", "C", "B", "<eos>"], "wrong: stops after 3 actions of 2; first difference at action 2"),
        (["A", "B", "B"], "wrong: no <eos> in 3 actions of 2; first difference at action 3"),
        (["A", "B"], "wrong: no <eos> in 2 actions of 2; first difference at action 3"),
    ],
)
def test_scan_heatmap_titles_say_where_a_decoding_leaves_the_target(outputs, outcome):
    assert decoding_outcome(outputs, ["A", "B"]) == outcome


@pytest.mark.parametrize(
    "option, saved",
    [
        ("decoder_offset=4", "decoder_offset: 4"),
        ("decoder_hides_start=true", "decoder_hides_start: true"),
        ("decoder_recurrence=gru", "decoder_recurrence: gru"),
    ],
)
def test_scan_transformer_trains_with_a_decoder_option_and_evaluates_from_its_checkpoint(
    scan_files, tmp_path, option, saved
):
    run_dir = tmp_path / "run"
    key, value = option.split("=")
    assert _train_scan(run_dir, scan_files, {f"model.transformer.{key}": value}) == 0
    assert saved in (run_dir / "config.yaml").read_text()
    trained = json.loads((run_dir / "eval" / "test.json").read_text())
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "test.json").read_text()) == trained


def test_lookup_transformer_trains_with_attention_guidance(lookup_files, tmp_path):
    run_dir = tmp_path / "run"
    settings = {
        **TINY,
        **_lookup_data(lookup_files),
        "model.transformer.positional": "alibi",
        "model.transformer.cross_attention": "mix",
        "training.attention_guidance": 1.0,
    }
    assert main(["train", "lookup_transformer", "--run-dir", str(run_dir), *_overrides(settings)]) == 0
    metrics = json.loads((run_dir / "eval" / "long1.json").read_text())
    assert {"seq_acc", "seq_acc_be", "attn_loss"} <= set(metrics)
    # attnlab plot: the mean heatmap and the grid of every decoder layer's and head's cross-attention
    assert main(["plot", str(run_dir), "--test-set", "long1", "--index", "0", "--device", "cpu"]) == 0
    pngs = sorted(path.name for path in (run_dir / "plots").glob("*.png"))
    assert pngs == ["long1_0_attention.png", "long1_0_attention_heads.png", "training_curves.png"]
    assert all((run_dir / "plots" / name).stat().st_size > 1000 for name in pngs)


def test_builtin_transformer_configs_build_transformers():
    vocabularies = build_vocabularies([])
    for name, module in (("scan_transformer", scan), ("lookup_transformer", lookup)):
        parsed = module.EXPERIMENT.parse_config(resolve_config(name, []))
        model = module.build_model(parsed.model, *vocabularies)
        assert isinstance(model, TransformerSeq2Seq) and model.positional == "sinusoidal"
        assert model.start_marker_id is None and model.embedding_scale == math.sqrt(model.d_model)


def test_the_csordas2021_config_builds_their_model():
    """Their relative Transformer (Csordás et al. 2021's code): post-norm, Transformer-XL positions,
    encoder start and end tokens, Xavier embeddings read unscaled and tied to the output layer, 3 + 3
    layers of 8 heads, dropout 0.1 in the layers (their Transformer's default: the profile's 0.5 is
    the LSTM's) and none on the embeddings, layers started as their code leaves them, attention
    projections without biases, one token for the decoder's start and end."""
    vocabularies = build_vocabularies([])
    parsed = scan.EXPERIMENT.parse_config(resolve_config("scan_transformer_csordas2021", []))
    model = scan.build_model(parsed.model, *vocabularies)
    assert model.embedding_dropout.p == 0.0
    assert model.encoder[0].attention.qkv.bias is None and model.start_is_end
    assert bool((model.output.bias == 0).all())  # linear_init: csordas2021, their TiedEmbedding
    assert {module.p for module in model.encoder.modules() if isinstance(module, torch.nn.Dropout)} == {0.1}
    assert {module.p for module in model.decoder.modules() if isinstance(module, torch.nn.Dropout)} == {0.1}
    assert (model.norm, model.positional, model.embedding_scale) == ("post", "transformer_xl", 1.0)
    assert model.start_marker_id == len(vocabularies[0]) and model.stop_gate is None
    assert model.end_marker_id == len(vocabularies[0]) + 1  # their encoder <eos>
    assert (len(model.encoder), len(model.decoder), model.head_names[0]) == (3, 3, ["dot"] * 8)
    assert model.output.weight is model.target_embedding.weight


def test_the_location_transformer_config_is_the_swept_setting():
    """``lookup_transformer_shift`` is, for every cell and seed of the sweep
    ``lookup_transformer_stop_gradient01``, the config that cell trained (so its results are the
    config's), with the cell's task, positional scheme and seed as overrides."""
    from attnlab.experiments import sweep

    runs = sweep.expand(sweep.load_spec(sweep.builtin_sweeps()["lookup_transformer_stop_gradient01"]))
    assert len(runs) == 63
    for run in runs:
        overrides = [f"{key}={value}" for key, value in run.params.items()]
        overrides += [f"training.seed={run.seed}", "training.progress=false"]
        ours = lookup.EXPERIMENT.parse_config(resolve_config("lookup_transformer_shift", overrides))
        assert to_dict(ours) == to_dict(lookup.EXPERIMENT.parse_config(run.config)), run.name
    default = lookup.EXPERIMENT.parse_config(resolve_config("lookup_transformer_shift", []))
    model = lookup.build_model(default.model, *build_vocabularies([]))
    assert isinstance(model, TransformerSeq2Seq) and model.stop_head_gradient == 0.1
    assert model.head_names == [["shift"] * 4] * 2


@pytest.mark.parametrize("name, module", [("lookup_transformer", lookup), ("scan_transformer", scan)])
def test_transformer_configs_stop_at_full_validation_accuracy_or_by_patience(name, module):
    """The issue-28 protocol: stop at 100% validation seqAcc, else after 10 epochs without a lower
    validation loss, at most 50 epochs; both can be switched off for a fixed-epoch run."""
    training = module.EXPERIMENT.parse_config(resolve_config(name, [])).training
    assert training.stop_targets() == {"valid/seq_acc": 100.0}
    assert (training.patience, training.epochs) == (10, 50)
    fixed = module.EXPERIMENT.parse_config(
        resolve_config(name, ["training.stop_at=null", "training.patience=null"])
    ).training
    assert fixed.stop_targets() == {} and fixed.patience is None


def test_lookup_transformer_run_ends_at_the_validation_target(lookup_files, tmp_path):
    """A run whose validation seqAcc reaches the target (0% here) stops after that epoch."""
    run_dir = tmp_path / "run"
    settings = {
        **TINY,
        **_lookup_data(lookup_files),
        "training.epochs": 3,
        "training.stop_at": "{valid/seq_acc: 0.0}",
    }
    assert main(["train", "lookup_transformer", "--run-dir", str(run_dir), *_overrides(settings)]) == 0
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [entry["epoch"] for entry in epochs] == [1]


@pytest.mark.parametrize(
    ("experiment", "config", "overrides", "message"),
    [
        (scan, "scan_transformer", ["model.transformer.positional=wavelet"], "positional"),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.cross_attention=[dot, dot, dot]"],
            "lists 3 layers",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.attender_keys=embeddings"],
            "attender_keys='embeddings' needs attender heads",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.end_marker=true"],
            "a Lookup Tables source ends in '.'",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.stop_layers=all"],
            "stop_layers: 'all' .* needs stop_from_attention: true",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.stop_gate_scale=10"],
            "stop_gate_scale: 10.0 .* needs stop_from_attention: true",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.stop_detached=true"],
            "stop_detached: True .* needs stop_from_attention: true",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.stop_from_attention=true", "model.transformer.stop_layers=first"],
            "stop_layers",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.stop_ends=gated"],
            "stop_ends: 'gated' .* needs stop_from_attention: true",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.cross_attention_options={location: {sigma_min: 0.1}}"],
            "cross_attention_options names location, which no cross-attention head is",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.cross_attention=shift", "model.transformer.decoder_offset=8"],
            "decoder_offset needs dot-product cross-attention heads; shift would",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.transformer.decoder_offset=-1"],
            "decoder_offset must be >= 0",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.decoder_offset=4", "model.transformer.decoder_hides_start=true"],
            "decoder_offset adds <sos> tokens and decoder_hides_start hides the first one",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.decoder_counting_heads=5"],
            "decoder_counting_heads must be between 0 and heads \\(4\\), got 5",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.decoder_recurrence_layer=1"],
            "decoder_recurrence_layer places decoder_recurrence, which is 'none'",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.universal=true", "model.transformer.cross_attention=[dot, shift]"],
            "universal shares one decoder layer across depths, so every layer needs the same",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.semantic_embeddings=separate"],
            "semantic_embeddings: 'separate' .* needs semantic_output: true",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.semantic_embeddings=own"],
            "semantic_embeddings",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.semantic_heads=shared"],
            "semantic_heads: 'shared' .* needs semantic_output: true",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.semantic_heads=gated"],
            "semantic_heads: 'gated' .* needs semantic_output: true",
        ),
        (
            scan,
            "scan_transformer",
            ["model.transformer.peers_as_one=true"],
            "peers_as_one .* needs peer_words",
        ),
        (
            scan,
            "scan_transformer",
            [
                "model.transformer.end_marker=true",
                "model.transformer.semantic_output=true",
                "model.transformer.peer_words=source",
            ],
            "peer_words: 'source' .* needs semantic_output: true and semantic_embeddings: separate",
        ),
        # options the architecture would ignore, named
        (
            lookup,
            "lookup",
            ["model.transformer.positional=rope"],
            "transformer.positional: Transformer option",
        ),
        (
            lookup,
            "lookup_shift",
            ["model.transformer.cross_attention=shift", "model.transformer.d_model=64"],
            "transformer.d_model, transformer.cross_attention: .* architecture: recurrent ignores",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.attender=location"],
            "attender: option.* of the recurrent model",
        ),
        (
            lookup,
            "lookup_transformer",
            ["model.hidden_dim=64", "model.residual=false"],
            "hidden_dim, residual: .* architecture: transformer ignores",
        ),
        (scan, "scan", ["model.transformer.positional=alibi"], "architecture: syntactic_attention ignores"),
        (
            scan,
            "scan",
            ["model.architecture=gru_attention", "model.transformer.heads=8"],
            "transformer.heads: .* architecture: gru_attention ignores",
        ),
        (scan, "scan_transformer", ["model.dropout=0.2"], "dropout: option.* of the recurrent model"),
    ],
)
def test_bad_transformer_options_are_config_errors(experiment, config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        experiment.EXPERIMENT.parse_config(resolve_config(config, overrides))


@pytest.mark.parametrize("universal, kind", [("false", "transformer"), ("true", "universal transformer")])
def test_a_runs_log_says_whether_its_transformer_is_universal(universal, kind):
    overrides = [f"model.transformer.universal={universal}", "model.transformer.positional=rope"]
    scan_config = scan.EXPERIMENT.parse_config(resolve_config("scan_transformer", overrides))
    lookup_config = lookup.EXPERIMENT.parse_config(resolve_config("lookup_transformer", overrides))
    described = f"{kind}, positional rope, cross-attention dot"
    assert scan.describe_model(scan_config.model) == described
    assert lookup.describe(lookup_config).endswith(f"(generated): {described}")


@pytest.mark.parametrize(
    "config, overrides",
    [
        ("lookup", ["model.architecture=transformer"]),  # lookup.yaml's recurrent options are the defaults
        ("lookup_transformer", ["model.architecture=recurrent"]),
        ("scan_transformer", ["model.architecture=gru_attention"]),
        ("scan_transformer_csordas2021", []),
        ("scan", ["model.architecture=transformer"]),
    ],
)
def test_switching_architecture_alone_is_no_error(config, overrides):
    """Every option left at its default, as a run's saved config holds them all, is not an option
    set for the other architecture."""
    data = resolve_config(config, overrides)
    experiment = (lookup if data["experiment"] == "lookup" else scan).EXPERIMENT
    saved = to_dict(experiment.parse_config(data))  # what a run directory's config.yaml holds
    assert to_dict(experiment.parse_config(saved)) == saved


def test_scan_transformer_stops_from_the_attention_on_an_end_marker(scan_files, tmp_path):
    """SCAN commands end in a word: the stop from the attention needs the end marker, and the
    heatmap of ``attnlab plot`` gets its column."""
    run_dir = tmp_path / "run"
    settings = {
        **TINY,
        **_scan_data(scan_files),
        "model.transformer.cross_attention": "shift",
        "model.transformer.stop_from_attention": "true",
    }
    with pytest.raises(ConfigError, match="needs transformer.end_marker: true"):
        scan.EXPERIMENT.parse_config(resolve_config("scan_transformer", _overrides(settings)))
    settings["model.transformer.end_marker"] = "true"
    assert main(["train", "scan_transformer", "--run-dir", str(run_dir), *_overrides(settings)]) == 0
    metrics = json.loads((run_dir / "eval" / "test.json").read_text())
    assert {"seq_acc", "seq_acc_given_length"} <= set(metrics)
    model = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    assert model["model_spec"]["model"]["transformer"]["end_marker"] is True
    assert main(["plot", str(run_dir), "--index", "0", "--device", "cpu"]) == 0
    assert any(path.stat().st_size > 1000 for path in (run_dir / "plots").glob("*attention*.png"))


def test_checkpoints_from_before_the_transformer_options_still_load(lookup_files, tmp_path):
    """A recurrent checkpoint whose spec lacks ``architecture`` / ``transformer`` (written before
    they existed) reads as having their defaults."""
    run_dir = tmp_path / "run"
    settings = {
        **_lookup_data(lookup_files),
        "model.attender": "scaled_dot",
        "model.embedding_dim": 8,
        "model.hidden_dim": 8,
        "training.epochs": 1,
        "training.progress": "false",
    }
    assert main(["train", "lookup", "--run-dir", str(run_dir), *_overrides(settings)]) == 0
    for path in (run_dir / "checkpoints").glob("*.pt"):
        checkpoint = load_checkpoint(path)
        for key in ("architecture", "transformer"):
            del checkpoint["model_spec"]["model"][key]
        save_checkpoint(path, checkpoint)
    assert main(["evaluate", str(run_dir)]) == 0


def test_a_run_from_before_a_model_option_existed_resumes_with_its_default(lookup_files, tmp_path, capsys):
    """``--resume`` of a checkpoint whose spec lacks options added since (``source_start``,
    ``embedding_init``, ``tied_output``) reads them as their defaults and trains on; a checkpoint
    whose option has another value than the run's config is still refused."""
    run_dir = tmp_path / "run"
    settings = {**TINY, **_lookup_data(lookup_files)}

    def train(epochs: int, *resume: str) -> int:
        overrides = _overrides({**settings, "training.epochs": epochs})
        return main(["train", "lookup_transformer", "--run-dir", str(run_dir), *overrides, *resume])

    def edit_last_spec(edit) -> None:
        last = run_dir / "checkpoints" / "last.pt"
        checkpoint = load_checkpoint(last)
        edit(checkpoint["model_spec"]["model"]["transformer"])
        save_checkpoint(last, checkpoint)

    assert train(1) == 0
    edit_last_spec(lambda spec: [spec.pop(key) for key in ("source_start", "embedding_init", "tied_output")])
    assert train(2, "--resume") == 0
    epochs = [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
    edit_last_spec(lambda spec: spec.update(tied_output=True))
    capsys.readouterr()
    assert train(3, "--resume") != 0
    assert "belongs to another model" in capsys.readouterr().err


def test_relative_distances_count_the_added_tokens_and_the_decoder_offset_in_training_only():
    """The encoder reads the end marker and the source start too; the decoder reads
    decoder_offset's extra <sos> in training only."""
    model = TransformerSeq2Seq(
        10, 12, d_model=16, heads=2, encoder_layers=1, decoder_layers=1, ff_dim=32,
        positional="relative", end_marker=True, source_start=True, decoder_offset=3,
    )  # fmt: skip
    assert model.relative_distances(5, 7, training=True) == (6, 9)
    assert model.relative_distances(5, 7, training=False) == (6, 6)
    assert TransformerSeq2Seq(10, 12, d_model=16, heads=2).relative_distances(1, 1, training=True) == (0, 0)


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        ({"model.transformer.positional": "relative"}, ["encoder", "decoder"]),
        ({"model.transformer.positional": "relative", "model.transformer.max_relative_distance": 2}, []),
        ({"model.transformer.positional": "rope"}, []),
        ({"model.transformer.positional": "relative", "model.transformer.max_relative_distance": "auto"}, []),
        (
            {
                "model.transformer.positional": "relative",
                "model.transformer.max_relative_distance": "[2, 16]",
            },
            ["decoder"],
        ),
    ],
)
def test_a_relative_clip_past_the_training_lengths_is_warned_of_naming_the_untrained_distances(
    lookup_files, caplog, overrides, warned
):
    """Lookup files: training reads relative distances up to 5 on each side (6 tokens; <sos> and
    5 outputs); long1 reads 6. At the clip 16 the embedding of 6 is read untrained; at the clip 2
    every distance past 2 shares a trained embedding; RoPE has no table."""
    settings = {**TINY, **_lookup_data(lookup_files), **overrides}
    config = lookup.EXPERIMENT.parse_config(resolve_config("lookup_transformer", _overrides(settings)))
    data = lookup.EXPERIMENT.training_data(config, torch.device("cpu"))
    for name, longest in (("train", 6), ("long1", 7)):
        split = data.encoded[name]
        assert int(split.source_lengths.max()) == int(split.target_lengths.max()) == longest
    with caplog.at_level(logging.WARNING, logger="attnlab.experiments.seq2seq_common"):
        lookup.EXPERIMENT.build_model(config, data)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == len(warned)
    for message, side in zip(messages, warned, strict=True):
        assert message.startswith(
            f"model.transformer.max_relative_distance: the {side}'s clip 16: its self-attention"
        )
        assert "up to 6 on the test set(s) long1 and at most 5 in training" in message
        assert "the embedding of distance 6 is never trained" in message and "a clip of at most 5" in message
        assert "max_relative_distance: auto" in message


@pytest.mark.parametrize(
    ("overrides", "clips"),
    [
        ({}, (5, 5)),
        ({"model.transformer.decoder_offset": 3}, (5, 8)),
        ({"model.transformer.source_start": "true"}, (6, 5)),
        ({"model.transformer.stop_from_attention": "true"}, (6, 5)),
    ],
)
def test_an_auto_relative_clip_is_each_stacks_longest_distance_in_training(lookup_files, overrides, clips):
    """Lookup files: 6 source tokens and <sos> + 5 outputs at most in training (distances 5 and 5);
    a start position adds one to the encoder's, decoder_offset's extra <sos> to the decoder's."""
    settings = {
        **TINY,
        **_lookup_data(lookup_files),
        "model.transformer.positional": "relative",
        "model.transformer.max_relative_distance": "auto",
        **overrides,
    }
    config = lookup.EXPERIMENT.parse_config(resolve_config("lookup_transformer", _overrides(settings)))
    data = lookup.EXPERIMENT.training_data(config, torch.device("cpu"))
    model = lookup.EXPERIMENT.build_model(config, data)
    assert model.max_relative_distance == clips
    tables = [layer.attention.positions.relative.num_embeddings for layer in model.encoder]
    tables += [layer.self_attention.positions.relative.num_embeddings for layer in model.decoder]
    assert tables == [2 * clips[0] + 1] * len(model.encoder) + [2 * clips[1] + 1] * len(model.decoder)
    assert lookup.EXPERIMENT.model_spec(config, data)["model"]["transformer"][
        "max_relative_distance"
    ] == list(clips)
    assert config.model.transformer.max_relative_distance == "auto"  # the run's config keeps it
    with pytest.raises(ValueError, match="auto is resolved from the training data"):
        lookup.build_model(config.model, data.source, data.target)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("-1", "max_relative_distance must be >= 0, got -1"),
        ("[3, -1]", "max_relative_distance must be >= 0, got [3, -1]"),
        ("[1, 2, 3]", "a pair (encoder, decoder) of ints, got [1, 2, 3]"),
        ("near", "max_relative_distance"),
    ],
)
def test_a_bad_relative_clip_is_a_config_error_naming_the_key(value, error):
    with pytest.raises(ConfigError, match="max_relative_distance") as raised:
        scan.EXPERIMENT.parse_config(
            resolve_config("scan_transformer", [f"model.transformer.max_relative_distance={value}"])
        )
    assert error in str(raised.value)


def test_a_scan_run_with_an_auto_clip_keeps_it_in_its_config_and_resumes_and_evaluates(scan_files, tmp_path):
    run_dir = tmp_path / "run"
    options = {"model.transformer.positional": "relative", "model.transformer.max_relative_distance": "auto"}
    assert _train_scan(run_dir, scan_files, options) == 0
    assert "max_relative_distance: auto" in (run_dir / "config.yaml").read_text()
    spec = load_checkpoint(run_dir / "checkpoints" / "last.pt")["model_spec"]
    encoder_clip, decoder_clip = spec["model"]["transformer"]["max_relative_distance"]
    assert 1 <= encoder_clip < decoder_clip  # SCAN: short commands, longer outputs
    trained = json.loads((run_dir / "eval" / "test.json").read_text())
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "test.json").read_text()) == trained
    assert _train_scan(run_dir, scan_files, {**options, "training.epochs": 2}, "--resume") == 0
    epochs = [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
