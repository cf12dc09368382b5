"""The Raffel & Ellis 2015 recipe: its cells' learning-rate races (the race itself: test_race.py),
Table 1 cells, the report and the CLI."""

import json

import pytest
from scripted_race import UNSOLVED, scripted_trainer
from scripted_race import write_run as _write_run

from attnlab.cli import main
from attnlab.config import load_yaml
from attnlab.experiments import race as races
from attnlab.experiments.memory import recipe as raffel2015
from attnlab.experiments.memory.recipe import Cell


def _race(out_dir, cell, max_epochs, learning_rates, race="exact"):
    """Race a cell of the recipe (its runs trained by whatever ``race.train_or_resume`` is)."""
    races.run_race(raffel2015.cell_race(cell, out_dir, max_epochs, learning_rates, race=race))


def _history(run_dir):
    return races.finished_history(run_dir)


ACCURACY_KEYS = pytest.mark.parametrize("key", ["valid/accuracy", "validation_accuracy"])
"""Runs of this version and of versions before issue 24 (its legacy metric names)."""


@ACCURACY_KEYS
def test_report_puts_results_beside_the_papers_values(tmp_path, key):
    _write_run(Cell("addition", 50, "attention").path(tmp_path), 1e-2, [100.0], key)
    _write_run(Cell("multiplication", 10_000, "mean").path(tmp_path), 1e-3, [40.0, 70.25], key)
    _write_run(Cell("addition", None, "attention").path(tmp_path), 1e-2, [97.0, 99.5], key)
    for cell in tmp_path.glob("*/*/*"):
        races.race_record(cell, 0).write_text("{}")
    text = raffel2015.report(tmp_path)
    assert "| addition / attention | 1 (1) | – (1) |" in text
    assert "70.2% (2 ep.) (80.8%) |" in text
    assert "| addition / attention | 99.5 | 2 | 0.01 | 99.9 |" in text
    assert (tmp_path / "accuracy_addition.png").stat().st_size > 1000
    assert (tmp_path / "table1.md").is_file() and (tmp_path / "variable_length.md").is_file()


def test_cli_races_learning_rates_and_caps_the_slower_ones(tmp_path, capsys):
    out = tmp_path / "raffel"
    args = ["reproduce", "raffel2015", "--out", str(out), "--problems", "addition", "--t0", "20"]
    args += [
        "--poolings",
        "attention",
        "--learning-rates",
        "1e-2",
        "1e-3",
        "--max-epochs",
        "15",
        "--no-variable",
    ]
    args += [
        "training.updates_per_epoch=100",
        "training.batch_size=50",
        "data.test_size=200",
        "training.device=cpu",
    ]
    assert main(args) == 0
    cell = Cell("addition", 20, "attention").path(out)
    fast = _history(cell / "lr0.01" / "seed0")
    slow = _history(cell / "lr0.001" / "seed0")
    reached = races.epochs_to_goal(fast, 100.0, raffel2015.VALID_ACCURACY)
    assert reached is not None and len(fast) == reached  # stopped at 100%
    assert len(slow) <= reached  # raced: capped at the faster rate's epochs
    assert "Table 1" in capsys.readouterr().out


def test_a_run_extended_round_by_round_equals_one_trained_straight_to_its_cap(tmp_path):
    cell = Cell("addition", 20, "attention")
    quick = [
        "training.updates_per_epoch=10",
        "training.batch_size=20",
        "data.test_size=50",
        "training.device=cpu",
    ]
    spec = raffel2015.cell_race(cell, tmp_path / "rounds", 7, [3e-4], overrides=quick)
    races.run_race(spec)
    straight = tmp_path / "straight" / "seed0"
    races.train_or_resume(spec.run_config(3e-4, 7), straight)
    rounds = _history(cell.path(tmp_path / "rounds") / "lr0.0003" / "seed0")
    assert [r["epoch"] for r in rounds] == list(range(1, 8))
    assert [r["valid/loss"] for r in rounds] == [r["valid/loss"] for r in _history(straight)]


def test_every_papers_recipe_is_a_reproduce_subcommand(capsys):
    for paper in ("dubois2020", "raffel2015", "daniluk2017", "russin2019"):
        try:
            main(["reproduce", paper, "--help"])
        except SystemExit as stop:
            assert stop.code == 0
        assert "--out" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["reproduce", "vaswani2017"])
    assert stop.value.code == 2 and "invalid choice: 'vaswani2017'" in capsys.readouterr().err


def test_recipe_cells_run_on_a_local_ray_instance(tmp_path, local_ray):
    out = tmp_path / "ray"
    args = ["reproduce", "raffel2015", "--out", str(out), "--problems", "addition", "--t0", "20"]
    args += [
        "--learning-rates",
        "1e-2",
        "--max-epochs",
        "1",
        "--no-variable",
        "--backend",
        "ray",
        "--jobs",
        "2",
    ]
    args += ["training.updates_per_epoch=5", "data.test_size=50", "training.device=cpu"]
    assert main(args) == 0
    for pooling in ("attention", "mean"):
        history = _history(Cell("addition", 20, pooling).path(out) / "lr0.01" / "seed0")
        assert [record["epoch"] for record in history] == [1]
    assert local_ray.is_initialized()  # the shared instance is used and left running


def test_recipe_backend_errors_are_usage_errors(tmp_path, capsys):
    base = ["reproduce", "raffel2015", "--out", str(tmp_path), "--t0", "20", "--no-variable"]
    assert main([*base, "--address", "127.0.0.1:1"]) == 2
    assert "--address applies to --backend ray only" in capsys.readouterr().err
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'attnlab[ray]')")
    assert main([*base, "--backend", "ray", "--address", "127.0.0.1:1"]) == 2
    assert "127.0.0.1:1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--t0", "0"], "--t0: [0] too short; T0 must be >= 20"),
        (
            ["--learning-rates", "0.05"],
            "--learning-rates: 0.05 not in the paper's grid 0.01, 0.003, 0.001, 0.0003",
        ),
        (["--max-epochs", "0"], "--max-epochs and --variable-epochs must be >= 1"),
    ],
)
def test_bad_recipe_arguments_are_one_line_usage_errors(extra, message, tmp_path, capsys):
    assert main(["reproduce", "raffel2015", "--out", str(tmp_path / "out"), "--no-variable", *extra]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert not (tmp_path / "out").exists()


def test_an_unknown_problem_is_an_argparse_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "raffel2015", "--out", str(tmp_path), "--problems", "subtraction"])
    assert exit_.value.code == 2
    assert "invalid choice: 'subtraction'" in capsys.readouterr().err


def test_the_paper_text_addition_is_its_own_row_beside_the_papers_addition(tmp_path, capsys):
    out = tmp_path / "raffel"
    args = ["reproduce", "raffel2015", "--out", str(out), "--problems", "addition_paper_text", "--t0", "20"]
    args += ["--poolings", "attention", "--learning-rates", "1e-2", "--max-epochs", "1", "--no-variable"]
    args += ["training.updates_per_epoch=20", "data.test_size=50", "training.device=cpu"]
    assert main(args) == 0
    run = Cell("addition_paper_text", 20, "attention").path(out) / "lr0.01" / "seed0"
    assert load_yaml(run / "config.yaml")["data"]["addition"] == "paper_text"
    table = (out / "table1.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| addition_paper_text / attention"))
    assert "(1)" in row  # the paper's addition value beside it


def test_a_variable_length_run_stops_once_it_passes_the_papers_accuracy(tmp_path, monkeypatch):
    cell = Cell("multiplication", None, "attention")
    assert cell.goal == 99.4 and Cell("addition", 1000, "mean").goal == 100.0
    spec = raffel2015.cell_race(cell, tmp_path, 100, [1e-2, 1e-3])
    config = spec.run_config(1e-2, 100)
    assert config["training"]["stop_at_accuracy"] == 99.4 and config["data"]["setting"] == "variable"
    assert (spec.goal, spec.metric, spec.preference) == (99.4, "valid/accuracy", raffel2015.LEARNING_RATES)
    calls: list = []
    curves = {1e-2: [90.0, 99.5] + [100.0] * 98, 1e-3: [50.0] * 100}
    monkeypatch.setattr(races, "train_or_resume", scripted_trainer(curves, calls))
    races.run_race(spec)
    assert calls == [(1e-2, 5), (1e-3, 2)]  # 99.5 >= 99.4 at epoch 2 caps the other rate at 2
    text = raffel2015.report(tmp_path)
    assert "| multiplication / attention | 99.5 | 2 | 0.01 | 99.4 |" in text


def test_the_authors_padding_is_a_recipe_option_named_in_the_report(tmp_path, capsys):
    out = tmp_path / "pooled"
    base = ["reproduce", "raffel2015", "--out", str(out), "--padding", "pooled"]
    assert main(base) == 2
    assert "--padding pooled" in capsys.readouterr().err and not out.exists()
    args = [*base, "--no-variable", "--t0", "20", "--poolings", "mean", "--learning-rates", "1e-2"]
    args += ["--max-epochs", "1", "training.updates_per_epoch=5", "data.test_size=50", "training.device=cpu"]
    assert main(args) == 0
    run = Cell("addition", 20, "mean").path(out) / "lr0.01" / "seed0"
    assert load_yaml(run / "config.yaml")["data"]["padding"] == "pooled"
    assert "Padding: pooled (zero padding to ceil(1.1 T0) pooled too" in (out / "table1.md").read_text()


def test_a_t0_past_the_papers_gets_its_own_table(tmp_path):
    _write_run(Cell("addition", 100_000, "attention").path(tmp_path), 1e-2, [60.0, 100.0])
    assert "T0=100000" not in raffel2015._table1(tmp_path, 0)
    text = raffel2015.report(tmp_path)
    assert "| addition / attention, T0=100000 | 2, unfinished | 100.0 | 0.01 | 30 |" in text
    assert (tmp_path / "longer_t0.md").is_file()


def test_the_report_marks_the_cells_raced_by_halving_and_names_the_dropped_rates(tmp_path, monkeypatch):
    calls: list = []
    variable_curves = {rate: [curve[0] + 5.0] * 100 for rate, curve in UNSOLVED.items()}  # < 77.4%
    monkeypatch.setattr(races, "train_or_resume", scripted_trainer(UNSOLVED, calls))
    rates = list(raffel2015.LEARNING_RATES)
    halved, exact = Cell("multiplication", 5000, "mean"), Cell("multiplication", 10_000, "mean")
    _race(tmp_path, halved, 100, rates, "halving")
    _race(tmp_path, exact, 100, [1e-2], "exact")
    monkeypatch.setattr(races, "train_or_resume", scripted_trainer(variable_curves, calls))
    _race(tmp_path, Cell("addition", None, "mean"), 100, rates, "halving")
    text = raffel2015.report(tmp_path)
    table1, variable = (tmp_path / "table1.md").read_text(), (tmp_path / "variable_length.md").read_text()
    assert text.startswith(table1.rstrip("\n"))
    assert (
        "| multiplication / unweighted mean | – (2) | – (2) | – (8) | – (33) | 90.0% (100 ep.)† (89.8%) |"
        in table1
    )
    assert "| 60.0% (100 ep.) (80.8%) |" in table1  # the exact cell: unmarked
    assert "Learning rates raced over the whole grid (unmarked cells) and by successive halving" in table1
    assert table1.splitlines()[0].startswith("#### Table 1: ")  # the header line says it
    assert (
        "- multiplication / unweighted mean, T0=5000: lr 0.01, 0.001 after 5 epochs; lr 0.003 after 10 epochs"
        in table1
    )
    assert "| addition / unweighted mean | 75.0† | 100 | 0.003 | 77.4 |" in variable
    assert variable.splitlines()[0].endswith(
        "Learning rates raced by successive halving (every ended race; cells marked †)"
    )
    assert (
        "- addition / unweighted mean: lr 0.01, 0.001 after 5 epochs; lr 0.0003 after 10 epochs" in variable
    )


def test_the_race_is_a_recipe_option_and_an_unknown_race_a_usage_error(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(races, "train_or_resume", scripted_trainer(UNSOLVED, calls))
    out = tmp_path / "raffel"
    args = ["reproduce", "raffel2015", "--out", str(out), "--problems", "multiplication", "--t0", "5000"]
    args += ["--poolings", "mean", "--no-variable", "--max-epochs", "12"]
    assert main([*args, "--race", "halving"]) == 0
    assert calls == [(rate, 5) for rate in raffel2015.LEARNING_RATES] + [(3e-3, 10), (3e-4, 10), (3e-4, 12)]
    cell_dir = Cell("multiplication", 5000, "mean").path(out)
    assert json.loads(races.race_record(cell_dir, 0).read_text())["race"] == "halving"
    assert "90.0% (12 ep.)†" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--race", "fastest"])
    assert exit_.value.code == 2
    assert "argument --race: invalid choice: 'fastest' (choose from" in capsys.readouterr().err
