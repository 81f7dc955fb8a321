"""The simulator's vLLM mode compared with real vLLM 0.32 output (tests/fixtures/vllm_cpu/).

Pure helpers: text in, differences out (a list of sentences, empty when the two agree), so a
test can show that each comparison bites. ``ALLOWED`` is the one table of differences the
simulator may keep, each with its reason; any other difference is reported.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_cpu"


@dataclass(frozen=True)
class Renamed:
    """Line shapes: the simulator prints ``sim`` where vLLM 0.32 on the CPU prints ``real``."""

    sim: str
    real: str
    reason: str


@dataclass(frozen=True)
class Absent:
    """A ``vllm:*`` metric family of the real engine that the simulator does not expose."""

    reason: str


_UNREAD = "orch reads none of it and the simulator has nothing to count for it"
_NO_FEATURE = "a feature the simulator does not have (external KV transfer, multimodal cache, sleep mode, admission control)"

ALLOWED: dict[str, Renamed | Absent] = {
    "kv cache device": Renamed(
        "GPU KV cache",
        "CPU KV cache",
        "the simulator imitates a GPU host; the CPU build names the KV cache after its device, "
        "in the start-up line and in every Engine stats line",
    ),
    "engine core process": Renamed(
        "(EngineCore_DP#)",
        "(EngineCore)",
        "the simulator keeps the rank-suffixed process names of the multi-GPU engine sources it "
        "was written from; orch reads no process name but APIServer's",
    ),
    "vllm:iteration_tokens_total": Absent(_UNREAD),
    "vllm:request_max_num_generation_tokens": Absent(_UNREAD),
    "vllm:request_params_n": Absent(_UNREAD),
    "vllm:request_params_max_tokens": Absent(_UNREAD),
    "vllm:request_num_preemptions": Absent(_UNREAD),
    "vllm:request_prefill_kv_computed_tokens": Absent(_UNREAD),
    "vllm:num_requests_waiting_by_reason": Absent(_UNREAD),
    "vllm:prompt_tokens_by_source": Absent(_UNREAD),
    "vllm:prompt_tokens_cached": Absent(_UNREAD),
    "vllm:prompt_tokens_cached_by_source": Absent(_UNREAD),
    "vllm:cache_config_info": Absent(_UNREAD),
    "vllm:estimated_flops_per_gpu": Absent(_UNREAD),
    "vllm:estimated_read_bytes_per_gpu": Absent(_UNREAD),
    "vllm:estimated_write_bytes_per_gpu": Absent(_UNREAD),
    "vllm:external_prefix_cache_queries": Absent(_NO_FEATURE),
    "vllm:external_prefix_cache_hits": Absent(_NO_FEATURE),
    "vllm:mm_cache_queries": Absent(_NO_FEATURE),
    "vllm:mm_cache_hits": Absent(_NO_FEATURE),
    "vllm:engine_sleep_state": Absent(_NO_FEATURE),
    "vllm:admission_rejections": Absent(_NO_FEATURE),
}

# -- log lines ---------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HEAD = re.compile(
    r"^\((?P<proc>[^()\s]+) pid=\d+\) (?P<level>[A-Z]+) "
    r"\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)? \[[^\]]*\] ?"
)
_PATH = re.compile(r'"(GET|POST|PUT|DELETE|HEAD) \S+ ')
_ADDR = re.compile(r"\b0x[0-9a-f]+\b")
# a request id, ``cmpl-<hex>`` with vLLM's ``-<index>`` and ``-<hex>`` suffixes when it has them
_REQUEST_ID = re.compile(
    r"\b(?P<kind>(?:chat)?cmpl)-[0-9a-f]+(?P<index>-\d+)?(?P<tail>-[0-9a-f]+)?"
)
_HEX_ID = re.compile(r"\b(?=[0-9a-f]{8,}\b)[0-9a-f]*\d[0-9a-f]*\b")  # other ids
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_LIST = re.compile(r"#(?:, #)+")


def _request_id(match: re.Match[str]) -> str:
    index = "-#" if match["index"] else ""
    return f"{match['kind']}-<id>{index}{'-<id>' if match['tail'] else ''}"


def line_shape(line: str) -> str:
    """A log line with what varies between runs taken out: vLLM's ``(APIServer pid=N) INFO
    MM-DD HH:MM:SS [file.py:NNN]`` prefix becomes ``(APIServer) INFO``; numbers become ``#``
    and a list of them ``#, …``; request ids, addresses, request paths and the argument dict of
    ``non-default args`` become placeholders. Lines without that prefix keep the rest of theirs."""
    line = _ANSI.sub("", line).rstrip()
    head = _HEAD.match(line)
    prefix = f"({head['proc']}) {head['level']} " if head else ""
    body = line[head.end() :] if head else line
    if body.startswith("non-default args: "):
        body = "non-default args: {…}"
    body = _PATH.sub(r'"\1 <path> ', body)
    body = _REQUEST_ID.sub(_request_id, body)
    body = _HEX_ID.sub("<id>", _ADDR.sub("<addr>", body))
    return _LIST.sub("#, …", _NUMBER.sub("#", prefix + body))


_STARTUP_MARKS = ("Using max model len", "KV cache size:", "init engine (profile",
                  "Supported tasks", "Supported_tasks", "Starting vLLM server on",
                  "Available routes are:")  # fmt: skip
_REQUEST_MARKS = ("Received request ", "Added request ", "Finished request ")

# The kinds of line orch parses, waits for or shows (vllm_log.parse, VllmEngine.ready_lines,
# the signature "Starting vLLM", secrets masked in "non-default args") and their neighbours at
# start-up and shutdown; a kind's test is loose on purpose, so a misspelt line still lands in it.
KINDS: dict[str, Callable[[str], bool]] = {
    "engine_stats": lambda s: "Avg prompt throughput" in s,
    "spec_decode": lambda s: "SpecDecoding metrics:" in s,
    "banner": lambda s: "█" in s and " version " in s,
    "args": lambda s: "non-default args:" in s,
    "startup": lambda s: any(mark in s for mark in _STARTUP_MARKS),
    "requests": lambda s: any(mark in s for mark in _REQUEST_MARKS),
    "shutdown": lambda s: "[shutdown]" in s,
    "access": lambda s: 'HTTP/#"' in s,
    "uvicorn": lambda s: "INFO:     " in s,
}


def shapes_by_kind(lines: Iterable[str]) -> dict[str, set[str]]:
    """The shapes of the lines of each kind (a line goes to the first kind that takes it)."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for line in lines:
        shape = line_shape(line)
        kind = next((k for k, test in KINDS.items() if test(shape)), None)
        if kind is not None:
            found[kind].add(shape)
    return found


def as_real(shape: str, allowed: Mapping[str, Renamed | Absent] = ALLOWED) -> str:
    """What vLLM 0.32 on the CPU would print where the simulator printed ``shape``."""
    for entry in allowed.values():
        if isinstance(entry, Renamed):
            shape = shape.replace(entry.sim, entry.real)
    return shape


def shape_differences(
    real: Mapping[str, set[str]],
    sim: Mapping[str, set[str]],
    *,
    required: Sequence[str] = tuple(KINDS),
    allowed: Mapping[str, Renamed | Absent] = ALLOWED,
) -> list[str]:
    """Each simulator shape the real engine never printed (after the allowed renames), and each
    required kind the simulator printed no line of."""
    problems = []
    for kind in KINDS:
        shapes = sim.get(kind, set())
        if kind in required and not shapes:
            problems.append(f"{kind}: the simulator printed no such line")
        known = real.get(kind, set())
        for shape in sorted({as_real(s, allowed) for s in shapes} - known):
            near = difflib.get_close_matches(shape, sorted(known), n=1, cutoff=0.0)
            closest = f"; closest real line: {near[0]!r}" if near else ""
            problems.append(f"{kind}: vLLM 0.32 never prints {shape!r}{closest}")
    return problems


# -- /metrics ----------------------------------------------------------------------------------

_PLAIN_LABELS = frozenset({"model_name", "engine", "le", "position"})  # values vary by set-up


@dataclass
class Family:
    """One ``vllm:*`` family: its type and help text, its samples' label names, the values of
    its enumerated labels (``finished_reason``, ``source``...) and its histogram buckets."""

    type: str
    help: str
    labels: dict[str, set[str]]
    values: dict[str, set[str]]
    buckets: set[str]


def vllm_families(*texts: str) -> dict[str, Family]:
    """The ``vllm:*`` families of one or more scrapes (merged), by family name."""
    out: dict[str, Family] = {}
    for text in texts:
        for fam in text_string_to_metric_families(text):
            if not fam.name.startswith("vllm:"):
                continue
            entry = out.setdefault(fam.name, Family(fam.type, fam.documentation, {}, {}, set()))
            for sample in fam.samples:
                entry.labels.setdefault(sample.name, set()).update(sample.labels)
                for key, value in sample.labels.items():
                    if key == "le":
                        entry.buckets.add(value)
                    elif key not in _PLAIN_LABELS:
                        entry.values.setdefault(key, set()).add(value)
    return out


def _family_differences(name: str, real: Family, sim: Family) -> list[str]:
    problems = []
    if real.type != sim.type:
        problems.append(f"{name}: type {sim.type}, vLLM 0.32 has {real.type}")
    if real.help != sim.help:
        problems.append(f"{name}: help {sim.help!r}, vLLM 0.32 has {real.help!r}")
    if set(real.labels) != set(sim.labels):
        problems.append(
            f"{name}: samples {sorted(sim.labels)}, vLLM 0.32 has {sorted(real.labels)}"
        )
    for sample in sorted(set(real.labels) & set(sim.labels)):
        if real.labels[sample] != sim.labels[sample]:
            problems.append(f"{sample}: labels {sorted(sim.labels[sample])}, "
                            f"vLLM 0.32 has {sorted(real.labels[sample])}")  # fmt: skip
    for key in sorted(set(real.values) | set(sim.values)):
        if real.values.get(key) != sim.values.get(key):
            problems.append(f"{name}: {key} values {sorted(sim.values.get(key, ()))}, "
                            f"vLLM 0.32 has {sorted(real.values.get(key, ()))}")  # fmt: skip
    if real.buckets != sim.buckets:
        problems.append(f"{name}: buckets {sorted(sim.buckets, key=float)}, "
                        f"vLLM 0.32 has {sorted(real.buckets, key=float)}")  # fmt: skip
    return problems


def metric_differences(
    real: Mapping[str, Family],
    sim: Mapping[str, Family],
    *,
    read_by_orch: Iterable[str] = (),
    allowed: Mapping[str, Renamed | Absent] = ALLOWED,
) -> list[str]:
    """Families only the simulator has; real families it lacks that ``allowed`` does not
    excuse; type, sample, label and bucket differences of the shared ones; and sample names
    orch reads that either side lacks."""
    absent = {name for name, entry in allowed.items() if isinstance(entry, Absent)}
    problems = [f"{name}: the simulator exposes it, vLLM 0.32 does not"
                for name in sorted(set(sim) - set(real))]  # fmt: skip
    missing = {n for n in set(real) - set(sim) if n.removesuffix("_created") not in absent}
    problems += [
        f"{name}: vLLM 0.32 exposes it, the simulator does not" for name in sorted(missing)
    ]
    for name in sorted(set(real) & set(sim)):
        problems += _family_differences(name, real[name], sim[name])
    for sample in read_by_orch:
        for side, families in (("vLLM 0.32", real), ("the simulator", sim)):
            if not any(sample in fam.labels for fam in families.values()):
                problems.append(f"{sample}: orch reads it, {side} does not expose it")
    return problems


def unused_allowances(
    sim_shapes: Mapping[str, set[str]],
    real: Mapping[str, Family],
    sim: Mapping[str, Family],
    allowed: Mapping[str, Renamed | Absent] = ALLOWED,
) -> list[str]:
    """Entries of ``allowed`` that excuse nothing (a rename the simulator's lines never need, a
    family vLLM 0.32 lacks or the simulator has), so the table cannot outlive its reasons."""
    shapes = [shape for found in sim_shapes.values() for shape in found]
    out = []
    for key, entry in allowed.items():
        if isinstance(entry, Renamed) and not any(entry.sim in shape for shape in shapes):
            out.append(f"{key}: no simulator line prints {entry.sim!r}")
        elif isinstance(entry, Absent) and (key not in real or key in sim):
            out.append(f"{key}: not a family vLLM 0.32 has and the simulator lacks")
    return out


# -- SSE and error bodies ----------------------------------------------------------------------


def sse_events(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON decoded (``[DONE]`` stays a string)."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def chunk_kind(event: Any) -> str:
    if event == "[DONE]":
        return "done"
    if "error" in event or "choices" not in event:
        return "error"
    if not event["choices"]:
        return "usage"
    return "token" if event["choices"][0].get("finish_reason") is None else "finish"


def _signature(event: Any) -> tuple[tuple[str, ...], ...]:
    if isinstance(event, str):
        return ()
    choices = event.get("choices") or [{}]
    return (
        tuple(sorted(event)),
        tuple(sorted(choices[0])),
        tuple(sorted(event.get("usage") or {})),
    )


def sse_differences(real: Sequence[Any], sim: Sequence[Any]) -> list[str]:
    """Chunk keys by kind (token, finish, usage; the choice's and usage's keys too) must be the
    real stream's, and the stream must end as the real one does (its last three events' kinds
    and finish reasons)."""
    problems = []
    kinds = {chunk_kind(e) for e in real} | {chunk_kind(e) for e in sim}
    for kind in sorted(kinds):
        want = {_signature(e) for e in real if chunk_kind(e) == kind}
        got = {_signature(e) for e in sim if chunk_kind(e) == kind}
        if want != got:
            problems.append(f"{kind} chunks: keys {sorted(got)}, vLLM 0.32 sends {sorted(want)}")

    def ending(events: Sequence[Any]) -> list[tuple[str, Any]]:
        return [(chunk_kind(e), e["choices"][0].get("finish_reason") if chunk_kind(e) == "finish"
                 else None) for e in events[-3:]]  # fmt: skip

    if ending(real) != ending(sim):
        problems.append(f"the stream ends {ending(sim)}, vLLM 0.32's ends {ending(real)}")
    return problems


def error_differences(real: Mapping[str, Any], status: int, body: Any) -> list[str]:
    """An error answer against a recorded one (errors.json): status, the ``{"error": {...}}``
    object's keys, its type, code and param where recorded, and the start of its message."""
    want = real["error"]
    if status != real["status"]:
        return [f"status {status}, vLLM 0.32 answers {real['status']}"]
    if not isinstance(body, dict) or set(body) != {"error"}:
        return [f"body {body!r} is not vLLM's {{'error': {{...}}}} object"]
    error, problems = body["error"], []
    if sorted(error) != sorted(real["keys"]):
        problems.append(f"error keys {sorted(error)}, vLLM 0.32 has {sorted(real['keys'])}")
    for key in ("type", "code", "param"):
        if key in want and error.get(key) != want[key]:
            problems.append(f"{key} {error.get(key)!r}, vLLM 0.32 has {want[key]!r}")
    if not str(error.get("message", "")).startswith(want["message_starts"]):
        problems.append(f"message {error.get('message')!r} does not start with "
                        f"{want['message_starts']!r}")  # fmt: skip
    return problems
