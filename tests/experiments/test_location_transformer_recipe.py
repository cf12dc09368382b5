"""The issue-28 recipe joins its sweeps' run directories into the issue's tables (no training here)."""

import json

import pytest
import yaml

from attnlab.config import ConfigError
from attnlab.experiments import sweep
from attnlab.experiments.location_transformer import recipe


def _finish(out, part, cell_params, seed, results):
    """Write the eval summary of the run of ``part`` with those grid values and seed."""
    runs = [
        run
        for run in sweep.expand(recipe.spec_of(part))
        if run.seed == seed and all(run.params[key] == value for key, value in cell_params.items())
    ]
    assert len(runs) == 1, runs
    path = runs[0].run_dir(out / part) / "eval" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(results))


def _lookup_results(long5, long1=100.0):
    return {"long1": {"seq_acc": long1}, "long5": {"seq_acc": long5}}


def test_the_tables_put_each_sweep_cell_in_its_row_and_column(tmp_path):
    stop = {"data.variant": "long", "model.transformer.positional": "sinusoidal"}
    _finish(tmp_path, "lookup_stop", stop, 0, _lookup_results(100.0))
    _finish(tmp_path, "lookup_stop", stop, 1, _lookup_results(90.0, long1=80.0))
    _finish(tmp_path, "lookup_stop_all_layers", {**stop, "data.variant": "noisy"}, 1, _lookup_results(97.5))
    _finish(tmp_path, "lookup_stop_gate10", stop, 2, _lookup_results(99.0))
    _finish(tmp_path, "lookup_stop_detached", stop, 0, _lookup_results(98.0))
    _finish(tmp_path, "lookup_stop_gradient01", stop, 0, _lookup_results(96.0))
    dot = {**stop, "model.transformer.cross_attention": "dot"}
    _finish(tmp_path, "lookup", dot, 0, _lookup_results(0.0))
    reversed_shift = {
        "data.variant": "reversed",
        "model.transformer.positional": "rope",
        "model.transformer.cross_attention": "shift",
    }
    _finish(tmp_path, "lookup", reversed_shift, 2, _lookup_results(40.0))
    scan_cell = {"model.transformer.positional": "relative", "model.transformer.cross_attention": "dot"}
    _finish(tmp_path, "scan_length", scan_cell, 0, {"test": {"seq_acc": 12.5, "seq_acc_given_length": 60.0}})
    stop_cell = {"model.transformer.positional": "relative", "model.transformer.cross_attention": "shift"}
    _finish(tmp_path, "scan_stop", stop_cell, 1, {"test": {"seq_acc": 18.0, "seq_acc_given_length": 55.0}})
    _finish(
        tmp_path, "scan_semantic", stop_cell, 0, {"test": {"seq_acc": 31.0, "seq_acc_given_length": 60.0}}
    )
    _finish(tmp_path, "scan_peers", stop_cell, 2, {"test": {"seq_acc": 53.0, "seq_acc_given_length": 73.0}})
    dropout = {"test": {"seq_acc": 76.0, "seq_acc_given_length": 90.0}}
    _finish(tmp_path, "scan_peers_dropout", stop_cell, 0, dropout)
    shared = {"test": {"seq_acc": 85.0, "seq_acc_given_length": 93.0}}
    _finish(tmp_path, "scan_shared_heads", stop_cell, 1, shared)
    gated = {"test": {"seq_acc": 94.0, "seq_acc_given_length": 99.0}}
    _finish(tmp_path, "scan_gated_heads", stop_cell, 0, gated)
    _finish(
        tmp_path, "scan_peers_as_one", stop_cell, 2, {"test": {"seq_acc": 93.0, "seq_acc_given_length": 99.9}}
    )
    cutoff = {
        "data.max_train_actions": 26,
        "model.transformer.positional": "rope",
        "model.transformer.cross_attention": "shift",
    }
    _finish(tmp_path, "scan_cutoffs", cutoff, 0, {"test": {"seq_acc": 77.0}})
    _finish(
        tmp_path,
        "scan_recurrent_shift_cutoffs",
        {"data.max_train_actions": 24},
        0,
        {"test": {"seq_acc": 64.0}},
    )

    text = recipe.report(tmp_path)

    long5, long1 = (
        text.split("seqAcc (%) at long 5")[1].split("###")[0],
        text.split("seqAcc (%) at long 1")[1].split("###")[0],
    )
    # one table per variant, each under its name; the Long one first
    long_table = long5.split("**Long Lookup Tables**")[1].split("**Reversed Lookup Tables**")[0]
    reversed_table = long5.split("**Reversed Lookup Tables**")[1]
    header = (
        "| dot | shift | shift + stop | shift + stop, all layers, gate ×10 "
        "| shift + stop, all layers, gate ×10, detached "
        "| shift + stop, all layers, gate ×10, gradient ×0.1 |"
    )
    assert header in long_table and header in reversed_table  # the all-layers stop ran on Noisy-start only
    # sinusoidal: dot 0.0 (n=1), shift blank, shift + stop 95.0 ± 7.1 (n=2), through the sharper gate
    # 99.0 (n=1), detached 98.0 (n=1), over (head, end) 96.0 (n=1)
    row = (
        "| sinusoidal | 0.0 ± 0.0 (n=1) |  | 95.0 ± 7.1 (n=2) | 99.0 ± 0.0 (n=1) "
        "| 98.0 ± 0.0 (n=1) | 96.0 ± 0.0 (n=1) |"
    )
    assert row in long_table
    assert "| rope |  | 40.0 ± 0.0 (n=1) |  |  |  |  |" in reversed_table
    assert "| rope |" not in long_table  # no Long run with RoPE finished
    noisy_table = long5.split("**Noisy-start Lookup Tables**")[1]
    assert "| shift + stop | shift + stop, all layers | shift + stop, all layers, gate ×10 |" in noisy_table
    assert "| sinusoidal |  |  |  | 97.5 ± 0.0 (n=1) |  |  |  |" in noisy_table
    assert "| sinusoidal | 100.0 ± 0.0 (n=1) |  | 90.0 ± 14.1 (n=2) |" in long1
    # rows follow the sweep's order of schemes, not the order runs were found in
    sinusoidal_reversed = {**stop, "data.variant": "reversed"}
    _finish(tmp_path, "lookup_stop", sinusoidal_reversed, 0, _lookup_results(100.0))
    tables = recipe.lookup_table(recipe.collect(tmp_path), "long5")
    reversed_table = tables.split("**Reversed Lookup Tables**")[1]
    assert reversed_table.index("| sinusoidal |") < reversed_table.index("| rope |")
    scan = text.split("SCAN: test exact match")[1].split("###")[0]
    header = (
        "|  | length · dot | length · shift | length · dot + stop | length · shift + stop | add-jump · dot |"
    )
    assert header in scan
    assert (
        "| relative | 12.5 ± 0.0 (n=1) |  |  | 18.0 ± 0.0 (n=1) |  |  |  | 31.0 ± 0.0 (n=1) |  "
        "| 53.0 ± 0.0 (n=1) |  | 76.0 ± 0.0 (n=1) |  | 85.0 ± 0.0 (n=1) |  | 94.0 ± 0.0 (n=1) "
        "|  | 93.0 ± 0.0 (n=1) |  |  |" in scan
    )
    assert "| add-jump · dot + semantic | add-jump · shift + semantic | add-jump · dot + peers |" in scan
    assert (
        "| add-jump · shift + peers | add-jump · dot + peers, dropout | add-jump · shift + peers, dropout |"
        in scan
    )
    assert "| add-jump · dot + shared heads, stop | add-jump · shift + shared heads, stop |" in scan
    assert "| add-jump · dot + gated heads, stop | add-jump · shift + gated heads, stop |" in scan
    assert "| add-jump · shift + peers as one, gated heads, stop | simple · dot |" in scan
    given_length = text.split("with the output length given")[1].split("###")[0]
    assert (
        "| relative | 60.0 ± 0.0 (n=1) |  |  | 55.0 ± 0.0 (n=1) |  |  |  | 60.0 ± 0.0 (n=1) |" in given_length
    )
    cutoffs = text.split("cut at N actions")[1].split("###")[0]
    assert "|  | 22 | 24 | 25 | 26 |" in cutoffs
    assert "| rope · shift |  |  |  | 77.0 ± 0.0 (n=1) |" in cutoffs
    assert "| recurrent Shift Attender (GRU) |  | 64.0 ± 0.0 (n=1) |  |  |" in cutoffs
    assert cutoffs.index("| rope · shift |") < cutoffs.index("| recurrent Shift Attender (GRU) |")
    assert "Csordás et al. 2021" in text and "(theirs)" in text
    assert "no finished runs" in text.split("the recurrent Shift Attender")[1].split("###")[0]
    assert (tmp_path / "results.md").read_text().rstrip() == text
    assert "no finished runs" not in text.split("paper's data protocol")[0]
    assert "no finished runs" in text.split("paper's data protocol")[1].split("###")[0]


def test_the_recurrent_shift_attender_has_a_scan_table_and_its_length_cells_a_sentence_row(tmp_path):
    recurrent = "scan_recurrent_shift"
    length = {"test": {"seq_acc": 10.0, "seq_acc_given_length": 50.0, "examples": 3920.0}}
    length["test"] |= {"long_sentence_examples": 3144.0, "seq_acc_short_sentences": 40.0}
    _finish(tmp_path, recurrent, {"data.split": "length"}, 0, length)
    _finish(tmp_path, recurrent, {"data.split": "length"}, 1, {"test": {**length["test"], "seq_acc": 20.0}})
    _finish(tmp_path, recurrent, {"data.split": "simple"}, 0, {"test": {"seq_acc": 99.0}})
    _finish(
        tmp_path,
        "scan_recurrent_lstm_shift",
        {"data.split": "length"},
        0,
        {"test": {**length["test"], "seq_acc": 30.0}},
    )

    markers = "scan_recurrent_shift_markers"
    repetition = {"data.split": "length", "data.output_markers": ["repetition"]}
    _finish(tmp_path, markers, repetition, 0, {"test": {**length["test"], "seq_acc": 70.0}})
    _finish(tmp_path, markers, repetition, 1, {"test": {**length["test"], "seq_acc": 60.0}})
    both = {"data.split": "length", "data.output_markers": ["repetition", "sentence"]}
    _finish(tmp_path, markers, both, 0, {"test": {**length["test"], "seq_acc": 80.0}})

    text = recipe.report(tmp_path)

    section = text.split("the recurrent Shift Attender")[1].split("###")[0]
    assert "|  | length | add-jump | simple |" in section
    assert (
        "| GRU decoder + repetition markers: exact match, stopping by itself | 65.0 ± 7.1 (n=2) |" in section
    )
    assert (
        "| GRU decoder + repetition, sentence markers: exact match, stopping by itself | 80.0 ± 0.0 (n=1) |"
        in (section)
    )
    assert (
        "| GRU decoder: exact match, stopping by itself | 15.0 ± 7.1 (n=2) |  | 99.0 ± 0.0 (n=1) |" in section
    )
    assert "| GRU decoder: exact match, the length given | 50.0 ± 0.0 (n=2) |  |  |" in section
    assert "| LSTM decoder: exact match, stopping by itself | 30.0 ± 0.0 (n=1) |  |  |" in section
    assert section.index("| GRU decoder: exact match, the length given |") < section.index("| LSTM decoder:")
    sentences = text.split("longer than any training output")[1].split("###")[0]
    assert "| scan_recurrent_shift · length | 22 | 776 | 40.0 ± 0.0 (n=2) |" in sentences
    assert "| scan_recurrent_lstm_shift · length | 22 | 776 | 40.0 ± 0.0 (n=1) |" in sentences
    assert "| scan_recurrent_shift_markers · length, repetition+sentence | 22 | 776 |" in sentences
    assert "scan_recurrent_shift · simple" not in sentences  # not a length split
    assert "| scan_recurrent_shift · simple | test |" not in text  # no errors file, no error row


def test_the_machine_tasks_tables_have_a_column_per_test_set_and_a_table_per_variant(tmp_path):
    def results(longer_seen_5, heldout_tables):
        sets = {
            name: {"seq_acc": 100.0} for name in ("heldout_inputs", "heldout_compositions", "longer_seen_1")
        }
        sets.update(longer_seen_5={"seq_acc": longer_seen_5}, heldout_tables={"seq_acc": heldout_tables})
        return sets

    long_rope = {"data.variant": "long", "model.transformer.positional": "rope"}
    _finish(tmp_path, "lookup_stop_gradient01_machine_tasks", long_rope, 0, results(100.0, 60.0))
    _finish(tmp_path, "lookup_stop_gradient01_machine_tasks", long_rope, 1, results(90.0, 40.0))
    noisy_none = {"data.variant": "intermediate-noise", "model.transformer.positional": "none"}
    _finish(tmp_path, "lookup_stop_gradient01_machine_tasks", noisy_none, 2, results(0.0, 0.0))
    long_sinusoidal = {"data.variant": "long", "model.transformer.positional": "sinusoidal"}
    _finish(tmp_path, "lookup_stop_gradient01_machine_tasks", long_sinusoidal, 0, results(100.0, 50.0))

    text = recipe.report(tmp_path)

    section = text.split("paper's data protocol (machine-tasks)")[1].split("###")[0]
    long_table = section.split("**Long**")[1].split("**Intermediate noise**")[0]
    header = (
        "| heldout_inputs | heldout_compositions | longer_seen_1 | longer_seen_5 | heldout_tables "
        "| new_compositions | longer_incremental_5 | longer_new_5 |"
    )
    assert header in long_table
    # the mean ± std over a cell's seeds; a test set a run does not report is blank
    assert (
        "| rope | 100.0 ± 0.0 (n=2) | 100.0 ± 0.0 (n=2) | 100.0 ± 0.0 (n=2) | 95.0 ± 7.1 (n=2) "
        "| 50.0 ± 14.1 (n=2) |  |  |  |" in long_table
    )
    assert long_table.index("| sinusoidal |") < long_table.index("| rope |")  # the sweep's order
    assert "| none |" not in long_table
    assert "| none | 100.0 ± 0.0 (n=1) | 100.0 ± 0.0 (n=1) | 100.0 ± 0.0 (n=1) | 0.0 ± 0.0 (n=1) |" in section
    assert "**Reversed**" not in section  # no finished run, no table
    assert "Lookup Tables**" not in text  # nor any of attnlab's generator
    assert "### Lookup Tables: seqAcc (%) at long 5" in text


def test_a_folder_without_finished_runs_is_a_clear_error(tmp_path):
    (tmp_path / "lookup").mkdir()
    with pytest.raises(ConfigError, match="no finished run of any part"):
        recipe.report(tmp_path)


def test_reproduce_trains_the_chosen_parts_into_their_folders(tmp_path, monkeypatch):
    trained = []

    def fake_run_sweep(spec, out_dir, backend, **kwargs):
        trained.append((spec.source, out_dir))
        _finish(
            tmp_path,
            "lookup_stop",
            {"data.variant": "noisy", "model.transformer.positional": "none"},
            0,
            _lookup_results(33.0),
        )

    monkeypatch.setattr(recipe.sweep, "run_sweep", fake_run_sweep)
    text = recipe.reproduce(tmp_path, ["lookup_stop"])
    assert [out for _, out in trained] == [tmp_path / "lookup_stop"]
    assert "lookup_transformer_stop" in trained[0][0]
    assert "| none |" in text and "33.0 ± 0.0 (n=1)" in text
    with pytest.raises(ConfigError, match="unknown part 'lookups'"):
        recipe.spec_of("lookups")


def test_status_counts_each_parts_runs_and_writes_nothing(tmp_path, capsys):
    """``attnlab reproduce location_transformer --status``: one line per part asked for, with the
    runs in each state; no report, no file written."""
    from attnlab.cli import main

    _finish(
        tmp_path,
        "scan_simple",
        {"model.transformer.positional": "rope", "model.transformer.cross_attention": "shift"},
        0,
        {"test": {"seq_acc": 99.0}},
    )
    before = sorted(tmp_path.rglob("*"))
    assert (
        main(
            [
                "reproduce",
                "location_transformer",
                "--out",
                str(tmp_path),
                "--status",
                "--parts",
                "scan_simple",
                "lookup",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0] == f"# location_transformer: progress in {tmp_path}"
    assert printed[2].startswith(
        "- scan_simple (`attnlab sweep scan_transformer_simple`): 42 runs: 1 done, 0 training"
    )
    assert (
        printed[3].startswith("- lookup (`attnlab sweep lookup_transformer`): 126 runs: 0 done")
        and len(printed) == 4
    )
    assert sorted(tmp_path.rglob("*")) == before


def test_failure_plots_show_the_first_wrong_example_of_each_cell(scan_files, tmp_path):
    """A trained (tiny) SCAN run in its sweep cell gets its first wrong test example plotted and
    linked; a cell whose examples are all right and one without predictions say so."""
    from attnlab.cli import main

    cell = {"model.transformer.positional": "relative", "model.transformer.cross_attention": "dot"}
    (run,) = [
        run
        for run in sweep.expand(recipe.spec_of("scan_length"))
        if run.seed == 0 and all(run.params[key] == value for key, value in cell.items())
    ]
    run_dir = run.run_dir(tmp_path / "scan_length")
    overrides = {
        "data.split": "files",
        "data.train_file": scan_files["train"],
        "data.test_files": f"{{test: {scan_files['test']}}}",
        "model.transformer.d_model": 16,
        "model.transformer.heads": 2,
        "model.transformer.encoder_layers": 1,
        "model.transformer.decoder_layers": 1,
        "model.transformer.ff_dim": 32,
        "training.epochs": 1,
        "training.batch_size": 32,
        "training.progress": "false",
    }
    args = [f"{key}={value}" for key, value in overrides.items()]
    assert main(["train", "scan_transformer", "--run-dir", str(run_dir), *args]) == 0
    predictions = (run_dir / "eval" / "test.predictions.tsv").read_text().splitlines()
    column = predictions[0].split("\t").index("seq_acc")
    first_wrong = next(i for i, line in enumerate(predictions[1:]) if line.split("\t")[column] == "0")

    all_right = {**cell, "data.split": "addprim_jump"}
    _finish(tmp_path, "scan", all_right, 1, {"test": {"seq_acc": 100.0}})
    (run_all_right,) = [
        run
        for run in sweep.expand(recipe.spec_of("scan"))
        if run.seed == 1 and all(run.params[key] == value for key, value in all_right.items())
    ]
    rows = [line.split("\t") for line in predictions]
    for row in rows[1:]:
        row[column] = "1"
    eval_dir = run_all_right.run_dir(tmp_path / "scan") / "eval"
    (eval_dir / "test.predictions.tsv").write_text("\n".join("\t".join(row) for row in rows) + "\n")
    _finish(
        tmp_path,
        "lookup_stop",
        {"data.variant": "long", "model.transformer.positional": "none"},
        0,
        _lookup_results(50.0),
    )

    text = recipe.report(tmp_path, failure_plots=True)

    failures = text.split("Where each cell goes wrong")[1]
    plotted = next(
        line for line in failures.splitlines() if "| scan_length · relative, dot · seed 0 |" in line
    )
    assert f"| test | #{first_wrong} |" in plotted
    link = plotted.split("](")[1].split(")")[0]
    assert link == f"scan_length/{run.cell}/seed0/plots/attention_test_{first_wrong}.png"
    assert (tmp_path / link).stat().st_size > 1000
    all_right_row = "| scan · addprim_jump, relative, dot · seed 1 |"
    assert "| none wrong |" in next(line for line in failures.splitlines() if all_right_row in line)
    assert "no long5.predictions.tsv" in next(line for line in failures.splitlines() if "lookup_stop" in line)
    assert "Where each cell goes wrong" not in recipe.report(tmp_path)


def _length_results(short, long, examples=3920, longer=3144):
    return {
        "test": {
            "seq_acc": 1.0,
            "examples": examples,
            "long_sentence_examples": longer,
            "seq_acc_short_sentences": short,
            "seq_acc_given_length_short_sentences": 100.0,
            **(
                {}
                if long is None
                else {"seq_acc_long_sentence": long, "seq_acc_given_length_long_sentence": 60.0}
            ),
        }
    }


def test_length_cells_show_exact_match_by_the_longest_sentence(tmp_path):
    cell = {"model.transformer.positional": "rope", "model.transformer.cross_attention": "shift"}
    _finish(tmp_path, "scan_stop", cell, 0, _length_results(50.0, 25.0))
    _finish(tmp_path, "scan_stop", cell, 1, _length_results(25.0, 0.0))
    cutoff = {
        "data.max_train_actions": 24,
        "model.transformer.positional": "relative",
        "model.transformer.cross_attention": "dot",
    }
    _finish(tmp_path, "scan_cutoffs", cutoff, 0, _length_results(50.0, None, examples=3584, longer=0))
    before = {**cutoff, "data.max_train_actions": 26}  # evaluated before the breakdown existed: no row
    _finish(tmp_path, "scan_cutoffs", before, 0, {"test": {"seq_acc": 5.0, "examples": 2624}})
    addjump = {**cell, "data.split": "addprim_jump"}  # not a length split: no row
    _finish(tmp_path, "scan", addjump, 0, {"test": {"seq_acc": 5.0}})
    stop = {"model.transformer.positional": "none", "model.transformer.cross_attention": "dot"}
    _finish(tmp_path, "scan_stop", stop, 2, _length_results(90.0, 10.0))
    _finish(tmp_path, "scan_length", cell, 0, _length_results(0.0, 0.0))
    recurrent = {"data.max_train_actions": 30}
    _finish(
        tmp_path,
        "scan_recurrent_shift_cutoffs",
        recurrent,
        0,
        _length_results(70.0, None, examples=1000, longer=0),
    )

    table = recipe.report(tmp_path).split("sentence longer than any training output")[1]

    assert "| N | commands, every sentence ≤ N | exact match (%), every sentence ≤ N |" in table
    assert "| length given (%), a sentence > N |" in table
    assert (
        "| 22 | 776 | 37.5 ± 17.7 (n=2) | 100.0 ± 0.0 (n=2) | 3,144 | 12.5 ± 17.7 (n=2) | 60.0 ± 0.0 (n=2) |"
        in table
    )
    assert "| 24 | 3,584 | 50.0 ± 0.0 (n=1) | 100.0 ± 0.0 (n=1) | 0 |  |  |" in table
    assert "| scan_stop · none, dot |" in table
    assert "| scan_stop · rope, shift |" in table and "| scan_cutoffs · 24, relative, dot |" in table
    assert "| scan_length · rope, shift | 22 | 776 | 0.0 ± 0.0 (n=1) |" in table
    assert "| scan_recurrent_shift_cutoffs · 30 | 30 | 1,000 | 70.0 ± 0.0 (n=1) |" in table
    assert "| 22 | 776 | 90.0 ± 0.0 (n=1) | 100.0 ± 0.0 (n=1) | 3,144 | 10.0 ± 0.0 (n=1) |" in table
    assert "scan_cutoffs · 26," not in table and "addprim_jump" not in table


def _stage(out, name, seed, epochs, seq_acc, given, folder="."):
    """Write what ``scripts/epoch_budget.sh`` keeps of a run's evaluation after ``epochs`` (``folder``
    ``trained``: of a weight-averaging run's trained weights)."""
    stage = out / recipe.BUDGET_RUNS / name / f"seed{seed}" / "eval_at" / f"epoch{epochs}" / folder
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "test.json").write_text(json.dumps({"seq_acc": seq_acc, "seq_acc_given_length": given}))


def test_runs_trained_in_budget_stages_get_a_row_and_a_column_per_budget(tmp_path):
    scan_cell = {"model.transformer.positional": "relative", "model.transformer.cross_attention": "dot"}
    _finish(tmp_path, "scan_length", scan_cell, 0, {"test": {"seq_acc": 12.5, "seq_acc_given_length": 60.0}})
    assert recipe.budget_table(tmp_path) == recipe.NO_RUNS
    _stage(tmp_path, "universal", 0, 50, 0.0, 38.04)
    _stage(tmp_path, "universal", 0, 200, 78.54, 93.79)
    _stage(tmp_path, "layered", 1, 100, 15.0, 38.9)
    _stage(tmp_path, "averaged", 0, 50, 27.7, 85.4)  # training.ema_decay: the average ...
    _stage(tmp_path, "averaged", 0, 50, 72.6, 94.7, folder="trained")  # ... and the trained weights
    metrics = tmp_path / recipe.BUDGET_RUNS / "universal" / "seed0" / "metrics.jsonl"
    records = (json.dumps({"epoch": epoch, "seconds": 45.0}) for epoch in range(1, 206))
    metrics.write_text("".join(record + "\n" for record in records))

    text = recipe.report(tmp_path)

    section = text.split("trained in budget stages")[1].split("###")[0]
    lines = [line.strip("|") for line in section.splitlines() if "|" in line]
    cells = [[cell.strip() for cell in line.split("|")] for line in lines]
    assert cells[0] == ["", "epochs trained", "50 epochs", "100 epochs", "200 epochs"]
    assert cells[2:] == [
        ["averaged · seed0 · average", "0", "27.7 (85.4)", "", ""],
        ["averaged · seed0 · trained", "0", "72.6 (94.7)", "", ""],
        ["layered · seed1", "0", "", "15.0 (38.9)", ""],
        ["universal · seed0", "205", "0.0 (38.0)", "", "78.5 (93.8)"],
    ]


def test_a_budget_run_with_several_seeds_gets_their_mean_and_std_where_two_reached_a_budget(tmp_path):
    _stage(tmp_path, "universal", 0, 50, 80.0, 97.0)
    _stage(tmp_path, "universal", 0, 100, 90.0, 99.0)
    _stage(tmp_path, "universal", 0, 200, 95.0, 100.0)
    _stage(tmp_path, "universal", 1, 50, 10.0, 11.0)  # seed 1's first run, replaced by its rerun
    _stage(tmp_path, "universal", 1, 200, 70.0, 98.0)  # ... where the rerun has not been
    _stage(tmp_path, "universal", "1_rerun", 50, 60.0, 95.0)
    _stage(tmp_path, "universal", 2, 50, 70.0, 96.0)
    _stage(tmp_path, "averaged", 0, 50, 27.7, 85.4)
    _stage(tmp_path, "averaged", 0, 50, 72.6, 94.7, folder="trained")
    _stage(tmp_path, "averaged", 1, 50, 37.7, 95.4)
    _stage(tmp_path, "averaged", 1, 50, 62.6, 84.7, folder="trained")

    section = recipe.budget_table(tmp_path)
    cells = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[3:-1]]
        for line in section.splitlines()[2:]
    }
    assert cells["universal · mean ± std"] == [
        "70.0 ± 10.0 (96.0 ± 1.0), 3 seeds",  # seeds 0, 1 (the rerun) and 2
        "",  # one seed reached 100 epochs
        "82.5 ± 17.7 (99.0 ± 1.4), 2 seeds",  # seed 0 and seed 1's first run
    ]
    assert cells["averaged · mean ± std · average"] == ["32.7 ± 7.1 (90.4 ± 7.1), 2 seeds", "", ""]
    assert cells["averaged · mean ± std · trained"] == ["67.6 ± 7.1 (89.7 ± 7.1), 2 seeds", "", ""]
    assert list(cells).index("universal · mean ± std") == list(cells).index("universal · seed2") + 1


def test_a_budget_stage_record_that_is_not_an_evaluation_is_a_clear_error(tmp_path):
    _stage(tmp_path, "universal", 0, 50, 0.0, 38.0)
    record = tmp_path / recipe.BUDGET_RUNS / "universal" / "seed0" / "eval_at" / "epoch50" / "test.json"
    record.write_text('{"seq_acc": 1.0}')
    with pytest.raises(ConfigError, match=r"epoch50/test.json: expected an evaluation record"):
        recipe.budget_table(tmp_path)


def test_the_report_counts_how_each_parts_runs_ended_and_names_the_unconverged(tmp_path):
    """A scan_simple run that the cap ended with its lowest validation loss within its patience is
    named; one that patience ended is counted, not named; a run without a readable config is unread."""
    simple = {"model.transformer.positional": "rope", "model.transformer.cross_attention": "shift"}
    losses = {0: [3.0, 2.0, 1.0], 1: [1.0] + [2.0] * 10, 2: None}
    for seed, history in losses.items():
        _finish(tmp_path, "scan_simple", simple, seed, {"test": {"seq_acc": 99.0}})
        if history is None:
            continue
        (run,) = [
            run
            for run in sweep.expand(recipe.spec_of("scan_simple"))
            if run.seed == seed and all(run.params[key] == value for key, value in simple.items())
        ]
        run_dir = run.run_dir(tmp_path / "scan_simple")
        config = {**run.config, "training": {**run.config["training"], "epochs": len(history)}}
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"epoch": i + 1, "valid/loss": loss}) + "\n" for i, loss in enumerate(history))
        )
    table = recipe.training_end_table(recipe.collect(tmp_path))
    assert "| scan_simple | 3 | 0 | 1 | 1 | 1 | 0 | 1 |" in table
    cell = "model.transformer.positional=rope,model.transformer.cross_attention=shift"
    assert f"- scan_simple: {cell}/seed0 (epoch cap 3, best epoch 3)" in table
    assert "seed1" not in table
