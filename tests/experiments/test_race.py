"""The learning-rate race (``experiments/race.py``): rounds, caps, successive halving, resuming,
the race record and the cell's best result; runs trained by a scripted stand-in."""

import json

import pytest
from scripted_race import UNSOLVED, epochs_logged, scripted_trainer, write_run

from attnlab.experiments import race as races
from attnlab.experiments.race import Race

GRID = (1e-2, 3e-3, 1e-3, 3e-4)
"""The candidate rates in the order they are raced; halving ties keep the earlier one."""


def _race(cell_dir, learning_rates, max_epochs, mode="exact", goal=100.0):
    config = {"training": {"stop_at_accuracy": goal}}  # what the scripted trainer reads
    return Race(cell_dir, config, [], list(learning_rates), goal, max_epochs, "valid/accuracy", 0, mode, GRID)


@pytest.fixture
def calls_with(monkeypatch):
    """``calls_with(curves)``: train the race's runs along ``curves``; the list of calls made."""

    def script(curves, calls=None):
        calls = [] if calls is None else calls
        monkeypatch.setattr(races, "train_or_resume", scripted_trainer(curves, calls))
        return calls

    return script


def _record(cell_dir):
    return json.loads(races.race_record(cell_dir, 0).read_text())


def _best(cell_dir):
    return races.best_result(cell_dir, 0, 100.0, "valid/accuracy")


@pytest.mark.parametrize("key", ["valid/accuracy", "validation_accuracy"])
def test_best_result_prefers_fewest_epochs_then_highest_accuracy(tmp_path, key):
    cell = tmp_path / "cell"
    write_run(cell, 1e-2, [90.0, 99.0, 100.0], key)
    write_run(cell, 1e-3, [95.0, 100.0], key)
    write_run(cell, 3e-4, [99.9], key)
    best = _best(cell)
    assert (best.epochs, best.learning_rate, best.table_cell()) == (2, 1e-3, "2, unfinished")
    races.race_record(cell, 0).write_text("{}")  # the race has ended: the result is final
    assert _best(cell).table_cell() == "2"

    failing = tmp_path / "failing"
    write_run(failing, 1e-2, [50.0, 80.0], key)
    write_run(failing, 1e-3, [60.0, 85.5], key)
    races.race_record(failing, 0).write_text("{}")
    best = _best(failing)
    assert best.epochs is None and best.table_cell() == "85.5% (2 ep.)"
    assert _best(tmp_path / "missing") is None


def test_the_race_runs_in_rounds_so_a_fast_rate_that_never_converges_does_not_hold_up_the_rest(
    tmp_path, calls_with
):
    never = [90.0] * 100  # lr 0.01 oscillates below 100% for all 100 epochs
    slow = [50.0] * 6 + [100.0]  # lr 0.001 reaches 100% in epoch 7
    calls = calls_with({1e-2: never, 1e-3: slow})
    races.run_race(_race(tmp_path, [1e-2, 1e-3], 100))
    # Round 1 (5 epochs) and round 2 (10): lr 0.001 reaches 100% at 7, which caps everything after.
    assert calls == [(1e-2, 5), (1e-3, 5), (1e-2, 10), (1e-3, 10)]
    best = _best(tmp_path)
    assert (best.epochs, best.learning_rate) == (7, 1e-3)
    # Run again: everything is done, nothing trains.
    races.run_race(_race(tmp_path, [1e-2, 1e-3], 100))
    assert len(calls) == 4


def test_a_cell_no_rate_solves_trains_every_rate_to_the_cap_round_by_round(tmp_path, calls_with):
    calls = calls_with({1e-2: [80.0] * 12, 3e-3: [70.0] * 12})
    races.run_race(_race(tmp_path, [1e-2, 3e-3], 12))
    assert calls == [(1e-2, 5), (3e-3, 5), (1e-2, 10), (3e-3, 10), (1e-2, 12), (3e-3, 12)]
    assert _best(tmp_path).table_cell() == "80.0% (12 ep.)"
    assert races.race_budgets(100) == [5, 10, 20, 40, 100] and races.race_budgets(3) == [3]


def test_a_run_is_configured_by_the_cell_then_the_rate_and_epochs_then_the_overrides_and_seed(tmp_path):
    base = {"training": {"clip": 1}}
    race = Race(tmp_path, base, ["training.epochs=3"], [1e-2], 100.0, 9, "valid/accuracy", seed=4)
    training = {"clip": 1, "learning_rate": 0.01, "epochs": 3, "seed": 4}  # an override wins
    assert race.run_config(1e-2, 7) == {"training": training} and base == {"training": {"clip": 1}}
    assert races.run_dir(tmp_path, 1e-3, 4) == tmp_path / "lr0.001" / "seed4"


def test_an_interrupted_run_past_the_cap_is_evaluated_in_the_last_round_not_trained_further(
    tmp_path, calls_with
):
    interrupted = tmp_path / "lr0.01" / "seed0"
    interrupted.mkdir(parents=True)  # 7 epochs logged, killed before its evaluation
    records = [{"epoch": i + 1, "validation_accuracy": 90.0} for i in range(7)]
    (interrupted / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    calls = calls_with({1e-2: [90.0] * 7, 1e-3: [50.0, 100.0]})
    races.run_race(_race(tmp_path, [1e-2, 1e-3], 100))
    # Round 1 skips the 7-epoch run; lr 0.001 reaches 100% at 2 (cap 2); the last round evaluates
    # the interrupted run as it stands (a target of 2 trains nothing more).
    assert calls == [(1e-3, 5), (1e-2, 2)]
    assert len(races.finished_history(interrupted)) == 7


def test_a_race_stops_at_its_goal_short_of_100(tmp_path, calls_with):
    calls = calls_with({1e-2: [90.0, 99.5] + [100.0] * 98, 1e-3: [50.0] * 100})
    races.run_race(_race(tmp_path, [1e-2, 1e-3], 100, goal=99.4))
    assert calls == [(1e-2, 5), (1e-3, 2)]  # 99.5 >= 99.4 at epoch 2 caps the other rate at 2
    best = races.best_result(tmp_path, 0, 99.4, "valid/accuracy")
    assert (best.epochs, best.accuracy, best.epochs_text()) == (2, 99.5, "2")


# ------------------------------------------------------------------ the race by successive halving


def test_halving_keeps_the_better_half_after_each_round_nobody_reached_the_goal(tmp_path, calls_with):
    calls = calls_with(UNSOLVED)
    races.run_race(_race(tmp_path, GRID, 100, "halving"))
    # 4 rates to 5 epochs; the best two (0.003: 70%, 0.0003: 65%) to 10; the best of those within
    # 10 epochs (0.0003: 90%) on to the cap: 4*5 + 2*5 + 90 = 120 epochs instead of 400.
    assert calls == [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5), (3e-3, 10), (3e-4, 10)] + [
        (3e-4, 20),
        (3e-4, 40),
        (3e-4, 100),
    ]
    assert epochs_logged(tmp_path) == {1e-2: 5, 3e-3: 10, 1e-3: 5, 3e-4: 100}
    record = _record(tmp_path)
    assert record["race"] == "halving" and record["cap"] == 100
    assert record["dropped"] == [
        {"learning_rate": 1e-2, "after_round": 5, "best_accuracy": 60.0},
        {"learning_rate": 1e-3, "after_round": 5, "best_accuracy": 40.0},
        {"learning_rate": 3e-3, "after_round": 10, "best_accuracy": 70.0},
    ]
    best = _best(tmp_path)
    assert (best.learning_rate, best.table_cell()) == (3e-4, "90.0% (100 ep.)†")
    # Run again: the same decisions from the runs on disk, nothing trains, the same record.
    races.run_race(_race(tmp_path, GRID, 100, "halving"))
    assert len(calls) == 9
    assert _record(tmp_path) == record


def test_an_ended_halving_race_reports_the_rate_that_went_on_not_a_dropped_one(tmp_path, calls_with):
    """The rate that went on to the cap is the cell's result even when its last epoch is worse than
    where a dropped rate stood when it was dropped (session 21: multiplication / mean at T0 = 5,000,
    lr 0.01 fell from 63% to 0% at its 100th epoch; lr 0.003 had 49% when dropped after 10); the
    dip is shown beside the best epoch's accuracy."""
    calls_with({1e-2: [40.0] * 4 + [60.0] * 95 + [0.0], 3e-3: [30.0] * 100})
    races.run_race(_race(tmp_path, [1e-2, 3e-3], 100, "halving"))
    assert epochs_logged(tmp_path) == {1e-2: 100, 3e-3: 5}  # lr 0.003 dropped at 30%, above 0%
    best = _best(tmp_path)
    assert best.learning_rate == 1e-2 and best.accuracy == 0.0 and best.best_accuracy == 60.0
    assert best.table_cell() == "0.0% (100 ep.; best 60.0%)†"


def test_the_exact_race_trains_every_rate_of_an_unsolved_cell_to_the_cap(tmp_path, calls_with):
    calls_with(UNSOLVED)
    races.run_race(_race(tmp_path, GRID, 100))
    assert epochs_logged(tmp_path) == dict.fromkeys(GRID, 100)
    record = _record(tmp_path)
    assert record == {"race": "exact", "learning_rates": list(GRID), "max_epochs": 100, "cap": 100}
    assert _best(tmp_path).table_cell() == "90.0% (100 ep.)"


def test_halving_survivors_are_the_better_half_and_ties_keep_the_earlier_preferred_rate():
    def survivors(best):
        return races.halving_survivors(best, GRID)

    assert survivors({1e-2: 60.0, 3e-3: 70.0, 1e-3: 40.0, 3e-4: 65.0}) == [3e-3, 3e-4]
    assert survivors({3e-4: 50.0, 1e-3: 50.0, 3e-3: 50.0, 1e-2: 50.0}) == [3e-3, 1e-2]
    assert survivors({3e-4: 50.0, 1e-3: 50.0, 3e-3: 10.0}) == [3e-4, 1e-3]  # ceil(3 / 2) = 2
    assert survivors({1e-3: 20.0, 3e-4: 20.0}) == [1e-3]
    assert survivors({3e-4: 20.0}) == [3e-4]
    assert races.halving_survivors({0.5: 20.0, 3e-4: 20.0}, GRID) == [3e-4]  # unlisted: last


def _lr_0_003_solves_at(epoch: int, flat: dict[float, float]) -> dict[float, list[float]]:
    """Curves of 100 epochs: lr 0.003 at 70% until 100% from ``epoch`` on, the others flat at ``flat``."""
    solving = [70.0] * (epoch - 1) + [100.0] * (101 - epoch)
    return {**{rate: [accuracy] * 100 for rate, accuracy in flat.items()}, 3e-3: solving}


def test_once_a_rate_reaches_the_goal_the_halving_race_caps_the_rest_as_the_exact_race(tmp_path, calls_with):
    curves = _lr_0_003_solves_at(7, {1e-2: 60.0, 1e-3: 65.0, 3e-4: 40.0})  # in round 2
    calls: dict[str, list] = {"exact": [], "halving": []}
    for mode in calls:
        calls_with(curves, calls[mode])
        races.run_race(_race(tmp_path / mode, GRID, 100, mode))
    round1 = [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5)]
    # Halving: 0.01 and 0.0003 dropped after round 1; 0.003 reaches 100% at 7, which caps 0.001 at 7
    # and ends the halving (after round 2 nobody is dropped), as in the exact race, where it caps the
    # rates raced after it (0.01 trained to 10 before).
    assert calls["halving"] == [*round1, (3e-3, 10), (1e-3, 7)]
    assert calls["exact"] == [*round1, (1e-2, 10), (3e-3, 10), (1e-3, 7), (3e-4, 7)]
    for mode in calls:
        best = _best(tmp_path / mode)
        assert (best.epochs, best.learning_rate) == (7, 3e-3)
    record = _record(tmp_path / "halving")
    assert record["cap"] == 7 and [(d["learning_rate"], d["after_round"]) for d in record["dropped"]] == [
        (1e-2, 5),
        (3e-4, 5),
    ]


def test_a_rate_reaching_the_goal_in_the_first_round_leaves_nothing_to_halve_or_mark(tmp_path, calls_with):
    calls = calls_with({1e-2: [50.0, 100.0], 3e-3: [60.0] * 5, 1e-3: [70.0] * 5})
    races.run_race(_race(tmp_path, [1e-2, 3e-3, 1e-3], 100, "halving"))
    assert calls == [(1e-2, 5), (3e-3, 2), (1e-3, 2)]
    assert _record(tmp_path)["dropped"] == []
    best = _best(tmp_path)
    assert best.race == "halving" and best.mark == ""  # decided exactly as the exact race: not marked
    assert races.titled_table("#### T", "| table |", {"cell": best}) == "#### T\n\n| table |"


def test_halving_can_drop_a_rate_that_starts_slow_and_wins_late(tmp_path, calls_with):
    """The deviation from an exhaustive grid that makes halving an option: the exact race finds lr
    0.001's 100% at epoch 7 (the first test of the rounds); halving drops it after round 1."""
    calls = calls_with({1e-2: [90.0] * 100, 1e-3: [50.0] * 6 + [100.0]})
    races.run_race(_race(tmp_path, [1e-2, 1e-3], 100, "halving"))
    assert calls == [(1e-2, 5), (1e-3, 5), (1e-2, 10), (1e-2, 20), (1e-2, 40), (1e-2, 100)]
    assert _best(tmp_path).table_cell() == "90.0% (100 ep.)†"


class _Killed(Exception):
    """The campaign is stopped."""


def test_a_halving_race_resumed_after_an_interruption_decides_as_an_uninterrupted_one(
    tmp_path, calls_with, monkeypatch
):
    curves = _lr_0_003_solves_at(8, {1e-2: 60.0, 1e-3: 40.0, 3e-4: 65.0})  # in round 2
    straight = calls_with(curves)
    races.run_race(_race(tmp_path / "straight", GRID, 100, "halving"))
    assert straight == [(1e-2, 5), (3e-3, 5), (1e-3, 5), (3e-4, 5), (3e-3, 10), (3e-4, 8)]

    # Killed in round 2 after lr 0.003 logged its 8 epochs (100% at the 8th), before its evaluation:
    # on resume its log goes past round 1 and reaches the goal, but the decision after round 1 reads
    # only the round's first 5 epochs, so 0.01 and 0.001 are dropped again and not trained.
    calls: list = []
    train = scripted_trainer(curves, calls)

    def killed_in_round_2(config, run_dir):
        train(config, run_dir)
        if len(calls) == 5:
            (run_dir / "eval" / "summary.json").unlink()
            raise _Killed

    monkeypatch.setattr(races, "train_or_resume", killed_in_round_2)
    with pytest.raises(_Killed):
        races.run_race(_race(tmp_path / "resumed", GRID, 100, "halving"))
    assert not races.race_record(tmp_path / "resumed", 0).exists()
    monkeypatch.setattr(races, "train_or_resume", train)
    races.run_race(_race(tmp_path / "resumed", GRID, 100, "halving"))
    assert calls[5:] == [(3e-3, 10), (3e-4, 8)]  # 0.003 evaluated (done), 0.0003 capped at its 8
    resumed, uninterrupted = tmp_path / "resumed", tmp_path / "straight"
    assert epochs_logged(resumed) == epochs_logged(uninterrupted) == {1e-2: 5, 3e-3: 8, 1e-3: 5, 3e-4: 8}
    assert _record(resumed) == _record(uninterrupted)


@pytest.mark.parametrize(("first", "then"), [("exact", "halving"), ("halving", "exact"), (None, "halving")])
def test_a_cell_whose_race_ended_in_the_other_mode_is_not_raced_again(
    first, then, tmp_path, calls_with, caplog
):
    calls = calls_with(UNSOLVED)
    record = races.race_record(tmp_path, 0)
    if first is None:  # a record of before --race: an exact race
        for rate in GRID:
            write_run(tmp_path, rate, UNSOLVED[rate][:12])
        record.write_text(json.dumps({"learning_rates": list(GRID), "max_epochs": 12}) + "\n")
    else:
        races.run_race(_race(tmp_path, GRID, 12, first))
    before, epochs = record.read_text(), epochs_logged(tmp_path)
    calls.clear()
    with caplog.at_level("WARNING", logger=races.__name__):
        races.run_race(_race(tmp_path, GRID, 12, then))
    assert calls == [] and record.read_text() == before and epochs_logged(tmp_path) == epochs
    assert f"its race ended in {first or 'exact'} mode" in caplog.text
    assert f"not raced again in {then} mode" in caplog.text


def test_a_table_says_how_its_rates_were_raced_and_names_the_dropped_ones(tmp_path, calls_with):
    calls_with(UNSOLVED)
    races.run_race(_race(tmp_path / "halved", GRID, 100, "halving"))
    races.run_race(_race(tmp_path / "exact", [1e-2], 100))
    halved, exact = _best(tmp_path / "halved"), _best(tmp_path / "exact")
    assert races.titled_table("#### T", "| t |", {"exact": exact}) == "#### T\n\n| t |"
    only = races.titled_table("#### T", "| t |", {"halved": halved})
    assert only.startswith(
        "#### T. Learning rates raced by successive halving (every ended race; cells marked †)"
    )
    both = races.titled_table("#### T", "| t |", {"halved": halved, "exact": exact}).splitlines()
    assert both[0] == (
        "#### T. Learning rates raced over the whole grid (unmarked cells) and by successive halving "
        "(cells marked †)"
    )
    assert both[-1] == "- halved: lr 0.01, 0.001 after 5 epochs; lr 0.003 after 10 epochs"
