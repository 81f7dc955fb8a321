"""What the ``loadgen`` verb streams and returns, as the controller imports it.

Defined once in the wire contract (``orchestrator.remote.wire``), which the agent builds them
from on the host; re-exported here so the controller's loadgen code reads them by their home.
``record_problem`` is what a reader of a results folder's ``requests.jsonl`` checks before it
trusts a line: the file may have been edited, or written by a hostile peer.
"""

from __future__ import annotations

import math

from orchestrator.remote.wire import (
    Chunk,
    ClientLag,
    LagStats,
    LoadgenResult,
    RequestFailure,
    RequestRecord,
)

__all__ = [
    "MAX_LINE",
    "MAX_REQUEST_TOKENS",
    "Chunk",
    "ClientLag",
    "LagStats",
    "LoadgenResult",
    "RequestFailure",
    "RequestRecord",
    "record_problem",
]

# no engine streams more tokens than this in one request (the longest contexts are ~10M)
MAX_REQUEST_TOKENS = 1 << 24
MAX_LINE = 64 << 20  # a requests.jsonl line: a 16M-token request is far shorter in chunks


def record_problem(r: RequestRecord) -> str | None:
    """Why a request record's figures cannot be true, or None: chunks with no tokens or out of
    order, times that are not finite, a completed record whose chunks do not add up to its
    usage or that claims more tokens than any engine streams."""
    tokens = 0
    last = 0.0
    for c in r.chunks:
        if c.tokens < 1 or not math.isfinite(c.t) or c.t < last:
            return f"impossible chunk {list(c)} (tokens >= 1, times from 0 and in order)"
        tokens += c.tokens
        last = c.t
    for name in ("ttft", "e2el", "start", "end"):
        value = getattr(r, name)
        if value is not None and not math.isfinite(value):
            return f"{name} is {value}"
    if not r.ok:
        return None  # a failed record enters no figure
    claimed = r.output_tokens or 0
    if max(claimed, tokens) > MAX_REQUEST_TOKENS:
        return f"{max(claimed, tokens)} output tokens claimed (at most {MAX_REQUEST_TOKENS})"
    if r.usage_reported and len(r.chunks) > claimed:
        return f"{len(r.chunks)} token chunks but {claimed} output tokens"
    if r.token_count_method == "usage" and tokens != claimed:
        return f"its chunks add up to {tokens} tokens, its usage says {claimed}"
    return None
