"""Typed mirrors of what the ``loadgen`` verb emits: one ``RequestRecord`` per request, and the
``LoadgenResult`` it returns at the end.

The wire format is documented in ``orchestrator/remote/loadgen.py`` (which cannot import this
module: it runs on the hosts). Times are seconds: ``due``/``start``/``end`` from the load
generator's start (monotonic clock), ``start_wall`` epoch, and ``ttft``/``e2el`` and the chunk
times from the request's own start. ``from_json`` ignores keys it does not know so a newer agent
does not break an older controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Chunk:
    """One SSE chunk that carried output tokens: arrival (s after the request was sent), tokens."""

    t: float
    tokens: int


@dataclass(frozen=True)
class RequestRecord:
    index: int
    warmup: bool
    start: float
    start_wall: float
    end: float
    due: float | None = None
    status: int | None = None
    ttft: float | None = None
    e2el: float | None = None
    chunks: tuple[Chunk, ...] = ()
    output_tokens: int | None = None
    usage_reported: bool = True
    prompt_tokens: int | None = None
    token_count_method: str | None = None  # "usage" | "tokenizer" | "chunk" | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Completed: HTTP 200, a full stream ending in [DONE], at least one token, no error."""
        return self.error is None and self.status == 200 and bool(self.chunks)

    @property
    def send_lag(self) -> float | None:
        """How late the client sent this request (s) compared with when it was due."""
        return None if self.due is None else max(0.0, self.start - self.due)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in obj.items() if k in known}
        data["chunks"] = tuple(Chunk(float(t), int(n)) for t, n in obj.get("chunks") or ())
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["chunks"] = [[c.t, c.tokens] for c in self.chunks]
        return out


@dataclass(frozen=True)
class LoadgenResult:
    """The ``loadgen`` verb's result: counts, the measured window and the client's own lag."""

    requests: int
    completed: int
    failed: int
    duration_s: float
    started_at: float | None = None  # epoch s: first measured request sent
    ended_at: float | None = None  # epoch s: last measured response ended
    warmup: int = 0
    output_tokens: int = 0
    mode: str = "closed"
    concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    client_lag: dict[str, Any] = field(default_factory=dict)
    token_count_method: str | None = None
    token_count_methods: dict[str, int] = field(default_factory=dict)
    prompt_source: str | None = None  # "list" | "random:tokens" | "random:words"
    # random prompts: True when every one is exactly input_len tokens; False when the host had
    # no tokenizer (lengths in words) or some missed; None for a prompt list or file
    input_len_exact: bool | None = None
    random_prompts: int | None = None
    random_prompts_exact: int | None = None
    request_seeds: bool | None = None  # requests carried a per-request sampling seed
    metrics_before: str | None = None
    metrics_after: str | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LoadgenResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in obj.items() if k in known})

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
