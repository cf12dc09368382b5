"""How the outputs of a predictions file are wrong (:func:`read_prediction_errors`), the errors file
evaluation writes beside it (:func:`read_test_set_errors`), and the issue-28 recipe's table of it over
each cell's seeds."""

import json

import pytest

from attnlab.evaluation.seq2seq import ExampleOutcomes
from attnlab.experiments import sweep
from attnlab.experiments.location_transformer import recipe
from attnlab.experiments.unit_scores import (
    error_test_sets,
    read_prediction_errors,
    read_prediction_pairs,
    read_predictions,
    read_test_set_errors,
    write_predictions,
)
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import TARGET_SPECIALS, Vocabulary

HEADER = "example\tsource\ttarget\tprediction\tseq_acc\tseq_acc_be\n"


def _predictions(pairs: list[tuple[str, str]]) -> str:
    rows = [
        f"{i}\tx y\t{target}\t{prediction}\t{int(target == prediction)}\t1\n"
        for i, (target, prediction) in enumerate(pairs)
    ]
    return HEADER + "".join(rows)


def test_a_predictions_file_counts_each_kind_of_wrong_output(tmp_path):
    path = tmp_path / "long5.predictions.tsv"
    path.write_text(
        _predictions(
            [
                ("a b c", "a b c"),
                ("a b c", "a b"),
                ("a b", "a b a"),
                ("a b", "b a"),
                ("a b", "a c d"),
                ("a", "a"),
                ("a b a b", "a c a d"),  # wrong only where the target has b
                ("a b c b", "a c"),  # the target without b
            ]
        )
    )
    assert read_prediction_errors(path) == {
        "examples": 8,
        "wrong": 6,
        "stops early": 1,
        "stops late": 1,
        "wrong words, right length": 2,
        "wrong words, other length": 2,
        "one target word wrong": 1,
        "one target word left out": 1,
    }


def test_ignored_tokens_are_left_out_when_wrong_outputs_are_counted(tmp_path):
    """SCAN's output markers: the predictions file shows them, the kinds of error do not count them."""
    target = Vocabulary(["<pad>", "<sos>", "<eos>", "a", "b", "<rep>"], TARGET_SPECIALS)
    outcomes = ExampleOutcomes(
        predictions=[target.encode(["a", "a"]), target.encode(["a", "<rep>"]), target.encode(["a", "b"])],
        correct={"seq_acc": [True, False, False]},
    )
    references = ["a <rep> a", "a <rep> a", "a <rep> a"]
    path = tmp_path / "test.predictions.tsv"
    write_predictions(path, ["x"] * 3, references, outcomes, target, ignored_tokens=["<rep>"])
    assert read_predictions(path)[0] == ("x", "a <rep> a", "a a")
    errors = json.loads((tmp_path / "test.errors.json").read_text())
    assert errors["wrong"] == 2 and errors["stops early"] == 1 and errors["wrong words, right length"] == 1
    write_predictions(path, ["x"] * 3, references, outcomes, target)
    assert json.loads((tmp_path / "test.errors.json").read_text())["wrong"] == 3


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("example\tsource\ttarget\n0\tx\ta\n", 1, "expected a header starting"),
        (HEADER + "0\tx y\ta b\ta b\t1\t1\n1\tx\ta\n", 3, "expected 6 tab-separated fields"),
    ],
)
@pytest.mark.parametrize("reader", [read_prediction_errors, read_prediction_pairs, read_predictions])
def test_a_malformed_predictions_file_is_an_error_naming_the_line(tmp_path, text, line, message, reader):
    path = tmp_path / "test.predictions.tsv"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message) as error:
        reader(path)
    assert str(error.value).startswith(f"{path} line {line}: ")


def test_the_source_target_and_prediction_of_a_predictions_files_first_rows(tmp_path):
    path = tmp_path / "long5.predictions.tsv"
    path.write_text(HEADER + "0\tx y\ta b\ta\t0\t1\n1\tz\tc\tc\t1\t1\n2\tw\td\td\t1\t1\n")
    assert read_prediction_pairs(path) == [("x y", "a b"), ("z", "c"), ("w", "d")]
    assert read_prediction_pairs(path, 2) == [("x y", "a b"), ("z", "c")]
    assert read_predictions(path, 2) == [("x y", "a b", "a"), ("z", "c", "c")]


def test_a_test_sets_errors_come_from_its_errors_file_else_its_predictions(tmp_path):
    (tmp_path / "long1.predictions.tsv").write_text(_predictions([("a b", "a")]))
    (tmp_path / "long5.predictions.tsv").write_text(_predictions([("a b", "a b")]))
    (tmp_path / "long4.predictions.tsv").write_text(_predictions([("a b", "a c")]))
    before_words = {"examples": 7, "wrong": 2, "stops early": 0, "stops late": 2}
    before_words |= {"wrong words, right length": 0, "wrong words, other length": 0}
    counts = before_words | {"one target word wrong": 0, "one target word left out": 0}
    (tmp_path / "long5.errors.json").write_text(json.dumps(counts))
    (tmp_path / "long2.errors.json").write_text(json.dumps(before_words))
    (tmp_path / "long4.errors.json").write_text(json.dumps(before_words))
    assert error_test_sets(tmp_path) == ["long1", "long2", "long4", "long5"]
    assert read_test_set_errors(tmp_path, "long5") == counts  # the file, not the predictions' one example
    # a file from before the one-word counts: as it is without predictions, else the predictions' counts
    assert read_test_set_errors(tmp_path, "long2") == before_words
    recounted = read_prediction_errors(tmp_path / "long4.predictions.tsv")
    assert read_test_set_errors(tmp_path, "long4") == recounted and recounted["one target word wrong"] == 1
    counted = read_prediction_errors(tmp_path / "long1.predictions.tsv")
    assert read_test_set_errors(tmp_path, "long1") == counted
    assert read_test_set_errors(tmp_path, "long1")["stops early"] == 1
    assert read_test_set_errors(tmp_path, "long3") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"examples": 1}', "expected an object of counts"),
        ('["examples"]', "expected an object of counts"),
        (
            json.dumps(
                dict.fromkeys(
                    [
                        "examples",
                        "wrong",
                        "stops early",
                        "stops late",
                        "wrong words, right length",
                        "wrong words, other length",
                    ],
                    1.5,
                )
            ),
            "integers",
        ),
    ],
)
def test_a_malformed_errors_file_is_an_error_naming_it(tmp_path, text, message):
    path = tmp_path / "long5.errors.json"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message) as error:
        read_test_set_errors(tmp_path, "long5")
    assert str(error.value).startswith(str(path))


@pytest.mark.parametrize("kept", ["predictions", "errors", "errors before words"])
def test_the_recipe_reports_how_each_cells_outputs_are_wrong_summed_over_seeds(tmp_path, kept):
    """From each run's predictions file, or from its errors file alone (an archived run), which
    lacks the one-word counts if written before them."""
    cell = {"data.variant": "noisy", "model.transformer.positional": "rope"}
    predictions = {
        0: [("a b c", "a b"), ("a b", "a b")],  # one early stop
        1: [("a b c", "a b c d"), ("a b", "a c")],  # one late stop, one wrong word
    }
    for seed, pairs in predictions.items():
        (run,) = [
            run
            for run in sweep.expand(recipe.spec_of("lookup_stop"))
            if run.seed == seed and all(run.params[key] == value for key, value in cell.items())
        ]
        eval_dir = run.run_dir(tmp_path / "lookup_stop") / "eval"
        eval_dir.mkdir(parents=True)
        (eval_dir / "summary.json").write_text(json.dumps({"long5": {"seq_acc": 50.0}}))
        predictions_file = eval_dir / "long5.predictions.tsv"
        predictions_file.write_text(_predictions(pairs))
        if kept != "predictions":
            counts = read_prediction_errors(predictions_file)
            if kept == "errors before words":
                del counts["one target word wrong"], counts["one target word left out"]
            (eval_dir / "long5.errors.json").write_text(json.dumps(counts))
            predictions_file.unlink()

    text = recipe.report(tmp_path)

    errors = text.split("How the wrong outputs are wrong")[1].split("###")[0]
    assert (
        "| wrong | stops early | stops late | wrong words, right length | wrong words, other length "
        "| one target word wrong | one target word left out |" in errors
    )
    row = next(line for line in errors.splitlines() if "| lookup_stop · noisy, rope |" in line)
    words = "| – | – |" if kept == "errors before words" else "| 1 | 0 |"  # "a c" for "a b": b's place
    assert row.endswith("| long5 | 2 | 3 / 4 | 1 | 1 | 1 | 0 " + words)

    # a seed archived before evaluation wrote errors files is finished, and not counted: the row says so
    seed0 = (
        tmp_path / "lookup_stop" / "data.variant=noisy,model.transformer.positional=rope" / "seed0" / "eval"
    )
    for path in seed0.glob("long5.*"):
        path.unlink()
    errors = recipe.report(tmp_path).split("How the wrong outputs are wrong")[1].split("###")[0]
    row = next(line for line in errors.splitlines() if "| lookup_stop · noisy, rope |" in line)
    assert row.endswith("| long5 | 1 of 2 | 2 / 2 | 0 | 1 | 1 | 0 " + words)


def test_failure_plots_go_to_the_first_seed_with_a_wrong_example(tmp_path):
    """A cell right everywhere at seed 0 and wrong at seed 1 is plotted at seed 1 (here it has no
    checkpoint to plot, which its row says)."""
    cell = {"data.variant": "noisy", "model.transformer.positional": "relative"}
    right = [("a b", "a b")] * 10  # at least the 10 examples a predictions file must have
    predictions = {0: [*right, ("a b c", "a b c")], 1: [*right, ("a b c", "a b")]}
    for seed, pairs in predictions.items():
        (run,) = [
            run
            for run in sweep.expand(recipe.spec_of("lookup_stop"))
            if run.seed == seed and all(run.params[key] == value for key, value in cell.items())
        ]
        run_dir = run.run_dir(tmp_path / "lookup_stop")
        (run_dir / "eval").mkdir(parents=True)
        (run_dir / "eval" / "summary.json").write_text(json.dumps({"long5": {"seq_acc": 100.0 - 50 * seed}}))
        (run_dir / "eval" / "long5.predictions.tsv").write_text(_predictions(pairs))
        (run_dir / "config.yaml").write_text(json.dumps(run.config))  # YAML reads JSON

    failures = recipe.report(tmp_path, failure_plots=True).split("Where each cell goes wrong")[1]
    row = next(line for line in failures.splitlines() if "lookup_stop · noisy, relative" in line)
    assert "| lookup_stop · noisy, relative · seed 1 | long5 | #10 | no best.pt to plot |" in row
