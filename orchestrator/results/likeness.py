"""Whether two measurements may be compared: the same model on the same workload.

``orch compare`` lines folders up by run name and load point; the same name may have measured
another model, other prompts or another token budget (a playbook edited between the two runs).
A relative difference between those is no effect of the engine, the host or the day: it is
refused, and what differs is listed instead (``differences``).

What must be equal (``LIKE_COLUMNS``, columns of ``results.load()``'s frame): the model; the
prompts, by content where both results recorded it (``prompts_sha256``: then a renamed file is
still the same workload, a rewritten one is not) and by name otherwise; the request budget
(``num_prompts``, ``workload_duration_s``), ``input_len``, ``max_tokens``, ``api``,
``ignore_eos``, ``temperature``, ``seed``, and under a request rate its ``burstiness`` and the
cap on requests in flight (``concurrency``). The load point itself is part of the pairing.
What a comparison is for may differ freely: engine, its version, method, GPUs, host, day.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from orchestrator.results.frame import WORKLOAD

# the model, every column of the workload a frame row measured, and an open loop's cap: one
# list of the workload's columns (``frame.WORKLOAD``) serves the frame and this check
LIKE_COLUMNS = ("model", *WORKLOAD, "concurrency")
_OPEN_LOOP_ONLY = ("burstiness", "concurrency")  # under a concurrency point, the point itself

Workload = dict[str, object]


def plain(value: object) -> object:
    """A frame's cell as a Python value, None for every kind of missing."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def workload_of(row: Mapping[str, object]) -> Workload:
    """The ``LIKE_COLUMNS`` of a frame row (open-loop-only ones under a request rate only)."""
    open_loop = row.get("load_kind") == "request_rate"
    return {c: plain(row.get(c)) for c in LIKE_COLUMNS if open_loop or c not in _OPEN_LOOP_ONLY}


def differences(base: Workload, other: Workload) -> list[str]:
    """What differs, ``"max_tokens 160 vs 96"`` (base first); empty when they are alike."""
    shas = base.get("prompts_sha256"), other.get("prompts_sha256")
    by_content = None not in shas
    out = []
    for column in LIKE_COLUMNS:
        if column not in base and column not in other:
            continue
        if by_content and column == "prompts":
            continue  # the same content under another name is the same workload
        if not by_content and column == "prompts_sha256":
            continue  # unknown on a side (random prompts, an older result): told by name
        was, now = base.get(column), other.get(column)
        if was != now:
            out.append(f"{column} {_text(column, was)} vs {_text(column, now)}")
    return out


def _text(column: str, value: object) -> str:
    if value is None:
        return "-"
    if column == "prompts_sha256" and isinstance(value, str):
        return value[:12] + "…"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
