from dataclasses import dataclass, field
from typing import Literal

import pytest

from attnlab.config import ConfigError, apply_overrides, from_dict, load_yaml


@dataclass
class Inner:
    rate: float = 0.1
    name: Literal["a", "b"] = "a"


@dataclass
class Outer:
    epochs: int = 3
    path: str | None = None
    options: dict[str, int] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_defaults_and_nested_values():
    config = from_dict(Outer, {"epochs": 5, "inner": {"rate": 1}})
    assert config == Outer(epochs=5, inner=Inner(rate=1.0))
    assert isinstance(config.inner.rate, float)


def test_unknown_key_names_it_and_lists_valid_keys():
    with pytest.raises(ConfigError) as error:
        from_dict(Outer, {"inner": {"rte": 0.2}})
    message = str(error.value)
    assert "config.inner" in message and "'rte'" in message and "'rate'" in message


def test_wrong_type_names_key_and_expected_type():
    with pytest.raises(ConfigError, match=r"config\.epochs: expected int, got 'many'"):
        from_dict(Outer, {"epochs": "many"})
    with pytest.raises(ConfigError, match=r"config\.inner\.name: expected one of \['a', 'b'\]"):
        from_dict(Outer, {"inner": {"name": "c"}})


def test_overrides_parse_yaml_values_and_create_sections():
    data = apply_overrides({"epochs": 3}, ["epochs=7", "inner.rate=1e-3", "path=null", "options={x: 1}"])
    config = from_dict(Outer, data)
    assert config.epochs == 7 and config.inner.rate == pytest.approx(1e-3)
    assert config.path is None and config.options == {"x": 1}


def test_override_without_equals_is_an_error():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["epochs"])


def test_load_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n- not a mapping\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_yaml(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")


def test_a_key_given_twice_in_one_mapping_is_an_error_naming_its_line(tmp_path):
    repeated = tmp_path / "repeated.yaml"
    repeated.write_text("training:\n  epochs: 1\n  batch_size: 8\n  epochs: 2\n")
    with pytest.raises(ConfigError, match=r"repeated.yaml line 4 column 3: .*key 'epochs' is given twice"):
        load_yaml(repeated)
    merged = tmp_path / "merged.yaml"  # a merge key's values may be overridden: not a repetition
    merged.write_text("base: &base {epochs: 1, batch_size: 8}\ntraining:\n  <<: *base\n  epochs: 2\n")
    assert load_yaml(merged)["training"] == {"epochs": 2, "batch_size": 8}
    same_key_apart = tmp_path / "apart.yaml"
    same_key_apart.write_text("training: {epochs: 1}\nevaluation: {epochs: 1}\n")
    assert load_yaml(same_key_apart) == {"training": {"epochs": 1}, "evaluation": {"epochs": 1}}


def test_every_builtin_config_parses_with_its_experiment():
    from attnlab.experiments.registry import builtin_configs, experiment_for, resolve_config

    configs = builtin_configs()
    assert {"lookup", "demo", "memory_addition", "memory_temporal_order", "scan", "lm_wikitext2"} <= set(
        configs
    )
    for name in configs:
        data = resolve_config(name, [])
        experiment_for(data).parse_config(data, name)
