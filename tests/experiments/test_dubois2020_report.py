"""The Dubois 2020 recipe's report is rebuilt from run directories alone (no training here)."""

import json

import pytest

from attnlab.experiments.lookup import recipe as dubois2020

TEST_SETS = dubois2020.TEST_SETS


def _write_run(root, task, attender, seed, seq_acc, attn_loss):
    metrics = {"seq_acc": seq_acc, "seq_acc_be": seq_acc, "attn_loss": attn_loss}
    summary = {name: metrics for name in TEST_SETS}
    path = root / task / attender / f"seed{seed}" / "eval" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))


def test_report_writes_figures_tables_and_aggregates(tmp_path):
    for task, loss in (("long", 1.0), ("reversed", 3.0)):
        _write_run(tmp_path, task, "mix", 0, 100.0, loss)
        _write_run(tmp_path, task, "mix", 1, 90.0, loss + 2.0)
        _write_run(tmp_path, task, "transformer", 0, 50.0, 10.0)

    text = dubois2020.report(tmp_path)

    for name in ("figure6_seqacc_long.png", "figure7_seqaccbe_long.png", "figure8_seqaccbe_reversed.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert not (tmp_path / "figure8_seqaccbe_noisy.png").exists()  # no noisy runs
    aggregate = json.loads((tmp_path / "long" / "mix" / "aggregate.json").read_text())
    assert aggregate["seeds"] == [0, 1]
    stats = aggregate["results"]["long1"]["seq_acc"]
    assert stats["mean"] == pytest.approx(95.0) and stats["n"] == 2
    assert "| mix (n=2) | 95.0 ± 7.1 |" in text
    # Table 3: mean over tasks of the mean over seeds: long (1+3)/2 = 2, reversed (3+5)/2 = 4 -> 3.0
    table3 = (tmp_path / "table3_attnloss.md").read_text()
    assert "| mix | 3.0 (2.1) |" in table3
    assert (tmp_path / "results.md").read_text().startswith("#### long: seqAcc")


def test_report_without_runs_says_so(tmp_path):
    assert "no finished runs" in dubois2020.report(tmp_path)


def test_extrapolating_cells_use_the_issue6_config():
    from attnlab.experiments.lookup import experiment as lookup
    from attnlab.experiments.lookup.recipe import cell_config

    location = lookup.EXPERIMENT.parse_config(cell_config("reversed", "location_extrapolate", quick=False))
    assert (location.data.variant, location.model.attender, location.model.encoder) == (
        "reversed",
        "location",
        "local",
    )
    assert not location.model.decoder_recurrence and location.model.input_feeding
    assert location.model.attender_options["gates"] == "straight_through"
    anchored = lookup.EXPERIMENT.parse_config(cell_config("noisy", "mix_anchor_extrapolate", quick=True))
    assert anchored.model.attender == "mix" and anchored.model.attender_options["combination"] == "anchor"
    assert anchored.training.epochs == 1  # quick overrides still apply
    paper = lookup.EXPERIMENT.parse_config(cell_config("noisy", "mix", quick=False))
    assert paper.model.encoder == "gru" and paper.model.decoder_recurrence and not paper.model.input_feeding


def test_shift_cells_use_the_shift_config_and_undo_one_choice_each():
    from attnlab.experiments.lookup import experiment as lookup
    from attnlab.experiments.lookup.recipe import SHIFT_ABLATIONS, cell_config

    shift = lookup.EXPERIMENT.parse_config(cell_config("noisy", "shift_extrapolate", quick=False))
    assert (shift.data.variant, shift.model.attender, shift.model.encoder) == ("noisy", "shift", "gru")
    assert not shift.model.decoder_recurrence and shift.model.input_feeding
    for name in SHIFT_ABLATIONS:
        ablated = lookup.EXPERIMENT.parse_config(cell_config("noisy", name, quick=False))
        assert ablated.model.attender == "shift" and ablated != shift, name
    softmax = lookup.EXPERIMENT.parse_config(
        cell_config("long", "shift_extrapolate-hard_choice", quick=False)
    )
    assert softmax.model.attender_options == {"choice": "softmax"}
