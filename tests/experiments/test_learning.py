"""Learning test: a small Lookup Tables run learns the task (fixed seed, CPU, well under a minute)."""

from attnlab.experiments import lookup
from attnlab.experiments.registry import resolve_config


def test_mix_attender_reaches_full_interpolation_accuracy(tmp_path):
    overrides = [
        "data.interpolation_size=500",
        "data.validation_size=200",
        "data.long_size=100",
        "data.long_levels=1",
        "model.attender=mix",
        "training.epochs=3",
        "training.learning_rate=0.003",
        "training.progress=false",
    ]
    config = lookup.parse_config(resolve_config("lookup", overrides))
    results = lookup.train(config, tmp_path / "run")
    assert results["interpolation"]["seq_acc"] == 100.0
    assert results["interpolation"]["attn_loss"] < 0.05
