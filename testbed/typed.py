"""Typed dataclasses from YAML mappings: unknown keys and wrong types refused, the error naming the key."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


def convert(value: Any, tp: Any, path: str) -> Any:
    """Convert a YAML value to the annotated type, raising ConfigError naming `path`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return convert(value, inner[0], path)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_dict(tp, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__}")
        return [convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        return {str(k): convert(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: Any, data: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or '<top>'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = f"{path}.{key}" if path else str(key)
        if key not in fields:
            raise ConfigError(f"{sub}: unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = convert(value, hints[key], sub)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{path or '<top>'}: {exc}") from None
