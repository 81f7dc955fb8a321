"""Acceptance length, measured three independent ways, combined (pure).

1. Prometheus: counter deltas over the measured window (vLLM 1 + Δaccepted/Δdrafts; SGLang
   Δgeneration_tokens/Δspec_verify_calls, or the gauge when the counter is missing);
2. the engine's own log lines during the window (``SpecDecoding metrics`` / ``Decode batch``);
3. the client: output tokens per SSE chunk after the first (one chunk per engine step).

The reported value is the first available in that order; every pair that differs by more than
``DISAGREEMENT`` (relative to the larger) is listed, because a disagreement usually means one of
the sources is not measuring what we think (stream interval > 1, warm-up in the window, an engine
that batches chunks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import ConfigDict

from orchestrator.metrics.prom import SpecDelta

DISAGREEMENT = 0.10
AcceptanceSource = Literal["prometheus", "log", "client"]
SOURCES: tuple[AcceptanceSource, ...] = ("prometheus", "log", "client")


@dataclass(frozen=True)
class Acceptance:
    """Acceptance length three ways; ``length`` is the first known of prometheus, log, client.

    Also the persisted record (``RunResult.acceptance``): pydantic validates it as it stands,
    so its fields are declared here only."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    length: float | None
    source: AcceptanceSource | None
    prometheus: float | None
    log: float | None
    client: float | None
    per_position: list[float] | None
    per_position_source: str | None
    disagreement: list[str] = field(default_factory=list)  # pairs more than 10% apart
    notes: list[str] = field(default_factory=list)  # why a source has no figure
    prometheus_delta: SpecDelta | None = None  # the counters behind ``prometheus``

    @property
    def disagrees(self) -> bool:
        return bool(self.disagreement)


def relative_gap(a: float, b: float) -> float:
    top = max(abs(a), abs(b))
    return 0.0 if top == 0 else abs(a - b) / top


def combine_acceptance(
    *,
    prometheus: float | None,
    log: float | None,
    client: float | None,
    per_position_prometheus: list[float] | None = None,
    per_position_log: list[float] | None = None,
    speculative: bool = True,
    notes: list[str] | None = None,
) -> Acceptance:
    """Pick the reported value and flag disagreements beyond 10%.

    Without speculation there is no acceptance length: every source is ignored (a plain run
    sends one token per chunk, which would read as 1.0 and look like a collapse).
    """
    notes = list(notes or [])
    if not speculative:
        return Acceptance(None, None, None, None, client, None, None, [], notes)
    values: dict[AcceptanceSource, float | None] = {
        "prometheus": prometheus,
        "log": log,
        "client": client,
    }
    source = next((s for s in SOURCES if values[s] is not None), None)
    flagged = []
    present = [(s, v) for s, v in values.items() if v is not None]
    for i, (sa, va) in enumerate(present):
        for sb, vb in present[i + 1 :]:
            gap = relative_gap(va, vb)
            if gap > DISAGREEMENT:
                flagged.append(f"{sa} {va:.3f} vs {sb} {vb:.3f} differ by {gap:.0%}")
    if per_position_prometheus:
        per_pos, per_pos_source = per_position_prometheus, "prometheus"
    elif per_position_log:
        per_pos, per_pos_source = per_position_log, "log"
    else:
        per_pos, per_pos_source = None, None
    return Acceptance(
        length=values[source] if source else None,
        source=source,
        prometheus=prometheus,
        log=log,
        client=client,
        per_position=per_pos,
        per_position_source=per_pos_source,
        disagreement=flagged,
        notes=notes,
    )
