"""``attnlab compare``'s errors when a run has no per-unit scores for the test set asked for."""

import pytest

from attnlab.config import ConfigError
from attnlab.experiments.compare import read_units


def test_a_missing_test_set_names_those_the_run_has_scores_for(tmp_path):
    run = tmp_path / "lookup_run"
    (run / "eval" / "files").mkdir(parents=True)
    for name in ("long1.predictions.tsv", "interpolation.predictions.tsv", "files/mine.predictions.tsv"):
        (run / "eval" / name).write_text("example\tsource\ttarget\tprediction\tseq_acc\n")
    (run / "eval" / "long1.json").write_text("{}")  # metrics alone are no per-unit scores
    with pytest.raises(
        ConfigError, match=r"has them for interpolation, long1, mine: name one with --test-set"
    ):
        read_units(run, "test", None, None)


def test_a_run_without_per_unit_scores_is_told_to_be_evaluated(tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    with pytest.raises(ConfigError, match=rf"`attnlab evaluate {run}` writes them"):
        read_units(run, "test", None, None)
