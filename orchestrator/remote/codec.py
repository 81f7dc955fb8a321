"""The one JSON codec of the agent's wire types: dataclass fields in, strict JSON out, and back.

Both sides of the SSH boundary import these definitions (the controller as
``orchestrator.remote``, the host as ``orch_remote`` inside the zipapp), so a field renamed on
one side is renamed on the other. Decoding is strict on purpose: a key nobody declared, or a
declared one that is absent without a default, is a ``WireError`` naming the type and the field
instead of a value that silently reads as None further on.

Standard library only, Python 3.9+: field annotations are evaluated with ``typing``'s own
helpers, so they are written with ``Optional``/``List``/``Dict``, never ``X | None``.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

W = TypeVar("W", bound="Wire")
_NONE = type(None)
_HINTS: Dict[type, Dict[str, Any]] = {}


class WireError(ValueError):
    """A JSON value that is not what the contract says (or a value that cannot be sent)."""


class Wire:
    """Base of every wire dataclass: ``to_json``/``from_json`` checked against the annotations."""

    @classmethod
    def from_json(cls: Type[W], obj: Any) -> W:
        """Build from a decoded JSON object; WireError on an unknown, missing or mistyped field."""
        plan = _flat_plan(cls)
        if plan is not None:
            fast = _decode_flat(cls, plan, obj)
            if fast is not None:
                return typing.cast(W, fast)
        return typing.cast(W, _decode(cls, obj, cls.__name__))

    def to_json(self) -> Dict[str, Any]:
        """The JSON object (plain dicts, lists and scalars), checked like ``from_json`` checks."""
        plan = _flat_plan(type(self))
        if plan is not None:
            fast = _encode_flat(plan, self)
            if fast is not None:
                return fast
        return typing.cast(Dict[str, Any], _encode(type(self), self, type(self).__name__))


def _hints(cls: type) -> Dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


def _what(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _fail(where: str, expected: str, value: Any) -> WireError:
    return WireError(f"{where}: expected {expected}, got {_what(value)}")


def _is_wire(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Wire) and dataclasses.is_dataclass(tp)


def _is_named_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _fail(where, "a boolean", value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _fail(where, "an integer", value)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _fail(where, "a number", value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _fail(where, "a string", value)
    if tp is _NONE:
        if value is None:
            return None
        raise _fail(where, "null", value)
    raise WireError(f"{where}: the contract uses an unsupported type {tp!r}")


def _decode(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Union:
        return _union(tp, value, where, _decode)
    if origin in (list, List):
        if not isinstance(value, list):
            raise _fail(where, "an array", value)
        (item,) = typing.get_args(tp)
        if item is str and all(type(v) is str for v in value):  # a tail's hundreds of lines
            return list(value)
        return [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (tuple, Tuple):
        if not isinstance(value, list):
            raise _fail(where, "an array", value)
        item = typing.get_args(tp)[0]
        numbers = _number_fields(item)
        if numbers is not None:  # a record's hundreds of [t, tokens] chunks
            return tuple(_numbers(item, numbers, v, f"{where}[{i}]") for i, v in enumerate(value))
        return tuple(_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise _fail(where, "an object", value)
        _, item = typing.get_args(tp)
        return {str(k): _decode(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            known = ", ".join(repr(m.value) for m in tp)
            raise _fail(where, f"one of {known}", value) from None
    if _is_named_tuple(tp):
        return _decode_tuple(tp, value, where)
    if _is_wire(tp):
        return _decode_object(tp, value, where)
    return _scalar(tp, value, where)


def _union(tp: Any, value: Any, where: str, step: Callable[[Any, Any, str], Any]) -> Any:
    args = typing.get_args(tp)
    if value is None and _NONE in args:
        return None
    others = [a for a in args if a is not _NONE]
    if len(others) != 1:
        raise WireError(f"{where}: the contract allows only Optional[X] unions, not {tp!r}")
    return step(others[0], value, where)


_NUMBER_FIELDS: Dict[Any, Optional[Tuple[Any, ...]]] = {}


def _number_fields(tp: Any) -> Optional[Tuple[Any, ...]]:
    """A NamedTuple of ints and floats alone: its field types (decoded without the general
    walk, which costs a type dispatch and a path string per number); else None."""
    if tp not in _NUMBER_FIELDS:
        hints = _hints(tp) if _is_named_tuple(tp) else {}
        kinds = tuple(hints.get(n) for n in getattr(tp, "_fields", ()))
        _NUMBER_FIELDS[tp] = kinds if kinds and all(k in (int, float) for k in kinds) else None
    return _NUMBER_FIELDS[tp]


def _numbers(tp: Any, kinds: Tuple[Any, ...], value: Any, where: str) -> Any:
    """``value`` as ``tp`` when it is an array of fitting numbers; else the general decode
    says exactly what is wrong."""
    if type(value) is list and len(value) == len(kinds):
        out = []
        for i, kind in enumerate(kinds):  # no zip(strict=): the agent runs on Python 3.9
            x = value[i]
            if type(x) is int or (kind is float and type(x) is float):
                out.append(float(x) if kind is float else x)
            else:
                return _decode_tuple(tp, value, where)
        return tp(*out)
    return _decode_tuple(tp, value, where)


def _encode_numbers(tp: Any, kinds: Tuple[Any, ...], value: Any) -> Optional[List[Any]]:
    """``value`` (a sequence of ``tp``) as arrays, when every number fits; None sends it the
    general way, which says what is wrong."""
    out = []
    for v in value:
        if type(v) is not tp:
            return None
        for i, kind in enumerate(kinds):
            x = v[i]
            if not (type(x) is int or (kind is float and type(x) is float)):
                return None
        out.append(list(v))
    return out


def _decode_tuple(tp: Any, value: Any, where: str) -> Any:
    names = tp._fields
    if not isinstance(value, list) or len(value) != len(names):
        raise _fail(where, f"an array of {len(names)} ({', '.join(names)})", value)
    hints = _hints(tp)
    return tp(*(_decode(hints[n], value[i], f"{where}[{i}]") for i, n in enumerate(names)))


# A flat record: every field a str, int, float or bool, or Optional of one. Per field: name, type,
# whether None is allowed, whether it must be given.
_Plan = Tuple[Tuple[str, type, bool, bool], ...]
_FLAT: Dict[type, Optional[_Plan]] = {}


def _flat_plan(cls: type) -> Optional[_Plan]:
    """The fields of a flat record (``TailHeartbeat``, ``TailSpec``), which are
    checked without the general walk and its type dispatch per field; else None."""
    if cls not in _FLAT:
        _FLAT[cls] = _plan_of(cls)
    return _FLAT[cls]


def _plan_of(cls: type) -> Optional[_Plan]:
    if not dataclasses.is_dataclass(cls):
        return None
    hints = _hints(cls)
    plan = []
    for f in dataclasses.fields(typing.cast(Any, cls)):
        tp = hints[f.name]
        args = typing.get_args(tp) if typing.get_origin(tp) is typing.Union else ()
        optional = len(args) == 2 and _NONE in args
        if optional:
            tp = args[1] if args[0] is _NONE else args[0]
        if tp not in (str, int, float, bool):  # a list, a record, an enum, a wider union
            return None
        given = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append((f.name, tp, optional, given))
    return tuple(plan)


def _decode_flat(cls: type, plan: _Plan, value: Any) -> Any:
    """``value`` as ``cls`` when every field fits exactly; None sends it the general way, which
    says what is wrong (or accepts what this is too strict for)."""
    if type(value) is not dict:
        return None
    kwargs: Dict[str, Any] = {}
    for name, tp, optional, required in plan:
        if name in value:
            x = value[name]
            if type(x) is tp or (optional and x is None):
                kwargs[name] = x
            elif tp is float and type(x) is int:
                kwargs[name] = float(x)
            else:
                return None
        elif required:
            return None
    if len(kwargs) != len(value):  # a key nobody declared
        return None
    return cls(**kwargs)


def _encode_flat(plan: _Plan, value: Any) -> Optional[Dict[str, Any]]:
    out: Dict[str, Any] = {}
    for name, tp, optional, _required in plan:
        x = getattr(value, name)
        if type(x) is tp or (optional and x is None):
            out[name] = x
        elif tp is float and type(x) is int:
            out[name] = float(x)
        else:
            return None
    return out


def _label(cls: type, where: str) -> str:
    return where if where == cls.__name__ else f"{where} ({cls.__name__})"


def _decode_object(cls: Any, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(_label(cls, where), "an object", value)
    fields = dataclasses.fields(cls)
    known = {f.name for f in fields}
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise WireError(f"{_label(cls, where)}: unknown field {unknown[0]!r}{more}")
    hints = _hints(cls)
    kwargs: Dict[str, Any] = {}
    for f in fields:
        if f.name in value:
            kwargs[f.name] = _decode(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise WireError(f"{_label(cls, where)}: missing field {f.name!r}")
    return cls(**kwargs)


def _encode(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Union:
        return _union(tp, value, where, _encode)
    if origin in (list, List, tuple, Tuple):
        if not isinstance(value, (list, tuple)):
            raise _fail(where, "a list", value)
        item = typing.get_args(tp)[0]
        if item is str and all(type(v) is str for v in value):  # a tail's hundreds of lines
            return list(value)
        numbers = _number_fields(item)
        if numbers is not None:  # a record's hundreds of [t, tokens] chunks
            fast = _encode_numbers(item, numbers, value)
            if fast is not None:
                return fast
        return [_encode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise _fail(where, "a dict", value)
        _, item = typing.get_args(tp)
        return {str(k): _encode(item, v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, tp):
            value = _decode(tp, value, where)
        return value.value
    if _is_named_tuple(tp):
        if not isinstance(value, tuple) or len(value) != len(tp._fields):
            raise _fail(where, f"a {tp.__name__}", value)
        hints = _hints(tp)
        return [_encode(hints[n], value[i], f"{where}[{i}]") for i, n in enumerate(tp._fields)]
    if _is_wire(tp):
        if not isinstance(value, tp):
            raise _fail(where, f"a {tp.__name__}", value)
        hints = _hints(tp)
        return {
            f.name: _encode(hints[f.name], getattr(value, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(typing.cast(Any, value))
        }
    return _scalar(tp, value, where)
