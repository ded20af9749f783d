"""Frozen dataclasses to and from JSON, each value checked against its field's type hint.

A kind's typed report (:mod:`lab.kinds`) is a frozen dataclass. :func:`to_json` gives its fields
in their declared order, nested dataclasses as objects; :func:`from_json` builds it back from parsed
JSON, checking every value against its field's hint, and a value of the wrong shape fails with one
:class:`ShapeError` that names where it is (``tests[3].effect``) and what was found, never with
whatever a reader would have raised further on. :func:`json_schema` writes the same hints as a JSON
Schema (draft 2020-12), so the shape a page reads is stated once, in the dataclass.

The hints read: ``bool``, ``int``, ``float`` (an integer is taken as written: ``3`` stays ``3``, so a
report read and written again is the same bytes), ``str``, ``None``, unions (``float | None``),
``list[T]``, ``tuple[T, ...]``, ``dict[str, T]``, ``Literal[...]``, nested dataclasses, and ``Any``
(a JSON value kept as it is: the parts of a report a page shows as text, a study runner's cluster record).
A dataclass's keys are written in its fields' order, which for a subclass is its bases' fields, then its own
(:mod:`dataclasses`); a key a file holds only sometimes is declared with :func:`may_be_absent`, which can also
place a subclass's field amid its base's (``before``), where files written before the type hold it.
Standard library only, like the ground floor it stands on.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from functools import lru_cache
from typing import Any, Literal, Union

__all__ = ["ShapeError", "from_json", "json_schema", "may_be_absent", "to_json", "written_items"]

# A field's metadata key: the file may lack the key (None when it does), and to_json leaves a None out.
ABSENT_WHEN_NONE = "lab.typed.absent_when_none"
# A field's metadata key: the name of the field it is written before (a subclass's key that files hold amid its
# base's keys).
WRITTEN_BEFORE = "lab.typed.written_before"


def may_be_absent(*, before: str | None = None) -> Any:
    """A dataclass field for a key a file holds only sometimes (``--context``'s fields of a report): None when the
    key is missing, and left out when None, so a file read and written again is the same bytes.

    Args:
        before: The field it is written before (:func:`to_json`, :func:`json_schema`), for a field a subclass adds
            whose key files hold amid its base's keys; None: where it is declared.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class R:
    ...     a: int
    ...     z: int = 0
    >>> @dataclass(frozen=True)
    ... class S(R):
    ...     note: str | None = may_be_absent(before="z")
    >>> to_json(from_json(S, {"a": 1}))
    {'a': 1, 'z': 0}
    >>> to_json(S(1, note="n"))
    {'a': 1, 'note': 'n', 'z': 0}
    """
    return dataclasses.field(default=None, metadata={ABSENT_WHEN_NONE: True,
                                                     **({WRITTEN_BEFORE: before} if before is not None else {})})


@lru_cache(maxsize=None)
def _written(cls: type) -> tuple[dataclasses.Field, ...]:
    """``cls``'s fields in the order a file holds them: as declared, but each one that names a field it is written
    :data:`WRITTEN_BEFORE` moved there.

    Raises:
        TypeError: a field written before a name that is no field of ``cls``.
    """
    order = list(dataclasses.fields(cls))
    for moved in [f for f in order if WRITTEN_BEFORE in f.metadata]:
        order.remove(moved)
        names = [f.name for f in order]
        if moved.metadata[WRITTEN_BEFORE] not in names:
            raise TypeError(f"{cls.__name__}.{moved.name} is written before {moved.metadata[WRITTEN_BEFORE]!r}, "
                            f"which is no field of {cls.__name__}")
        order.insert(names.index(moved.metadata[WRITTEN_BEFORE]), moved)
    return tuple(order)

# A problem longer than this (a whole echoed value) is cut: the reason stays one line on a page.
MAX_SHOWN_CHARS = 60


class ShapeError(ValueError):
    """A JSON value not in the shape its type says.

    Attributes:
        where: The path to the value (``tests[3].effect``; ``""`` for the whole value).
        problem: What is wrong, in words.
    """

    def __init__(self, where: str, problem: str) -> None:
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}" if where else problem)


def _shown(value: Any) -> str:
    """A JSON value in words, cut: ``a string ('abc')``, ``an array of 3``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        text = repr(value)
        return f"the number {text}" if len(text) <= MAX_SHOWN_CHARS else f"a number of {len(text)} characters"
    if isinstance(value, str):
        text = value if len(value) <= MAX_SHOWN_CHARS else value[:MAX_SHOWN_CHARS] + "..."
        return f"a string ({text!r})"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _name(hint: Any) -> str:
    """A hint in words, for errors: ``a number``, ``an array``, ``null``."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return "a JSON value"
    if hint is type(None):
        return "null"
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a number"
    if hint is str:
        return "a string"
    if origin in (list, tuple):
        return "an array"
    if origin is dict or dataclasses.is_dataclass(hint):
        return "an object"
    if origin is Literal:
        return " or ".join(repr(v) for v in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(hint))
    return str(hint)


def from_json(cls: Any, data: Any, where: str = "") -> Any:
    """``data`` (parsed JSON) as ``cls``: a dataclass built field by field, or a value checked against a hint.

    Args:
        cls: A dataclass, or any hint the module docstring lists.
        data: The parsed JSON value.
        where: The path to ``data``, for errors (the caller's; ``""`` at the top).

    Returns:
        The value as ``cls``; a dataclass's fields missing from ``data`` take their defaults, keys of ``data``
        that are no field are refused (a report of another shape is not read as this one).

    Raises:
        ShapeError: a value of the wrong type, a field missing without a default, a key that is no field, or a
            float that is not finite (JSON has none; a report writes ``null``).
    """
    origin = typing.get_origin(cls)
    if cls is Any:
        return data
    if dataclasses.is_dataclass(cls):
        return _dataclass(cls, data, where)
    if origin in (Union, types.UnionType):
        return _union(cls, data, where)
    if origin is Literal:
        if data in typing.get_args(cls) and type(data) in {type(v) for v in typing.get_args(cls)}:
            return data
        raise ShapeError(where, f"{_name(cls)} goes here, not {_shown(data)}")
    if origin is list or origin is tuple:
        if not isinstance(data, list):
            raise ShapeError(where, f"an array goes here, not {_shown(data)}")
        args = typing.get_args(cls)
        item = args[0] if args else Any
        values = [from_json(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
        return values if origin is list else tuple(values)
    if origin is dict:
        if not isinstance(data, dict):
            raise ShapeError(where, f"an object goes here, not {_shown(data)}")
        value_hint = typing.get_args(cls)[1] if typing.get_args(cls) else Any
        return {k: from_json(value_hint, v, f"{where}.{k}" if where else k) for k, v in data.items()}
    return _scalar(cls, data, where)


def _scalar(cls: Any, data: Any, where: str) -> Any:
    if cls is type(None) or cls is None:
        ok = data is None
    elif cls is bool:
        ok = isinstance(data, bool)
    elif cls is int:
        ok = isinstance(data, int) and not isinstance(data, bool)
    elif cls is float:
        ok = isinstance(data, (int, float)) and not isinstance(data, bool)
        if ok and isinstance(data, float) and not math.isfinite(data):
            raise ShapeError(where, f"a finite number goes here, not {data!r}")
        if ok and isinstance(data, int) and abs(data) > sys.float_info.max:  # float(data) would raise OverflowError
            raise ShapeError(where, f"a number a float holds goes here, not an integer of {len(str(abs(data)))} digits")
    elif cls is str:
        ok = isinstance(data, str)
    else:
        raise TypeError(f"lab.typed reads no hint {cls!r} (at {where or 'the top'})")
    if not ok:
        raise ShapeError(where, f"{_name(cls)} goes here, not {_shown(data)}")
    return data


def _union(cls: Any, data: Any, where: str) -> Any:
    problems = []
    for option in typing.get_args(cls):
        try:
            return from_json(option, data, where)
        except ShapeError as exc:
            problems.append(exc)
    deepest = max(problems, key=lambda e: len(e.where))  # the option that read furthest says the most
    if deepest.where != where:
        raise deepest
    raise ShapeError(where, f"{_name(cls)} goes here, not {_shown(data)}")


def _dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ShapeError(where, f"an object goes here, not {_shown(data)}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    extra = [k for k in data if k not in fields]
    if extra:
        raise ShapeError(where, f"{'no field' if len(extra) == 1 else 'no fields'} {', '.join(map(repr, extra[:3]))}"
                                f"{' ...' if len(extra) > 3 else ''} in {cls.__name__}")
    values = {}
    for name, f in fields.items():
        here = f"{where}.{name}" if where else name
        if name in data:
            values[name] = from_json(hints[name], data[name], here)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ShapeError(here, f"missing ({cls.__name__} needs it)")
    return cls(**values)


def written_items(obj: Any) -> list[tuple[str, Any]]:
    """A dataclass instance's ``(field name, value)`` pairs as a file holds them: in declared order (a
    :func:`may_be_absent` field with ``before`` where it says), every field, its defaults too, but a
    :func:`may_be_absent` field that is None. The values are as they are (not converted)."""
    return [(f.name, getattr(obj, f.name)) for f in _written(type(obj))
            if not (f.metadata.get(ABSENT_WHEN_NONE) and getattr(obj, f.name) is None)]


def to_json(obj: Any) -> Any:
    """``obj`` as JSON-ready values: a dataclass as an object of its :func:`written_items`, tuples as arrays; every
    other value as it is (the caller's serializer checks it)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_json(value) for name, value in written_items(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def json_schema(cls: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the values :func:`from_json` reads as ``cls``; a dataclass is an object
    whose fields without a default are required and that holds no other key."""
    origin = typing.get_origin(cls)
    if cls is Any:
        return {}
    if dataclasses.is_dataclass(cls):
        hints = _hints(cls)
        fields = [f for f in _written(cls) if f.init]
        return {"type": "object", "additionalProperties": False,
                "properties": {f.name: json_schema(hints[f.name]) for f in fields},
                "required": [f.name for f in fields
                             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]}
    if origin in (Union, types.UnionType):
        return {"anyOf": [json_schema(a) for a in typing.get_args(cls)]}
    if origin is Literal:
        return {"enum": list(typing.get_args(cls))}
    if origin in (list, tuple):
        args = typing.get_args(cls)
        return {"type": "array", "items": json_schema(args[0] if args else Any)}
    if origin is dict:
        args = typing.get_args(cls)
        return {"type": "object", "additionalProperties": json_schema(args[1] if args else Any)}
    simple = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}
    if cls in simple:
        return {"type": simple[cls]}
    raise TypeError(f"lab.typed writes no schema for {cls!r}")
