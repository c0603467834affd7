"""Building config dataclasses from plain data, with errors that name the field.

Every training config (`sft_config.py`, `opd_config.py`, `rl_config.py`, `trajectories.py`,
`pipeline.py`) is a frozen dataclass whose fields carry `metadata={"help": …}`; `build(cls, data,
where)` makes one from a JSON-like mapping, refusing unknown keys and values of the wrong type, and
then runs the class's own `check()` (value ranges). Any problem raises `ConfigError` whose `field`
is the full path, e.g. `stages[1].config.learning_rate`, so the API can answer 422 with it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A training config value is wrong; `field` is its dotted path."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def knob(default: Any, help: str) -> Any:
    """A config field with help text (mutable defaults are copied per instance)."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def help_texts(cls: type) -> dict[str, str]:
    """Field name → help text, for the console and docs."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def build(cls: type[T], data: Mapping[str, Any] | None, where: str) -> T:
    """An instance of config dataclass `cls` from `data` (see module docstring)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(where, f"expected an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}" if where else unknown[0],
                          f"unknown field; known fields: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        values[name] = _coerce(value, hints[name], path)
    try:
        instance = cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(where or cls.__name__, str(error)) from None
    check = getattr(instance, "check", None)
    if check is not None:
        try:
            check()
        except ConfigError as error:
            if where and not error.field.startswith(where):
                raise ConfigError(f"{where}.{error.field}", error.message) from None
            raise
    return instance


def _coerce(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        problems = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, path)
            except ConfigError as error:
                problems.append(error.message)
        raise ConfigError(path, problems[0] if problems else "invalid value")
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {_shown(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {_shown(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"expected a number, got {_shown(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {_shown(value)}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"expected a list, got {_shown(value)}")
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or hint in (dict, Mapping) or origin is typing.Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected an object, got {_shown(value)}")
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)
    return value


def require(condition: bool, field: str, message: str) -> None:
    """For `check()` methods: raise `ConfigError(field, message)` unless `condition`."""
    if not condition:
        raise ConfigError(field, message)


def to_dict(config: Any) -> dict[str, Any]:
    """A config as JSON-ready data (tuples become lists)."""
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _shown(value: object) -> str:
    """A config value as the JSON it came from (not Python's repr), cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:79] + "…"
