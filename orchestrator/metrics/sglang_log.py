"""SGLang's ``Decode batch`` / ``Prefill batch`` lines -> typed events (pure).

Variants covered (see docs/ENGINES.md): plain ``#token``/``token usage``,
hybrid ``#full token``/``full token usage``/``mamba ...``, sliding-window ``#swa token ...``,
the graph flag spelled ``cuda``/``cpu``/``npu graph``, optional ``cap len``, ``block accept
len``, ``#cached-token``, trailing ``est. ...`` parts, an iteration tag (``Decode batch
[4711],``) and the old form ``Decode batch. ... #queue-req: 0, `` (period, trailing comma).
The ``key: value`` grammar is vLLM's too, so the key/value helpers are shared with
``vllm_log``. Contract of ``parse`` as in ``vllm_log``: event, ``None``, or ``ValueError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.metrics.vllm_log import event_dict, map_fields, number

ENGINE = "sglang"
KINDS = ("decode_batch", "prefill_batch")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `[2026-07-30 13:35:13 DP1 TP0] `: rank parts only when that parallelism is on.
_PREFIX = re.compile(
    r"^\[(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<ranks>(?: (?:DP|PP|TP|EP)\d+)*)\] ?"
)
_RANK = re.compile(r"(DP|PP|TP|EP)(\d+)")
# The heading ends in "," or "." (or the line ends: truncated), so prose such as
# "Decode batch size ..." is not taken for a metrics line.
_HEADING = re.compile(r"\b(?P<which>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?(?:[.,]|\s*$)")
_GRAPH_KEY = re.compile(r"(?P<backend>[a-z]+) graph")


@dataclass(frozen=True, kw_only=True)
class _SglangLine:
    """What every SGLang metrics line carries besides its figures: its prefix and position."""

    kind: str = field(default="", init=False)
    line_no: int
    iteration: int | None = None
    time: str | None = None  # `%Y-%m-%d %H:%M:%S` as printed
    dp_rank: int | None = None
    pp_rank: int | None = None
    tp_rank: int | None = None
    ep_rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return event_dict(self)


@dataclass(frozen=True, kw_only=True)
class DecodeBatchEvent(_SglangLine):
    """One ``Decode batch`` line (TP rank 0 only, every ``--decode-log-interval`` steps)."""

    kind: str = field(default="decode_batch", init=False)
    running_reqs: int | None = None
    num_tokens: int | None = None  # `#token` or, on hybrid models, `#full token`
    token_usage: float | None = None  # `token usage` or `full token usage` (0..1)
    accept_length: float | None = None  # absent without speculation
    accept_rate: float | None = None  # newer builds only; its definition changed over time
    gen_throughput: float | None = None
    queue_reqs: int | None = None
    cuda_graph: bool | None = None  # also set from `cpu graph` / `npu graph`
    graph_backend: str | None = None  # "cuda", "cpu", "npu", ...
    mamba_num: int | None = None
    mamba_usage: float | None = None
    swa_num_tokens: int | None = None
    swa_token_usage: float | None = None
    cap_length: float | None = None
    block_accept_length: float | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class PrefillBatchEvent(_SglangLine):
    """One ``Prefill batch`` line (one per prefill step that admitted new sequences)."""

    kind: str = field(default="prefill_batch", init=False)
    new_seq: int | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    running_reqs: int | None = None
    queue_reqs: int | None = None
    input_throughput: float | None = None  # newer builds only
    token_usage: float | None = None
    cuda_graph: bool | None = None
    graph_backend: str | None = None
    mamba_usage: float | None = None
    swa_token_usage: float | None = None


SglangEvent = DecodeBatchEvent | PrefillBatchEvent


def _int(raw: str) -> int | None:
    value = number(raw)
    if value is not None and not value.is_integer():
        raise ValueError(f"not a whole number: {raw.strip()!r}")
    return None if value is None else int(value)


def _bool(raw: str) -> bool:
    text = raw.strip()
    if text not in ("True", "False"):
        raise ValueError(f"not True/False: {text!r}")
    return text == "True"


_COMMON: dict[str, tuple[str, Callable[[str], Any]]] = {
    "#running-req": ("running_reqs", _int),
    "#queue-req": ("queue_reqs", _int),
    "token usage": ("token_usage", number),
    "full token usage": ("token_usage", number),
    "mamba usage": ("mamba_usage", number),
    "swa token usage": ("swa_token_usage", number),
    "#cached-token": ("cached_tokens", _int),
    "cuda graph": ("cuda_graph", _bool),  # other backends are mapped in _graph_parts
}
_DECODE = _COMMON | {
    "#token": ("num_tokens", _int),
    "#full token": ("num_tokens", _int),
    "mamba num": ("mamba_num", _int),
    "#swa token": ("swa_num_tokens", _int),
    "accept len": ("accept_length", number),
    "accept rate": ("accept_rate", number),
    "cap len": ("cap_length", number),
    "block accept len": ("block_accept_length", number),
    "gen throughput (token/s)": ("gen_throughput", number),
}
_PREFILL = _COMMON | {
    "#new-seq": ("new_seq", _int),
    "#new-token": ("new_tokens", _int),
    "input throughput (token/s)": ("input_throughput", number),
}
_REQUIRED_DECODE = ("#running-req", "gen throughput (token/s)")
_REQUIRED_PREFILL = ("#new-seq", "#new-token")


def _parts(text: str) -> list[tuple[str, str]]:
    """Split ``key: value`` parts; ``est. ...`` parts are estimates we do not need."""
    parts: list[tuple[str, str]] = []
    for raw in text.strip().rstrip(",").split(", "):
        piece = raw.strip()
        if not piece or piece.startswith("est."):
            continue
        key, sep, value = piece.partition(": ")
        if not sep:
            raise ValueError(f"unexpected part {piece!r}")
        parts.append((key.strip(), value.strip()))
    return parts


def _graph_parts(parts: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], str | None]:
    """``npu graph: True`` -> ``cuda graph: True`` plus the backend's name."""
    backend = None
    out = []
    for key, value in parts:
        match = _GRAPH_KEY.fullmatch(key)
        if match:
            backend = match["backend"]
            key = "cuda graph"
        out.append((key, value))
    return out, backend


def _prefix(line: str) -> dict[str, Any]:
    match = _PREFIX.match(line)
    if not match:
        return {}
    common: dict[str, Any] = {"time": match["time"]}
    for kind, value in _RANK.findall(match["ranks"]):
        common[f"{kind.lower()}_rank"] = int(value)
    return common


def is_signature(line: str) -> bool:
    """Does this line say "SGLang wrote me"? (used to detect the engine of a saved log)."""
    line = _ANSI.sub("", line)
    return (
        bool(_PREFIX.match(line))
        or looks_like_metrics(line)
        or "The server is fired up and ready to roll" in line
    )


def looks_like_metrics(line: str) -> bool:
    return _HEADING.search(line) is not None


def parse(line: str, line_no: int) -> SglangEvent | None:
    """Parse one log line; see the module docstring for the three outcomes."""
    if "\x1b" in line:  # most lines have no colour: the regex costs a scan of each
        line = _ANSI.sub("", line)
    if "Decode batch" not in line and "Prefill batch" not in line:
        return None  # what _HEADING needs: most lines are skipped without a regex
    line = line.rstrip("\r\n")
    heading = _HEADING.search(line)
    if heading is None:
        return None
    parts, backend = _graph_parts(_parts(line[heading.end() :]))
    common = _prefix(line)
    if heading["iter"]:
        common["iteration"] = int(heading["iter"])
    if backend:
        common["graph_backend"] = backend
    if heading["which"] == "Decode":
        values = map_fields(parts, _DECODE, _REQUIRED_DECODE)
        return DecodeBatchEvent(line_no=line_no, **common, **values)
    values = map_fields(parts, _PREFILL, _REQUIRED_PREFILL)
    return PrefillBatchEvent(line_no=line_no, **common, **values)
