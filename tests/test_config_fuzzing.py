"""Property-based tests (hypothesis) of YAML configs and ``key=value`` overrides: a valid config
round-trips through its file and through overrides; any file or override is either read or a
:class:`ConfigError` that names the file (and the line, for text that is not UTF-8 or not YAML),
never another exception."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from attnlab.config import ConfigError, apply_overrides, from_dict, load_yaml, save_yaml, to_dict
from attnlab.experiments.registry import EXPERIMENTS, experiment_for


@dataclass
class Optimizer:
    rate: float = 0.1
    kind: Literal["adam", "sgd"] = "adam"
    schedule: list[int] = field(default_factory=list)


@dataclass
class Schema:
    epochs: int = 3
    name: str = "run"
    path: str | None = None
    scale: float | None = None
    options: dict[str, int] = field(default_factory=dict)
    optimizer: Optimizer = field(default_factory=Optimizer)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
FLOATS = st.floats(allow_nan=False, width=64)
OPTIMIZERS = st.builds(
    Optimizer,
    rate=FLOATS,
    kind=st.sampled_from(["adam", "sgd"]),
    schedule=st.lists(st.integers(), max_size=3),
)
SCHEMAS = st.builds(
    Schema,
    epochs=st.integers(),
    name=TEXT,
    path=st.none() | TEXT,
    scale=st.none() | FLOATS,
    options=st.dictionaries(TEXT, st.integers(), max_size=3),
    optimizer=OPTIMIZERS,
)


@given(config=SCHEMAS)
def test_a_config_round_trips_through_its_yaml_file(tmp_path: Path, config: Schema) -> None:
    path = tmp_path / "config.yaml"
    save_yaml(to_dict(config), path)
    assert from_dict(Schema, load_yaml(path), str(path)) == config


@given(config=SCHEMAS)
def test_a_config_round_trips_through_overrides(config: Schema) -> None:
    """Every leaf given as ``dotted.key=<YAML>`` over an empty file gives the config."""
    overrides = []
    for key, value in to_dict(config).items():
        if isinstance(value, dict) and key == "optimizer":
            overrides += [f"optimizer.{inner}={_yaml_value(item)}" for inner, item in value.items()]
        else:
            overrides.append(f"{key}={_yaml_value(value)}")
    assert from_dict(Schema, apply_overrides({}, overrides)) == config


def _yaml_value(value: object) -> str:
    """``value`` as one line of YAML, as a user would type it after ``key=``."""
    return yaml.safe_dump(value, default_flow_style=True, width=2**31).removesuffix("\n...\n").strip()


def _assert_names_file(error: ConfigError, path: Path, line: int | None = None) -> None:
    message = str(error)
    assert message.startswith(str(path)) or f"config file {path}" in message, message
    assert "\n" not in message.strip(), message  # one line
    if line is not None:
        assert re.search(rf"\bline {line}\b", message), message


YAML_SOUP = st.lists(
    st.sampled_from(
        [
            "epochs",
            "optimizer",
            "rate",
            "kind",
            ":",
            ": ",
            " ",
            "  ",
            "\n",
            "\r\n",
            "\t",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ",",
            "1",
            "-3",
            "0.5",
            "1e-3",
            "null",
            "adam",
            "'",
            '"',
            "&a ",
            "*a",
            "!!python/name:os ",
            "!!binary ",
            "? ",
            "%YAML 1.1\n",
            "---\n",
            "...\n",
            "9" * 4400,
            "\x00",
            "\ufeff",
            "é",
        ]
    ),
    max_size=30,
).map("".join)


@given(text=YAML_SOUP | TEXT)
def test_any_yaml_text_is_a_config_or_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        data = load_yaml(path)
    except ConfigError as error:
        _assert_names_file(error, path)
        return
    assert isinstance(data, dict)
    try:
        from_dict(Schema, data, str(path))
    except ConfigError as error:
        _assert_names_file(error, path)


@given(
    data=st.binary(max_size=200), bad=st.sampled_from([b"\xff", b"\xc3(", b"\x80"]), lines=st.integers(0, 5)
)
def test_bytes_that_are_not_utf8_are_a_config_error_naming_file_and_line(
    tmp_path: Path, data: bytes, bad: bytes, lines: int
) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"epochs: 1\n" * lines + b"name: " + bad + b"\n" + data)
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    _assert_names_file(info.value, path, lines + 1)


@given(
    lines=st.integers(0, 5),
    broken=st.sampled_from(["name: [a, b\n", "a: b: c\n", "- x\ny: 1\n", "\tname: x\n"]),
)
def test_text_that_is_not_yaml_is_a_config_error_naming_file_and_line(
    tmp_path: Path, lines: int, broken: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("epochs: 1\n" * lines + broken)
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert re.search(r"\bline \d+\b", str(info.value))
    _assert_names_file(info.value, path)


@given(overrides=st.lists(YAML_SOUP.filter(lambda text: "=" in text) | TEXT, max_size=4))
def test_any_override_is_applied_or_a_config_error(overrides: list[str]) -> None:
    try:
        from_dict(Schema, apply_overrides({"optimizer": {"rate": 0.5}}, overrides))
    except ConfigError:
        pass


@given(
    experiment=st.sampled_from(sorted(EXPERIMENTS)),
    overrides=st.lists(
        st.tuples(
            st.sampled_from(["training.epochs", "training.seed", "data.seed", "model", "training", "x.y"]),
            st.sampled_from(["1", "-2", "1e-3", "null", "[1, 2]", "{a: 1}", "yes", "'7'", "", "9" * 4400]),
        ).map("=".join),
        max_size=3,
    ),
)
def test_real_experiment_configs_take_overrides_or_raise_a_config_error(experiment: str, overrides) -> None:
    module = experiment_for({"experiment": experiment})
    try:
        module.parse_config(apply_overrides({"experiment": experiment}, overrides), "config.yaml")
    except ConfigError as error:  # names the file or the override
        assert str(error).startswith(("config.yaml", "override ")), str(error)


def test_mapping_keys_that_are_not_strings_are_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("epochs: 2\n1: one\nnull: nothing\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\)"):
        from_dict(Schema, load_yaml(path), str(path))


def test_yaml_tags_that_build_python_objects_are_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("epochs: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(path)
