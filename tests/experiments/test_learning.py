"""Learning test: a small Lookup Tables run learns the task (fixed seed, CPU, well under a minute)."""

import pytest
import torch

from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config
from attnlab.tasks.batching import batches
from attnlab.tasks.lookup_data import encode_split, load_splits


def _small_config(name: str, *, interpolation: int, long_levels: int, epochs: int, extra=()):
    overrides = [
        f"data.interpolation_size={interpolation}",
        "data.validation_size=200",
        "data.long_size=100",
        f"data.long_levels={long_levels}",
        f"training.epochs={epochs}",
        "training.progress=false",
        *extra,
    ]
    return lookup.EXPERIMENT.parse_config(resolve_config(name, overrides))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mix_attender_reaches_full_interpolation_accuracy(tmp_path, precision):
    """Also in mixed precision (``training.precision=bf16``): the Mix Attender blends a float32
    location attention with autocast's bfloat16 content attention."""
    config = _small_config(
        "lookup",
        interpolation=500,
        long_levels=1,
        epochs=3,
        extra=("model.attender=mix", "training.learning_rate=0.003", f"training.precision={precision}"),
    )
    results = lookup.EXPERIMENT.train(config, tmp_path / "run")
    assert results["interpolation"]["seq_acc"] == 100.0
    assert results["interpolation"]["attn_loss"] < 0.05


@pytest.mark.parametrize(
    ("config_name", "variant", "epochs"),
    [
        ("lookup_extrapolate", "long", 4),
        ("lookup_shift", "reversed", 5),
        ("lookup_shift_robust", "reversed", 5),
        ("lookup_transformer_shift", "reversed", 3),  # issue 28: the location Transformer
    ],
)
def test_extrapolating_model_stops_at_the_right_step_on_longer_inputs(tmp_path, config_name, variant, epochs):
    """Issue 6: trained on 1-4 tables, the model decides itself to stop after 7 tables (long 3):
    its ``<eos>`` comes exactly after the last table's output, and every output is right."""
    config = _small_config(
        config_name, interpolation=200, long_levels=3, epochs=epochs, extra=(f"data.variant={variant}",)
    )
    results = lookup.EXPERIMENT.train(config, tmp_path / "run")
    assert results["interpolation"]["seq_acc"] == 100.0
    assert results["long3"]["seq_acc"] >= 95.0

    model, source_vocab, target_vocab = lookup.model_from_checkpoint(
        tmp_path / "run" / "checkpoints" / "best.pt", torch.device("cpu")
    )
    splits = load_splits(config.data)
    longest_training_target = max(len(example.target) for example in splits["train"])
    long3 = encode_split(config.data, "long3", splits["long3"], source_vocab, target_vocab)
    batch = next(iter(batches(long3, 100, shuffle=False)))
    decoded = model.greedy_decode(batch.source, batch.source_padding_mask, max_length=40)
    stop_step = (decoded.tokens == model.eos_id).float().argmax(dim=1)
    gold_stop = (batch.target_output == model.eos_id).float().argmax(dim=1)
    assert int(gold_stop.min()) > longest_training_target  # longer than anything seen in training
    assert float((stop_step == gold_stop).float().mean()) >= 0.95
