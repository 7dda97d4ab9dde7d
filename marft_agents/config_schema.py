"""Strictly checked dataclasses from plain data (parsed YAML): the machinery under the configs.

:func:`build_dataclass` builds a dataclass (sections recursively) from a mapping. It refuses an
unknown key (naming it and the valid keys), a value of the wrong type (saying which type was
expected; ints are accepted as floats, lists as tuples, ``5e-4`` written as a YAML string as a
float), suggesting the nearest valid key for a misspelt one, and reports a dataclass's own ``__post_init__`` errors with the key path. Training
configs (:mod:`marft_agents.config`), grid files and learner sections all load through it.
:func:`field_docs` reads the docstring under each field, for help texts.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import textwrap
import types
import typing
from typing import Any, Literal


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message says where and how to fix it."""


def build_dataclass(cls: type, data: Any, where: str) -> Any:
    """Recursively build dataclass ``cls`` from ``data`` with strict key and type checks."""
    label = where or "the config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{label} must be a mapping of {cls.__name__} fields, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(fields), n=1, cutoff=0.6)
        hint = f"did you mean {join_key(where, close[0])!r}? " if close else ""
        raise ConfigError(f"unknown key {join_key(where, str(unknown[0]))!r} in {cls.__name__}; {hint}"
                          f"valid keys: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {name: _convert(hints[name], value, join_key(where, name)) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:  # a dataclass's own __post_init__ checks
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{label}: {err}") from err


def join_key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return repr(tp).replace("typing.", "")
    return getattr(tp, "__name__", repr(tp))


def _convert(tp: Any, value: Any, where: str) -> Any:
    """Check ``value`` against type ``tp`` (converting ints to floats and lists to tuples)."""
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [option for option in args if option is not type(None)]
        if len(options) == 1 and dataclasses.is_dataclass(options[0]) and isinstance(value, dict):
            # ``Section | None`` given a mapping: the section's own error (an unknown key, a
            # migrated key) says more than "Section or null"
            return _convert(options[0], value, where)
        for option in args:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except ConfigError:
                continue
        raise _type_error(tp, value, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where} must be {type_name(tp)}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _type_error(tp, value, where)
        item_type = args[0] if args else Any
        items = [_convert(item_type, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(tp, value, where)
        val_type = args[1] if len(args) == 2 else Any
        return {k: _convert(val_type, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 (PyYAML) reads 5e-4 (no dot in the mantissa) as a string; researchers
            # write learning rates like that, so a string that parses as a float is one.
            try:
                return float(value.strip())
            except ValueError:
                raise _type_error(tp, value, where) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(tp, value, where)
        return float(value)
    if tp is int or tp is bool or tp is str:
        if type(value) is not tp:
            raise _type_error(tp, value, where)
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _type_error(tp, value, where)
    return value


def _type_error(tp: Any, value: Any, where: str) -> ConfigError:
    return ConfigError(f"{where} must be {type_name(tp)}, got {type(value).__name__} {value!r}")


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass ``cls`` (for help texts)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs
