"""Typed configs: dataclasses loaded from YAML and overridden by ``key=value`` strings.

Every component has a dataclass of its own; an experiment config nests them. Loading is strict:
an unknown key is an error that names the key, where it was found and the valid keys; a value of
the wrong type is an error that names the key and the expected type.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml

from attnlab.checks import closest_choice, did_you_mean, suggestion_hint

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override does not match the config's schema."""


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; every error is one line naming the file (and the line, where the text
    is not UTF-8 or not YAML)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            f"{path} line {line}: not valid UTF-8 ({error.reason}); a config is UTF-8 YAML"
        ) from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as error:
        raise ConfigError(
            f"{path}{_yaml_error_place(error)}: not valid YAML: {_yaml_problem(error)}"
        ) from None
    except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(loaded).__name__}")
    return loaded


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader, parsing with libyaml where PyYAML was built with it: a run's ``config.yaml``
in 3.6 ms instead of the pure-Python parser's 77 (one thread), which reports pay for every run."""


class _UniqueKeyLoader(_SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (where it keeps the last
    silently: ``epochs: 1`` then ``epochs: 2`` trained 2 epochs without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:  # before merge keys (<<) are flattened: those may be overridden
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the safe loader's own error follows
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    problem=f"the key {key!r} is given twice in one mapping; give it once",
                    problem_mark=key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_error_place(error: yaml.YAMLError) -> str:
    """`` line L column C`` of a YAML error (1-based), or nothing when PyYAML gives no position."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is None and isinstance(error, yaml.reader.ReaderError):
        return f" position {error.position + 1}"
    return "" if mark is None else f" line {mark.line + 1} column {mark.column + 1}"


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What PyYAML found wrong, on one line (its own message spans several)."""
    if isinstance(error, yaml.reader.ReaderError):
        return f"the character {chr(error.character)!r} is not allowed"
    parts = [getattr(error, "context", None), getattr(error, "problem", None)]
    text = "; ".join(part for part in parts if part) or str(error)
    return " ".join(text.split())


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``dotted.key=value`` applied (values parsed as YAML)."""
    result = _deep_copy(data)
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r} is not of the form key=value")
        dotted, raw = override.split("=", 1)
        keys = dotted.strip().split(".")
        if not all(keys):
            raise ConfigError(f"override {override!r} has an empty key")
        node = result
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {override!r}: {key!r} is not a section")
            node = child
        try:
            node[keys[-1]] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            node[keys[-1]] = raw
        except (ValueError, RecursionError) as error:  # e.g. an integer of more than 4300 digits
            raise ConfigError(f"override of {dotted.strip()!r}: cannot read the value: {error}") from None
    return result


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config", root: type | None = None) -> T:
    """Build dataclass ``cls`` from a mapping, recursively and strictly. ``root``: the dataclass of
    the whole config when ``cls`` is one of its sections (``where`` names it), for the hint of an
    unknown key that belongs to another section."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown}; valid keys: {sorted(fields)}"
            f"{_unknown_key_hint(root or cls, unknown, fields)}"
        )
    hints = typing.get_type_hints(cls)
    values = {
        name: _convert(hints[name], value, f"{where}.{name}", root or cls) for name, value in data.items()
    }
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where}: {error}") from None


def _unknown_key_hint(root: type, unknown: list[str], fields: Iterable[str]) -> str:
    """What each unknown key of a section may have meant: the same key in other sections of the
    config ``root``, by their paths (``training.checkpoint`` → ``evaluation.checkpoint``, ``seed`` →
    ``data.seed`` or ``training.seed``), else a near miss among the section's ``fields``."""
    paths = _key_paths(root)
    suggestions: dict[object, list[str]] = {}
    for key in unknown:
        homes = [path for path in paths if path.rpartition(".")[2] == key]
        match = closest_choice(key, fields)
        suggestions[key] = homes or ([match] if match is not None else [])
    return suggestion_hint(suggestions)


def _key_paths(section: type, prefix: str = "", depth: int = 4) -> list[str]:
    """The dotted path of every key of the dataclass ``section`` and of its subsections."""
    paths = []
    for name, hint in typing.get_type_hints(section).items():
        paths.append(f"{prefix}{name}")
        for subsection in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(subsection) and isinstance(subsection, type) and depth > 0:
                paths += _key_paths(subsection, f"{prefix}{name}.", depth - 1)
    return paths


def to_dict(config: Any) -> dict[str, Any]:
    """The plain-data form of a config dataclass (for YAML/JSON)."""
    return dataclasses.asdict(config)


def save_yaml(data: dict[str, Any], path: str | Path) -> None:
    from attnlab.io import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(data, sort_keys=False))


def _convert(hint: Any, value: Any, where: str, root: type | None = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (arg for arg in args if arg is not type(None)):
            try:
                return _convert(option, value, where, root)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {hint}")
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where, root)  # type: ignore[arg-type]
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(
                f"{where}: expected one of {list(args)}, got {value!r}{did_you_mean(value, args)}"
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_hint = args[0] if args else Any
        items = [_convert(item_hint, item, f"{where}[{i}]", root) for i, item in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        value_hint = args[1] if len(args) == 2 else Any
        return {key: _convert(value_hint, item, f"{where}.{key}", root) for key, item in value.items()}
    return _convert_scalar(hint, value, where)


def _convert_scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:
            return float(value)  # YAML reads "1e-3" as a string
        except ValueError:
            pass
    if hint is int and isinstance(value, bool):
        raise ConfigError(f"{where}: expected int, got {value!r}")
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise ConfigError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {key: _deep_copy(value) if isinstance(value, dict) else value for key, value in data.items()}
