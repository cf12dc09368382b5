"""Every system implements the one Experiment interface; a fifth system is one package that the
CLI, the sweeps and the report find with no edit to them."""

import json
from pathlib import Path

import pytest

import attnlab.experiments
from attnlab.cli import main
from attnlab.experiments import registry
from attnlab.experiments.base import Capability, Experiment, TranslationRequest

TOY_SYSTEM = Path(__file__).parent / "toy_system"

OPTIONAL_METHODS = {
    Capability.EVALUATE_FILES: ("file_test_sets",),
    Capability.GENERATE: ("generate_text", "as_text"),
    Capability.TRANSLATE: ("translate",),
}
"""The methods an experiment implements exactly when it declares the capability."""


@pytest.mark.parametrize("name", sorted(registry.EXPERIMENTS))
def test_each_system_package_defines_its_experiment(name):
    experiment = registry.get_experiment(name)
    assert isinstance(experiment, Experiment) and experiment.name == name
    assert registry.EXPERIMENTS[name] == f"attnlab.experiments.{name}.experiment"
    for capability, methods in OPTIONAL_METHODS.items():
        for method in methods:
            overridden = getattr(type(experiment), method) is not getattr(Experiment, method)
            assert overridden == experiment.supports(capability), (name, method)


def test_the_four_systems_and_the_recipes_are_found():
    assert set(registry.EXPERIMENTS) == {"language_model", "lookup", "memory", "scan"}
    assert set(registry.system_modules("plots")) == set(registry.EXPERIMENTS)
    papers = {paper: module.__name__ for paper, module in registry.recipes().items()}
    assert papers == {
        "daniluk2017": "attnlab.experiments.language_model.recipe",
        "dubois2020": "attnlab.experiments.lookup.recipe",
        "raffel2015": "attnlab.experiments.memory.recipe",
        "russin2019": "attnlab.experiments.scan.recipe",
        "location_transformer": "attnlab.experiments.location_transformer.recipe",  # issue 28, no experiment
    }


def test_optional_features_of_other_systems_are_refused(tmp_path):
    memory = registry.get_experiment("memory")
    with pytest.raises(registry.ConfigError, match="--data does not apply to memory runs"):
        memory.evaluate(tmp_path, data_files=["x.tsv"])
    with pytest.raises(registry.ConfigError, match="memory runs do not generate text"):
        memory.as_text(["a"])
    with pytest.raises(registry.ConfigError, match="memory runs do not translate given sources"):
        memory.translate(tmp_path, TranslationRequest(("1 2",)))


@pytest.fixture
def toy_system(monkeypatch):
    """The toy package of ``toy_system/`` installed as ``attnlab.experiments.toy``."""
    monkeypatch.setattr(attnlab.experiments, "__path__", [*attnlab.experiments.__path__, str(TOY_SYSTEM)])
    monkeypatch.setattr(registry, "EXPERIMENTS", registry.system_modules("experiment"))
    return registry.get_experiment("toy")


def test_a_fifth_system_trains_evaluates_plots_and_reports_through_the_cli(toy_system, tmp_path, capsys):
    config = tmp_path / "toy.yaml"
    config.write_text("experiment: toy\ntraining:\n  epochs: 2\n  batch_size: 16\n")
    run_dir = tmp_path / "runs" / "toy"
    assert main(["train", str(config), "--run-dir", str(run_dir), "training.learning_rate=0.1"]) == 0
    assert "mse" in capsys.readouterr().out
    summary = json.loads((run_dir / "eval" / "summary.json").read_text())
    assert set(summary) == {"test"} and summary["test"]["mse"] >= 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    assert main(["evaluate", str(run_dir), "--checkpoint", "last"]) == 0
    assert "last.pt" in json.loads((run_dir / "eval" / "test.json").read_text())["checkpoint"]
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--data", "x.tsv"]) == 2
    assert "--data does not apply to toy runs" in capsys.readouterr().err
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "plots" / "training_curves.png").is_file()
    assert main(["plot", str(run_dir), "--steps", "5"]) == 2
    assert "--steps applies to language-model runs only" in capsys.readouterr().err
    assert main(["train", str(config), "--run-dir", str(run_dir), "--resume", "training.epochs=3"]) == 0
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 3
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report.html")]) == 0
    assert "Toy: the sum of a vector" in (tmp_path / "report.html").read_text()
