"""attnlab.checks: one choice check for every module, and a "did you mean" for near misses, which the
config loader, the registries and the command line append to their lists of what is valid."""

import re

import pytest

from attnlab.attention.registry import build_attender
from attnlab.checks import check_choice, closest_choice, did_you_mean, did_you_mean_each
from attnlab.config import ConfigError, from_dict
from attnlab.models.transformer import TransformerSeq2Seq
from attnlab.tasks.scan import generate_standard_split
from attnlab.training.trainer import TrainingConfig

SCHEMES = ("sinusoidal", "learned", "relative", "transformer_xl", "rope", "alibi", "none")


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("rop", "rope"),  # a letter left out
        ("reltaive", "relative"),  # two swapped
        ("Sinusoidal", "sinusoidal"),  # another case
        ("ALIBI", "alibi"),  # another case, short name
        ("transformer-xl", "transformer_xl"),  # a hyphen for the underscore
        ("xyz", None),  # nothing near
        ("position", None),  # a different word, however alike (0.67 to "positional" or "relative")
        ("", None),
        (3, None),  # not a string
    ],
)
def test_the_closest_choice_is_a_near_miss_or_none(typed, meant):
    assert closest_choice(typed, SCHEMES) == meant
    assert did_you_mean(typed, SCHEMES) == ("" if meant is None else f"; did you mean {meant!r}?")


def test_another_word_sharing_a_suffix_is_no_near_miss():
    assert closest_choice("layers", ["stop_layers", "heads"]) is None  # ratio 0.71
    assert closest_choice("given_length", ["max_length"]) is None  # 0.64
    assert closest_choice("hed", ["heads"]) == "heads"  # 0.75, the least a near miss has


def test_several_unknown_values_each_get_their_hint():
    keys = ["positional", "heads", "dropout"]
    assert did_you_mean_each(["positonal", "hed", "qqq"], keys) == (
        "; did you mean 'positional' for 'positonal', 'heads' for 'hed'?"
    )
    assert did_you_mean_each(["positonal"], keys) == "; did you mean 'positional'?"
    assert did_you_mean_each(["qqq", "zzz"], keys) == ""


def test_check_choice_lists_the_choices_in_their_order_and_names_the_owner():
    check_choice("positional", "rope", SCHEMES)  # a valid choice passes
    expected = f"Owner: positional must be one of {list(SCHEMES)}, got 'rop'; did you mean 'rope'?"
    with pytest.raises(ValueError, match=re.escape(expected)):
        check_choice("positional", "rop", SCHEMES, owner="Owner")
    with pytest.raises(ValueError, match=re.escape("got 'zzz'") + "$"):
        check_choice("positional", "zzz", SCHEMES)
    with pytest.raises(ValueError, match="must be one of \\['a', 'b'\\], got 1$"):
        check_choice("letter", 1, {"a": 1, "b": 2})  # a mapping's keys are its choices


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: TransformerSeq2Seq(10, 10, positional="rop"), "positional must be one of"),
        (lambda: TransformerSeq2Seq(10, 10, norm="Pre"), "norm must be one of"),
        (lambda: build_attender("shift", 4, 4, choice="sofmax"), "ShiftAttender: choice must be one of"),
        (lambda: build_attender("locaton", 4, 4), "unknown attender 'locaton'"),
        (lambda: build_attender("shift", 4, 4, choises="softmax"), "unknown option(s) ['choises']"),
        (lambda: TrainingConfig(precision="bf61"), "precision must be one of"),
        (lambda: generate_standard_split("lenght"), "unknown SCAN split 'lenght'"),
    ],
)
def test_modules_name_a_near_miss(build, expected):
    with pytest.raises(ValueError, match=re.escape(expected) + ".*; did you mean '[a-z_0-9]+'\\?$"):
        build()


def test_a_config_key_or_value_that_is_a_typo_gets_a_hint():
    one = re.escape("unknown key(s) ['pacience']") + ".*; did you mean 'patience'\\?$"
    with pytest.raises(ConfigError, match=one):
        from_dict(TrainingConfig, {"pacience": 3})
    two = re.escape("; did you mean 'epochs' for 'epoch', 'patience' for 'pacience'?")
    with pytest.raises(ConfigError, match=two):
        from_dict(TrainingConfig, {"pacience": 3, "epoch": 2})
