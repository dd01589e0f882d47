"""Typed configs from plain data: one set of coercion rules for every frozen config dataclass.

What this is: `build(cls, data, path)`, which turns a mapping (parsed YAML, `a.b=c` overrides, estimator
options) into dataclass `cls`, rejecting unknown keys with the valid ones listed and accepting what YAML and
the command line produce (`1` for a float, `"1e-5"` for a float, a list for a tuple). `agentrl.config` builds
the run config with it and `agentrl.credit.make_config` each estimator's options.

What this is not: validation of values; each config's `__post_init__` checks its own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from agentrl.errors import ConfigError


def build(cls: type[Any], data: Any, path: str) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and coercing lists to tuples."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} in {path or 'config'}; valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    values = {name: _convert(hints[name], value, _join(path, name)) for name, value in data.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {path or 'config'}: {exc}") from exc


def _convert(hint: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, path)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return value
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        return _float(value, path)  # YAML 1.1 reads "1e-5" (no dot) as a string
    if hint in (int, float, bool, str) and (not isinstance(value, hint) or _is_bool_as_int(hint, value)):
        raise ConfigError(f"{path} must be {hint.__name__}, got {value!r}")
    return value


def _float(text: str, path: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{path} must be float, got {text!r}") from None


def _is_bool_as_int(hint: Any, value: Any) -> bool:
    return hint is int and isinstance(value, bool)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
