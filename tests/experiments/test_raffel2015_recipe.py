"""The Raffel & Ellis 2015 recipe: learning-rate racing, Table 1 cells, the report and the CLI."""

import json

import pytest

from attnlab.cli import main
from attnlab.config import load_yaml
from attnlab.experiments.memory import recipe as raffel2015
from attnlab.experiments.memory.recipe import Cell


def _write_run(cell_dir, learning_rate, accuracies, accuracy_key="valid/accuracy"):
    """A finished run; ``accuracy_key="validation_accuracy"``: as versions before issue 24 wrote it."""
    run = cell_dir / f"lr{learning_rate:g}" / "seed0"
    (run / "eval").mkdir(parents=True)
    records = [{"epoch": i + 1, accuracy_key: a, "seconds": 30.0} for i, a in enumerate(accuracies)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (run / "eval" / "summary.json").write_text(json.dumps({"test": {"accuracy": accuracies[-1]}}))


ACCURACY_KEYS = pytest.mark.parametrize("key", ["valid/accuracy", "validation_accuracy"])
"""Runs of this version and of versions before issue 24 (its legacy metric names)."""


@ACCURACY_KEYS
def test_best_result_prefers_fewest_epochs_then_highest_accuracy(tmp_path, key):
    cell = tmp_path / "cell"
    _write_run(cell, 1e-2, [90.0, 99.0, 100.0], key)
    _write_run(cell, 1e-3, [95.0, 100.0], key)
    _write_run(cell, 3e-4, [99.9], key)
    best = raffel2015.best_result(cell)
    assert (best.epochs, best.learning_rate, best.table_cell()) == (2, 1e-3, "2, unfinished")
    raffel2015.race_record(cell, 0).write_text("{}")  # the race has ended: the result is final
    assert raffel2015.best_result(cell).table_cell() == "2"

    failing = tmp_path / "failing"
    _write_run(failing, 1e-2, [50.0, 80.0], key)
    _write_run(failing, 1e-3, [60.0, 85.5], key)
    raffel2015.race_record(failing, 0).write_text("{}")
    best = raffel2015.best_result(failing)
    assert best.epochs is None and best.table_cell() == "85.5% (2 ep.)"
    assert raffel2015.best_result(tmp_path / "missing") is None


@ACCURACY_KEYS
def test_report_puts_results_beside_the_papers_values(tmp_path, key):
    _write_run(Cell("addition", 50, "attention").path(tmp_path), 1e-2, [100.0], key)
    _write_run(Cell("multiplication", 10_000, "mean").path(tmp_path), 1e-3, [40.0, 70.25], key)
    _write_run(Cell("addition", None, "attention").path(tmp_path), 1e-2, [97.0, 99.5], key)
    for cell in tmp_path.glob("*/*/*"):
        raffel2015.race_record(cell, 0).write_text("{}")
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
    fast = raffel2015._history(cell / "lr0.01" / "seed0")
    slow = raffel2015._history(cell / "lr0.001" / "seed0")
    reached = raffel2015.epochs_to_goal(fast)
    assert reached is not None and len(fast) == reached  # stopped at 100%
    assert len(slow) <= reached  # raced: capped at the faster rate's epochs
    assert "Table 1" in capsys.readouterr().out


def _scripted_trainer(accuracies_by_rate, calls):
    """A stand-in for ``train_or_resume`` that continues a run along a fixed accuracy curve per
    learning rate, stopping at the config's target accuracy like the trainer, and records what
    each call was asked for."""

    def train(config, run_dir):
        rate, target = config["training"]["learning_rate"], config["training"]["epochs"]
        goal = config["training"]["stop_at_accuracy"]
        calls.append((rate, target))
        metrics = run_dir / "metrics.jsonl"
        done = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
        curve = accuracies_by_rate[rate]
        while len(done) < target and not (done and done[-1]["valid/accuracy"] >= goal):
            done.append({"epoch": len(done) + 1, "valid/accuracy": curve[len(done)]})
        (run_dir / "eval").mkdir(parents=True, exist_ok=True)
        metrics.write_text("".join(json.dumps(record) + "\n" for record in done))
        (run_dir / "eval" / "summary.json").write_text("{}")
        return {}

    return train


def test_the_race_runs_in_rounds_so_a_fast_rate_that_never_converges_does_not_hold_up_the_rest(
    tmp_path, monkeypatch
):
    never = [90.0] * 100  # lr 0.01 oscillates below 100% for all 100 epochs
    slow = [50.0] * 6 + [100.0]  # lr 0.001 reaches 100% in epoch 7
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer({1e-2: never, 1e-3: slow}, calls))
    cell = Cell("multiplication", 10_000, "attention")
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 1e-3], 0, False, [])
    # Round 1 (5 epochs) and round 2 (10): lr 0.001 reaches 100% at 7, which caps everything after.
    assert calls == [(1e-2, 5), (1e-3, 5), (1e-2, 10), (1e-3, 10)]
    best = raffel2015.best_result(cell.path(tmp_path))
    assert (best.epochs, best.learning_rate) == (7, 1e-3)
    # Run again: everything is done, nothing trains.
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 1e-3], 0, False, [])
    assert len(calls) == 4


def test_a_cell_no_rate_solves_trains_every_rate_to_the_cap_round_by_round(tmp_path, monkeypatch):
    calls: list = []
    curves = {1e-2: [80.0] * 12, 3e-3: [70.0] * 12}
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls))
    cell = Cell("multiplication", 5000, "mean")
    raffel2015._race_learning_rates(tmp_path, cell, 12, [1e-2, 3e-3], 0, False, [])
    assert calls == [(1e-2, 5), (3e-3, 5), (1e-2, 10), (3e-3, 10), (1e-2, 12), (3e-3, 12)]
    assert raffel2015.best_result(cell.path(tmp_path)).table_cell() == "80.0% (12 ep.)"
    assert raffel2015.race_budgets(100) == [5, 10, 20, 40, 100] and raffel2015.race_budgets(3) == [3]


def test_a_run_extended_round_by_round_equals_one_trained_straight_to_its_cap(tmp_path):
    cell = Cell("addition", 20, "attention")
    quick = [
        "training.updates_per_epoch=10",
        "training.batch_size=20",
        "data.test_size=50",
        "training.device=cpu",
    ]
    raffel2015._race_learning_rates(tmp_path / "rounds", cell, 7, [3e-4], 0, False, quick)
    straight = tmp_path / "straight" / "seed0"
    raffel2015.train_or_resume(raffel2015.cell_config(cell, 3e-4, 7, False, quick), straight)
    rounds = raffel2015._history(cell.path(tmp_path / "rounds") / "lr0.0003" / "seed0")
    assert [r["epoch"] for r in rounds] == list(range(1, 8))
    assert [r["valid/loss"] for r in rounds] == [r["valid/loss"] for r in raffel2015._history(straight)]


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
        history = raffel2015._history(Cell("addition", 20, pooling).path(out) / "lr0.01" / "seed0")
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
    config = raffel2015.cell_config(cell, 1e-2, 100, False, [])
    assert config["training"]["stop_at_accuracy"] == 99.4 and config["data"]["setting"] == "variable"
    calls: list = []
    curves = {1e-2: [90.0, 99.5] + [100.0] * 98, 1e-3: [50.0] * 100}
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls))
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 1e-3], 0, False, [])
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


def test_an_interrupted_run_past_the_cap_is_evaluated_in_the_last_round_not_trained_further(
    tmp_path, monkeypatch
):
    cell = Cell("addition", 10_000, "attention")
    interrupted = cell.path(tmp_path) / "lr0.01" / "seed0"
    interrupted.mkdir(parents=True)  # 7 epochs logged, killed before its evaluation
    records = [{"epoch": i + 1, "validation_accuracy": 90.0} for i in range(7)]
    (interrupted / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    calls: list = []
    curves = {1e-2: [90.0] * 7, 1e-3: [50.0, 100.0]}
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls))
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 1e-3], 0, False, [])
    # Round 1 skips the 7-epoch run; lr 0.001 reaches 100% at 2 (cap 2); the last round evaluates
    # the interrupted run as it stands (a target of 2 trains nothing more).
    assert calls == [(1e-3, 5), (1e-2, 2)]
    assert len(raffel2015._history(interrupted)) == 7


# ------------------------------------------------------------------ the race by successive halving

UNSOLVED = {  # a greyed-out cell: no rate reaches 100%
    1e-2: [60.0] * 100,
    3e-3: [70.0] * 5 + [65.0] * 95,  # second after round 1, worse than lr 0.0003 within round 2
    1e-3: [40.0] * 100,
    3e-4: [65.0] * 5 + [90.0] * 95,  # starts second-best, best from epoch 6 on
}


def _epochs_logged(cell_dir, seed=0):
    return {
        float(run.parent.name[2:]): len(run.joinpath("metrics.jsonl").read_text().splitlines())
        for run in sorted(cell_dir.glob("lr*/seed*"))
        if run.name == f"seed{seed}"
    }


def test_halving_keeps_the_better_half_after_each_round_nobody_reached_the_goal(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(UNSOLVED, calls))
    cell = Cell("multiplication", 5000, "mean")
    rates = list(raffel2015.LEARNING_RATES)
    raffel2015._race_learning_rates(tmp_path, cell, 100, rates, 0, False, [], "halving")
    # 4 rates to 5 epochs; the best two (0.003: 70%, 0.0003: 65%) to 10; the best of those within
    # 10 epochs (0.0003: 90%) on to the cap: 4*5 + 2*5 + 90 = 120 epochs instead of 400.
    assert calls == [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5), (3e-3, 10), (3e-4, 10)] + [
        (3e-4, 20),
        (3e-4, 40),
        (3e-4, 100),
    ]
    assert _epochs_logged(cell.path(tmp_path)) == {1e-2: 5, 3e-3: 10, 1e-3: 5, 3e-4: 100}
    record = json.loads(raffel2015.race_record(cell.path(tmp_path), 0).read_text())
    assert record["race"] == "halving" and record["cap"] == 100
    assert record["dropped"] == [
        {"learning_rate": 1e-2, "after_round": 5, "best_accuracy": 60.0},
        {"learning_rate": 1e-3, "after_round": 5, "best_accuracy": 40.0},
        {"learning_rate": 3e-3, "after_round": 10, "best_accuracy": 70.0},
    ]
    best = raffel2015.best_result(cell.path(tmp_path))
    assert (best.learning_rate, best.table_cell()) == (3e-4, "90.0% (100 ep.)†")
    # Run again: the same decisions from the runs on disk, nothing trains, the same record.
    raffel2015._race_learning_rates(tmp_path, cell, 100, rates, 0, False, [], "halving")
    assert len(calls) == 9
    assert json.loads(raffel2015.race_record(cell.path(tmp_path), 0).read_text()) == record


def test_the_exact_race_trains_every_rate_of_an_unsolved_cell_to_the_cap(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(UNSOLVED, calls))
    cell = Cell("multiplication", 5000, "mean")
    raffel2015._race_learning_rates(tmp_path, cell, 100, list(raffel2015.LEARNING_RATES), 0, False, [])
    assert _epochs_logged(cell.path(tmp_path)) == dict.fromkeys(raffel2015.LEARNING_RATES, 100)
    record = json.loads(raffel2015.race_record(cell.path(tmp_path), 0).read_text())
    assert record["race"] == "exact" and "dropped" not in record
    assert raffel2015.best_result(cell.path(tmp_path)).table_cell() == "90.0% (100 ep.)"


def test_halving_survivors_are_the_better_half_and_ties_keep_the_earlier_grid_rate():
    survivors = raffel2015.halving_survivors
    assert survivors({1e-2: 60.0, 3e-3: 70.0, 1e-3: 40.0, 3e-4: 65.0}) == [3e-3, 3e-4]
    assert survivors({3e-4: 50.0, 1e-3: 50.0, 3e-3: 50.0, 1e-2: 50.0}) == [3e-3, 1e-2]
    assert survivors({3e-4: 50.0, 1e-3: 50.0, 3e-3: 10.0}) == [3e-4, 1e-3]  # ceil(3 / 2) = 2
    assert survivors({1e-3: 20.0, 3e-4: 20.0}) == [1e-3]
    assert survivors({3e-4: 20.0}) == [3e-4]


def _lr_0_003_solves_at(epoch: int, flat: dict[float, float]) -> dict[float, list[float]]:
    """Curves of 100 epochs: lr 0.003 at 70% until 100% from ``epoch`` on, the others flat at ``flat``."""
    solving = [70.0] * (epoch - 1) + [100.0] * (101 - epoch)
    return {**{rate: [accuracy] * 100 for rate, accuracy in flat.items()}, 3e-3: solving}


def test_once_a_rate_reaches_the_goal_the_halving_race_caps_the_rest_as_the_exact_race(tmp_path, monkeypatch):
    curves = _lr_0_003_solves_at(7, {1e-2: 60.0, 1e-3: 65.0, 3e-4: 40.0})  # in round 2
    rates = list(raffel2015.LEARNING_RATES)
    cell = Cell("multiplication", 10_000, "mean")
    calls: dict[str, list] = {"exact": [], "halving": []}
    for race in calls:
        monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls[race]))
        raffel2015._race_learning_rates(tmp_path / race, cell, 100, rates, 0, False, [], race)
    round1 = [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5)]
    # Halving: 0.01 and 0.0003 dropped after round 1; 0.003 reaches 100% at 7, which caps 0.001 at 7
    # and ends the halving (after round 2 nobody is dropped), as in the exact race, where it caps the
    # rates raced after it (0.01 trained to 10 before).
    assert calls["halving"] == [*round1, (3e-3, 10), (1e-3, 7)]
    assert calls["exact"] == [*round1, (1e-2, 10), (3e-3, 10), (1e-3, 7), (3e-4, 7)]
    for race in calls:
        best = raffel2015.best_result(cell.path(tmp_path / race))
        assert (best.epochs, best.learning_rate) == (7, 3e-3)
    record = json.loads(raffel2015.race_record(cell.path(tmp_path / "halving"), 0).read_text())
    assert record["cap"] == 7 and [(d["learning_rate"], d["after_round"]) for d in record["dropped"]] == [
        (1e-2, 5),
        (3e-4, 5),
    ]


def test_a_rate_reaching_the_goal_in_the_first_round_leaves_nothing_to_halve(tmp_path, monkeypatch):
    curves = {1e-2: [50.0, 100.0], 3e-3: [60.0] * 5, 1e-3: [70.0] * 5}
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls))
    cell = Cell("addition", 1000, "attention")
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 3e-3, 1e-3], 0, False, [], "halving")
    assert calls == [(1e-2, 5), (3e-3, 2), (1e-3, 2)]
    assert json.loads(raffel2015.race_record(cell.path(tmp_path), 0).read_text())["dropped"] == []
    assert "no rate dropped" in raffel2015.report(tmp_path)


def test_halving_can_drop_a_rate_that_starts_slow_and_wins_late(tmp_path, monkeypatch):
    """The deviation from the paper's grid that makes halving an option: the exact race finds lr
    0.001's 100% at epoch 7 (the test above the halving ones); halving drops it after round 1."""
    curves = {1e-2: [90.0] * 100, 1e-3: [50.0] * 6 + [100.0]}
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, calls))
    cell = Cell("multiplication", 10_000, "attention")
    raffel2015._race_learning_rates(tmp_path, cell, 100, [1e-2, 1e-3], 0, False, [], "halving")
    assert calls == [(1e-2, 5), (1e-3, 5), (1e-2, 10), (1e-2, 20), (1e-2, 40), (1e-2, 100)]
    assert raffel2015.best_result(cell.path(tmp_path)).table_cell() == "90.0% (100 ep.)†"


class _Killed(Exception):
    """The campaign is stopped."""


def test_a_halving_race_resumed_after_an_interruption_decides_as_an_uninterrupted_one(tmp_path, monkeypatch):
    curves = _lr_0_003_solves_at(8, {1e-2: 60.0, 1e-3: 40.0, 3e-4: 65.0})  # in round 2
    rates = list(raffel2015.LEARNING_RATES)
    cell = Cell("multiplication", 10_000, "mean")
    straight: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(curves, straight))
    raffel2015._race_learning_rates(tmp_path / "straight", cell, 100, rates, 0, False, [], "halving")
    assert straight == [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5), (3e-3, 10), (3e-4, 8)]

    # Killed in round 2 after lr 0.003 logged its 8 epochs (100% at the 8th), before its evaluation:
    # on resume its log goes past round 1 and reaches the goal, but the decision after round 1 reads
    # only the round's first 5 epochs, so 0.01 and 0.001 are dropped again and not trained.
    calls: list = []
    train = _scripted_trainer(curves, calls)

    def killed_in_round_2(config, run_dir):
        train(config, run_dir)
        if len(calls) == 5:
            (run_dir / "eval" / "summary.json").unlink()
            raise _Killed

    monkeypatch.setattr(raffel2015, "train_or_resume", killed_in_round_2)
    with pytest.raises(_Killed):
        raffel2015._race_learning_rates(tmp_path / "resumed", cell, 100, rates, 0, False, [], "halving")
    assert not raffel2015.race_record(cell.path(tmp_path / "resumed"), 0).exists()
    monkeypatch.setattr(raffel2015, "train_or_resume", train)
    raffel2015._race_learning_rates(tmp_path / "resumed", cell, 100, rates, 0, False, [], "halving")
    assert calls[5:] == [(3e-3, 10), (3e-4, 8)]  # 0.003 evaluated (done), 0.0003 capped at its 8
    resumed, uninterrupted = (cell.path(tmp_path / name) for name in ("resumed", "straight"))
    assert _epochs_logged(resumed) == _epochs_logged(uninterrupted) == {1e-2: 5, 3e-3: 8, 1e-3: 5, 3e-4: 8}
    assert json.loads(raffel2015.race_record(resumed, 0).read_text()) == json.loads(
        raffel2015.race_record(uninterrupted, 0).read_text()
    )


@pytest.mark.parametrize(("first", "then"), [("exact", "halving"), ("halving", "exact"), (None, "halving")])
def test_a_cell_whose_race_ended_in_the_other_mode_is_not_raced_again(
    first, then, tmp_path, monkeypatch, caplog
):
    calls: list = []
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(UNSOLVED, calls))
    cell = Cell("multiplication", 5000, "mean")
    rates = list(raffel2015.LEARNING_RATES)
    record = raffel2015.race_record(cell.path(tmp_path), 0)
    if first is None:  # a record of before --race: an exact race
        for rate in rates:
            _write_run(cell.path(tmp_path), rate, UNSOLVED[rate][:12])
        record.write_text(json.dumps({"learning_rates": rates, "max_epochs": 12}) + "\n")
    else:
        raffel2015._race_learning_rates(tmp_path, cell, 12, rates, 0, False, [], first)
    before, epochs = record.read_text(), _epochs_logged(cell.path(tmp_path))
    calls.clear()
    with caplog.at_level("WARNING", logger=raffel2015.__name__):
        raffel2015._race_learning_rates(tmp_path, cell, 12, rates, 0, False, [], then)
    assert calls == [] and record.read_text() == before and _epochs_logged(cell.path(tmp_path)) == epochs
    assert f"its race ended in {first or 'exact'} mode" in caplog.text
    assert f"not raced again in {then} mode" in caplog.text


def test_the_report_marks_the_cells_raced_by_halving_and_names_the_dropped_rates(tmp_path, monkeypatch):
    calls: list = []
    variable_curves = {rate: [curve[0] + 5.0] * 100 for rate, curve in UNSOLVED.items()}  # < 77.4%
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(UNSOLVED, calls))
    rates = list(raffel2015.LEARNING_RATES)
    halved, exact = Cell("multiplication", 5000, "mean"), Cell("multiplication", 10_000, "mean")
    raffel2015._race_learning_rates(tmp_path, halved, 100, rates, 0, False, [], "halving")
    raffel2015._race_learning_rates(tmp_path, exact, 100, [1e-2], 0, False, [], "exact")
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(variable_curves, calls))
    raffel2015._race_learning_rates(
        tmp_path, Cell("addition", None, "mean"), 100, rates, 0, False, [], "halving"
    )
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
    monkeypatch.setattr(raffel2015, "train_or_resume", _scripted_trainer(UNSOLVED, calls))
    out = tmp_path / "raffel"
    args = ["reproduce", "raffel2015", "--out", str(out), "--problems", "multiplication", "--t0", "5000"]
    args += ["--poolings", "mean", "--no-variable", "--max-epochs", "12"]
    assert main([*args, "--race", "halving"]) == 0
    assert calls == [(rate, 5) for rate in raffel2015.LEARNING_RATES] + [(3e-3, 10), (3e-4, 10), (3e-4, 12)]
    cell_dir = Cell("multiplication", 5000, "mean").path(out)
    assert json.loads(raffel2015.race_record(cell_dir, 0).read_text())["race"] == "halving"
    assert "90.0% (12 ep.)†" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--race", "fastest"])
    assert exit_.value.code == 2
    assert "argument --race: invalid choice: 'fastest' (choose from" in capsys.readouterr().err
