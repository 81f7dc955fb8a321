"""pydantic's validation errors, told as people need them: file:line:column, what, what instead.

pydantic knows the key path and the error kind; the YAML nodes know where the value sits; the
model classes know the allowed keys, literal values and bounds. This module joins the three.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Sequence
from inspect import isclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from yaml.nodes import Node, ScalarNode

from orchestrator.config.yamlload import Document, Loc, format_path, join_path
from orchestrator.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class ConfigValidationError(ConfigError):
    """The first problem in file order; the other problems found at the same time in ``others``."""

    def __init__(self, first: ConfigError, others: Sequence[ConfigError] = ()) -> None:
        super().__init__(
            first.message,
            file=first.file,
            line=first.line,
            column=first.column,
            path=first.path,
            hint=first.hint,
        )
        self.others = list(others)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def show(value: Any) -> str:
    """A value as the user would recognise it from their YAML."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


def validate(
    model: type[M],
    data: Any,
    doc: Document,
    node: Node,
    *,
    prefix: Loc = (),
    context: dict[str, Any] | None = None,
) -> M:
    """``model.model_validate(data)`` whose errors point into ``doc`` (``node`` holds ``data``)."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise translate(exc, doc, model=model, node=node, prefix=prefix) from exc


def translate(
    exc: ValidationError, doc: Document, *, model: type[BaseModel], node: Node, prefix: Loc = ()
) -> ConfigValidationError:
    found: dict[tuple[Any, ...], ConfigError] = {}
    errors = union_errors(exc.errors(include_url=False))
    typos = _misspelled_required(errors, model)
    for i, err in enumerate(errors):
        if i in typos.values():
            continue  # told together with the missing key it misspells
        if i in typos:
            one = _misspelled(err, errors[typos[i]], doc, model, node, prefix)
        else:
            one = _one(err, doc, model, node, prefix)
        found.setdefault((one.line, one.column, one.message), one)
    ordered = sorted(found.values(), key=lambda e: (e.line or 0, e.column or 0))
    return ConfigValidationError(ordered[0], ordered[1:])


_UNION_TAG = re.compile(r"^(constrained-)?(int|float|str|bool|none)$|^list\[.*\]$")
_SCALAR_TYPES = {"int_type", "int_parsing", "float_type", "float_parsing", "int_from_float"}


def union_errors(errors: Sequence[Any]) -> list[Any]:
    """The errors of a value written for a ``scalar | list`` field, as if the field had the one
    shape the value has: pydantic reports each member (``concurrency.constrained-int``, and
    ``concurrency.list[constrained-int]`` "should be a valid list"), with the member's tag in
    the path. A scalar gets the scalar's errors, a list the list's, and no path holds a tag."""
    out = []
    for err in errors:
        loc = tuple(err["loc"])
        tags = [i for i, part in enumerate(loc) if isinstance(part, str) and _UNION_TAG.match(part)]
        if not tags:
            out.append(err)
            continue
        tag = str(loc[tags[0]])
        if tag.startswith("list[") and err["type"] == "list_type":
            continue  # a scalar was written: the list member does not apply
        if (
            not tag.startswith("list[")
            and err["type"] in _SCALAR_TYPES
            and isinstance(err.get("input"), list)
        ):
            continue  # a list was written: the scalar member does not apply
        out.append({**err, "loc": tuple(p for i, p in enumerate(loc) if i not in tags)})
    return out or list(errors)


def _misspelled_required(errors: Sequence[Any], model: type[BaseModel]) -> dict[int, int]:
    """{index of a missing-key error: index of the unknown sibling key that misspells it}.

    ``modle: m`` makes two errors, a missing ``model`` and an unknown ``modle``; told apart,
    the first (in file order, the mapping's start) hides the did-you-mean that says what to fix.
    """
    unknown: dict[Loc, list[int]] = {}
    for i, err in enumerate(errors):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and loc:
            unknown.setdefault(loc[:-1], []).append(i)
    pairs: dict[int, int] = {}
    for i, err in enumerate(errors):
        loc = tuple(err["loc"])
        if err["type"] != "missing" or not loc or loc[:-1] not in unknown:
            continue
        owner = model_at(model, loc[:-1])
        allowed = list(owner.model_fields) if owner else [str(loc[-1])]
        for j in unknown[loc[:-1]]:
            word = str(errors[j]["loc"][-1])
            close = difflib.get_close_matches(word, allowed, n=1, cutoff=0.6)
            if close == [str(loc[-1])] and j not in pairs.values():
                pairs[i] = j
                break
    return pairs


def _misspelled(
    missing: Any, extra: Any, doc: Document, model: type[BaseModel], node: Node, prefix: Loc
) -> ConfigError:
    """One error at the misspelled key (where the fix goes), naming the key it should be."""
    loc: Loc = tuple(missing["loc"])
    wrong = str(extra["loc"][-1])
    target, key_node, depth = doc.locate(node, tuple(extra["loc"]))
    anchor = key_node if depth == len(extra["loc"]) and key_node is not None else target
    owner_node, _, owner_depth = doc.locate(node, loc[:-1])
    parent = doc.path_of(owner_node) if owner_depth == len(loc) - 1 else None
    path = join_path(parent if parent is not None else format_path(prefix + loc[:-1]), loc[-1])
    owner = model_at(model, loc[:-1])
    field = owner.model_fields.get(str(loc[-1])) if owner else None
    hint = f"{loc[-1]}: {field.description}" if field and field.description else None
    message = (
        f"missing required key {loc[-1]!r} (found unknown key {wrong!r}: did you mean {loc[-1]!r}?)"
    )
    return doc.mark(anchor).error(message, path=path, hint=hint)


def _one(err: Any, doc: Document, model: type[BaseModel], node: Node, prefix: Loc) -> ConfigError:
    loc: Loc = tuple(err["loc"])
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc = loc[:-1]
    kind = err["type"]
    target, key_node, depth = doc.locate(node, loc)
    full = depth == len(loc)

    if kind == "missing" and loc:
        parent_path = doc.path_of(target) if depth == len(loc) - 1 else None
        path = join_path(
            parent_path if parent_path is not None else format_path(prefix + loc[:-1]), loc[-1]
        )
        owner = model_at(model, loc[:-1])
        field = owner.model_fields.get(str(loc[-1])) if owner else None
        hint = f"{loc[-1]}: {field.description}" if field and field.description else None
        return doc.mark(target).error(f"missing required key {loc[-1]!r}", path=path, hint=hint)

    anchor = (
        key_node
        if (kind == "extra_forbidden" or is_key) and full and key_node is not None
        else target
    )
    at: str | None = (doc.path_of(anchor) if full else None) or format_path(prefix + loc) or None
    if kind == "extra_forbidden" and loc:
        message, hint = _unknown_key(str(loc[-1]), model_at(model, loc[:-1]))
    else:
        annotation, meta = annotation_at(model, loc)
        typed = (
            anchor.value
            if full and isinstance(anchor, ScalarNode) and anchor.style is None
            else None
        )
        message, hint = describe(kind, err, annotation, meta, typed=typed)
    return doc.mark(anchor).error(message, path=at, hint=hint)


def _unknown_key(key: str, owner: type[BaseModel] | None) -> tuple[str, str | None]:
    allowed = list(owner.model_fields) if owner else []
    guess = did_you_mean(key, allowed)
    listing = ", ".join(allowed)
    if guess:
        return f"unknown key {key!r}{guess}", f"allowed keys here: {listing}"
    if allowed:
        return f"unknown key {key!r}; allowed: {listing}", None
    return f"unknown key {key!r}", None


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list",
}
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def describe(
    kind: str, err: Any, annotation: Any, meta: list[Any], *, typed: str | None = None
) -> tuple[str, str | None]:
    """(message, hint) for one pydantic error: what was found and what is allowed.

    ``typed`` is the unquoted text the user wrote, when YAML read it as something else
    (``yes`` -> true, ``1e3`` -> 1000.0): shown so the message matches the file.
    """
    value = err.get("input")
    found = show(value)
    if typed is not None and not isinstance(value, str) and typed != found:
        found = f"{typed} (YAML reads it as {found})"
    ctx = err.get("ctx") or {}
    if kind in ("literal_error", "enum"):
        allowed = (
            [str(a) for a in get_args(annotation)] if get_origin(annotation) is Literal else []
        )
        if not allowed:
            return f"found {found}; allowed: {ctx.get('expected', '?')}", None
        return f"found {found}; allowed: {', '.join(allowed)}{did_you_mean(value, allowed)}", None
    if kind in _EXPECTED:
        hint = None
        if kind == "string_type" and isinstance(value, int | float | bool):
            hint = f'quote it to make it a string: "{typed if typed is not None else show(value)}"'
        if kind == "list_type":
            hint = "write [a, b] or one '- item' per line"
        return f"expected {_EXPECTED[kind]}, found {found}", hint
    if kind in _BOUNDS:
        return f"must be {_bounds(meta, ctx)}, found {found}", None
    if kind == "too_short":
        need = ctx.get("min_length", 1)
        return (
            f"expected at least {need} item{'s' if need != 1 else ''}, found {ctx.get('actual_length', 0)}",
            None,
        )
    if kind == "string_too_short":
        return "must not be empty", None
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"]), None
    return f"{err['msg']}; found {found}", None


def _bounds(meta: list[Any], ctx: dict[str, Any]) -> str:
    low = high = None
    for m in meta:
        if isinstance(m, at.Ge):
            low = f">= {m.ge}"
        elif isinstance(m, at.Gt):
            low = f"> {m.gt}"
        elif isinstance(m, at.Le):
            high = f"<= {m.le}"
        elif isinstance(m, at.Lt):
            high = f"< {m.lt}"
    if low and high:
        if low.startswith(">=") and high.startswith("<="):
            return f"between {low[3:]} and {high[3:]}"
        return f"{low} and {high}"
    if low or high:
        return str(low or high)
    for name, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if name in ctx:
            return f"{op} {ctx[name]}"
    return "in range"


def unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """Strip ``Annotated`` and ``X | None``: (the bare type, the constraints met on the way)."""
    meta: list[Any] = []
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            args = get_args(annotation)
            annotation = args[0]
            for m in args[1:]:
                meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
            continue
        if origin in (Union, types.UnionType):
            rest = [a for a in get_args(annotation) if a is not type(None)]
            if len(rest) == 1:
                annotation = rest[0]
                continue
        return annotation, meta


def annotation_at(model: type[BaseModel], loc: Loc) -> tuple[Any, list[Any]]:
    """The declared type at a key path of ``model`` and its constraints ((None, []) if unknown)."""
    annotation: Any = model
    meta: list[Any] = []
    for part in loc:
        annotation, _ = unwrap(annotation)
        origin = get_origin(annotation)
        if isclass(annotation) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None, []
            annotation, meta = field.annotation, list(field.metadata)
        elif origin in (list, tuple, set):
            annotation, meta = get_args(annotation)[0], []
        elif origin is dict:
            annotation, meta = get_args(annotation)[1], []
        else:
            return None, []
    annotation, more = unwrap(annotation)
    return annotation, meta + more


def model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    annotation, _ = annotation_at(model, loc)
    return annotation if isclass(annotation) and issubclass(annotation, BaseModel) else None
