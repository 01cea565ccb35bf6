"""Frozen records to and from JSON, checked against their type annotations.

``from_json(cls, data, where)`` builds a frozen dataclass from parsed JSON, checking every
field against its annotation (``str``, ``int``, ``float``, ``bool``, ``None`` in unions,
``tuple[X, ...]``, ``Mapping[str, X]``, ``Literal``, ``Any`` and nested dataclasses); a
value of the wrong type raises ``TypeMismatch`` naming the dotted field. ``to_json(record)``
is the inverse. The annotations are the one statement of each field's type.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")

_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "an integer", float: "a number", type(None): "null"}


class TypeMismatch(ValueError):
    """A JSON value that does not match the field's annotation."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(problem)


def json_type(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a record type (asked once per type)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if kind is str:
        return "a string"
    if kind is bool:
        return "a boolean"
    if kind is int:
        return "an integer"
    if kind is float:
        return "a number"
    if kind is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(kind))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(kind))
    if origin is tuple:
        return f"an array (each {_describe(typing.get_args(kind)[0])})"
    if origin in (Mapping, dict) or dataclasses.is_dataclass(kind):
        return "an object"
    return "any JSON value"


def convert(kind: Any, value: Any, field: str) -> Any:
    """``value`` (parsed JSON) as ``kind``, or raise ``TypeMismatch`` naming ``field``."""
    origin = typing.get_origin(kind)
    if kind is Any:
        return value
    if origin in (Union, types.UnionType):
        inner: TypeMismatch | None = None
        for option in typing.get_args(kind):
            try:
                return convert(option, value, field)
            except TypeMismatch as error:
                if _container_of(option, value):  # the value has this option's shape: its error says most
                    inner = inner or error
        raise inner or _mismatch(kind, value, field)
    if kind is type(None):
        if value is None:
            return None
        raise _mismatch(kind, value, field)
    if kind is bool or kind is str:
        if isinstance(value, kind):
            return value
        raise _mismatch(kind, value, field)
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _mismatch(kind, value, field)
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _mismatch(kind, value, field)
    if origin is Literal:
        if value in typing.get_args(kind) and isinstance(value, str | int | bool):
            return value
        raise _mismatch(kind, value, field)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _mismatch(kind, value, field)
        item = typing.get_args(kind)[0]
        return tuple(convert(item, v, f"{field}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict):
        if not isinstance(value, dict):
            raise _mismatch(kind, value, field)
        _, item = typing.get_args(kind)
        return {str(k): convert(item, v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise _mismatch(kind, value, field)
        return from_json(kind, value, field)
    raise TypeError(f"{field}: no JSON conversion for the annotation {kind!r}")


def _container_of(kind: Any, value: Any) -> bool:
    """Whether ``value`` is the array or object ``kind`` holds (its items then were wrong)."""
    origin = typing.get_origin(kind)
    if isinstance(value, list):
        return origin is tuple
    if isinstance(value, dict):
        return origin in (Mapping, dict) or (isinstance(kind, type) and dataclasses.is_dataclass(kind))
    return False


def _mismatch(kind: Any, value: Any, field: str) -> TypeMismatch:
    return TypeMismatch(field, f"{field} is {json_type(value)} ({short(value)}), not {_describe(kind)}")


def from_json(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """A ``cls`` record from a JSON object: each field converted by its annotation.

    Keys the record does not declare are ignored (the caller keeps them where it must);
    a field left out takes its default, and a required one left out is a ``TypeMismatch``.
    """
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not item.init:
            continue
        dotted = f"{where}.{item.name}" if where else item.name
        if item.name not in data or data[item.name] is None:
            if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                raise TypeMismatch(dotted, f"the required field {dotted} is missing")
            if item.name in data:  # an explicit null where null is allowed
                values[item.name] = convert(hints[item.name], None, dotted)
            continue
        values[item.name] = convert(hints[item.name], data[item.name], dotted)
    try:
        return cls(**values)
    except ValueError as error:  # a check of the record's own (__post_init__)
        raise TypeMismatch(where or cls.__name__, f"{where or cls.__name__}: {error}") from None


def to_json(value: Any) -> Any:
    """A record (or any value built of records, tuples and mappings) as plain JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: to_json(getattr(value, item.name))
                for item in dataclasses.fields(value) if item.init and item.repr}
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    return value
