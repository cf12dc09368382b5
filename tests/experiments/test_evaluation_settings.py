"""Evaluation settings that cannot work are config errors naming the key, in every experiment."""

import pytest

from attnlab.config import ConfigError
from attnlab.experiments.registry import experiment_for, resolve_config


def _parse(config: str, overrides: list[str]):
    data = resolve_config(config, overrides)
    return experiment_for(data).parse_config(data)


@pytest.mark.parametrize(
    ("config", "override", "message"),
    [
        # a budget of 0 used to mean the default budget (2 x source + 10), silently
        ("lookup", "evaluation.max_length=0", r"config\.evaluation: max_length must be >= 1 or null"),
        ("lookup", "evaluation.max_length=-3", r"config\.evaluation: max_length must be >= 1 or null"),
        ("lookup", "evaluation.batch_size=0", r"config\.evaluation: batch_size must be >= 1"),
        ("scan", "evaluation.max_length=0", r"config\.evaluation: batch_size and max_length must be >= 1"),
        ("lm_ptb", "evaluation.batch_size=0", r"config\.evaluation: batch_size must be >= 1"),
        ("memory_addition", "data.eval_batch_size=0", r"config\.data: eval_batch_size must be >= 1"),
    ],
)
def test_an_evaluation_setting_that_cannot_work_is_refused(config, override, message):
    with pytest.raises(ConfigError, match=message):
        _parse(config, [override])


@pytest.mark.parametrize(
    ("config", "override", "key", "value"),
    [
        ("lookup", "evaluation.max_length=1", "max_length", 1),
        ("lookup", "evaluation.max_length=null", "max_length", None),
        ("lm_ptb", "evaluation.batch_size=1", "batch_size", 1),
    ],
)
def test_the_smallest_working_settings_are_accepted(config, override, key, value):
    assert getattr(_parse(config, [override]).evaluation, key) == value
