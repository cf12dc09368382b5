"""The one metric vocabulary (:mod:`attnlab.metric_names`) and its mapping of the legacy names."""

import pytest

from attnlab import metric_names as names


@pytest.mark.parametrize(
    ("legacy", "current"),
    [
        ("train_loss", "train/loss"),
        ("validation_loss", "valid/loss"),
        ("validation_seq_acc", "valid/seq_acc"),
        ("validation_attn_loss", "valid/attn_loss"),
        ("validation_accuracy", "valid/accuracy"),
        ("validation_perplexity", "valid/perplexity"),
    ],
)
def test_every_legacy_name_maps_to_one_current_name(legacy, current):
    assert names.legacy_name(legacy) and not names.legacy_name(current)
    assert names.current_name(legacy) == current
    assert names.current_name(current) == current  # current names (and a second mapping) stay


@pytest.mark.parametrize("key", ["epoch", "seconds", "validation_", "train/loss", "valid/seq_acc", "loss"])
def test_other_keys_are_left_alone(key):
    assert names.current_name(key) == key


def test_a_record_keeps_its_order_and_values():
    record = {"epoch": 3, "train_loss": 0.5, "validation_loss": 0.25, "validation_seq_acc": 97.0}
    record["seconds"] = 1.5
    assert list(names.current_record(record).items()) == [
        ("epoch", 3),
        ("train/loss", 0.5),
        ("valid/loss", 0.25),
        ("valid/seq_acc", 97.0),
        ("seconds", 1.5),
    ]
    assert names.current_history([record, record]) == [names.current_record(record)] * 2


def test_full_names_are_built_and_read_back():
    assert names.valid_name("seq_acc") == "valid/seq_acc" and names.TRAIN_LOSS == "train/loss"
    assert names.eval_name("long3", "seq_acc") == "test/long3/seq_acc"
    assert names.split_eval_name("test/long3/seq_acc") == ("long3", "seq_acc")
    for other in ("test/long3", "valid/seq_acc", "test//seq_acc", "test/a/b/c"):
        assert names.split_eval_name(other) is None
    assert names.validation_metric("valid/perplexity") == "perplexity"
    assert names.validation_metric("train/loss") is None and names.validation_metric("valid/") is None


def test_the_table_holds_the_papers_labels_percentages_and_counts():
    assert names.metric_label("seq_acc") == "seqAcc" and names.metric_label("attn_loss") == "attnLoss"
    assert names.metric_label("something_new") == "something_new"
    assert names.PERCENT_METRICS == {
        "seq_acc",
        "seq_acc_be",
        "seq_acc_given_length",
        "seq_acc_short_sentences",
        "seq_acc_long_sentence",
        "seq_acc_given_length_short_sentences",
        "seq_acc_given_length_long_sentence",
    }
    counts = {"examples", "tokens", "questions", "unknown_source_words", "long_sentence_examples"}
    assert counts <= names.COUNT_METRICS
    assert all(metric.name == key for key, metric in names.METRICS.items())


def test_stop_targets_name_validation_metrics():
    assert names.stop_target("valid/seq_acc") == "valid/seq_acc"
    assert names.stop_target("validation_accuracy") == "valid/accuracy"
    for bad in ("accuracy", "train/loss", "train_loss", "test/test/seq_acc"):
        with pytest.raises(ValueError, match="is not a validation metric"):
            names.stop_target(bad)
