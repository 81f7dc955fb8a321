"""The client-saturation detector on lag shaped like what benchmarks/saturation.py measured: a
closed loop's wave boundary (a long send-lag tail, chunks read apart) must not be flagged, a
client too late to read its streams must be."""

from __future__ import annotations

import pytest

from orchestrator.loadgen.records import RequestRecord
from orchestrator.metrics.summary import (
    ClientLag,
    LagStats,
    first_read_shared_pct,
    request_stats,
    shared_read_pct,
)
from orchestrator.runner.summarize import client_warnings


def flagged(lag: ClientLag) -> list[str]:
    out = client_warnings(
        client_lag=lag, request_rate=None, achieved_rate=None, scheduled_rate=None
    )
    return [str(getattr(w, "message", w)) for w in out]


def test_a_wave_boundary_is_not_saturation() -> None:
    """256 streams ending at once are sent one after another: send lag p99 119 ms (the issue's
    false alarm), median small; the loop kept up and no chunk shared a read."""
    wave = ClientLag(
        send_lag_ms=LagStats(p50=6.0, p99=119.0, max=131.0),
        loop_delay_ms=LagStats(n=300, mean=2.0, p50=1.0, p99=14.9, max=19.0),
        shared_read_pct=0.0,
    )
    assert flagged(wave) == []


def test_a_client_that_reads_late_is_saturated() -> None:
    """64 streams at 2.5 ms a step on one client core: 83% of chunks shared a read."""
    late = ClientLag(
        send_lag_ms=LagStats(p50=5.2, p99=22.7, max=40.0),
        loop_delay_ms=LagStats(n=300, mean=9.0, p50=6.0, p99=26.7, max=41.0),
        shared_read_pct=83.5,
    )
    warnings = flagged(late)
    assert len(warnings) == 2
    assert any("83.5% of token chunks were read together" in w for w in warnings)
    # shared reads alone flag it (a loop sampled by a 20 ms ticker can miss short stalls)
    quiet_loop = late.model_copy(update={"loop_delay_ms": LagStats(p99=3.0)})
    assert len(flagged(quiet_loop)) == 1
    # and a client whose requests leave late for most of the run
    behind = ClientLag(send_lag_ms=LagStats(p50=80.0, p99=400.0, max=500.0))
    assert any("send lag median 80.0 ms > 50 ms" in w for w in flagged(behind))


def record(index: int, times: list[float]) -> RequestRecord:
    return RequestRecord.from_json(
        {
            "index": index,
            "warmup": False,
            "start": 0.0,
            "start_wall": 1e9,
            "end": times[-1],
            "status": 200,
            "ttft": times[0],
            "e2el": times[-1],
            "chunks": [[t, 1] for t in times],
            "output_tokens": len(times),
            "usage_reported": True,
            "token_count_method": "usage",
            "finish_reason": "length",
        }
    )


def test_shared_reads_count_chunks_that_came_with_the_one_before() -> None:
    apart = record(0, [0.01, 0.02, 0.03, 0.04, 0.05])
    together = record(1, [0.01, 0.03, 0.03, 0.05, 0.05])  # 2 of 4 read with the previous
    assert shared_read_pct([apart]) == 0.0
    assert shared_read_pct([apart, together]) == 25.0
    assert shared_read_pct([]) is None
    stats = request_stats([apart, together])
    assert stats.client_lag.shared_read_pct == 25.0


def test_a_first_chunk_read_with_the_second_is_counted_apart() -> None:
    """The TTFT's share: a request whose first two chunks came in one read."""
    apart = record(0, [0.01, 0.02, 0.03])
    first = record(1, [0.02, 0.02, 0.03])  # its first token carries the second's time
    later = record(2, [0.01, 0.02, 0.02])  # shared, but not its first
    assert first_read_shared_pct([apart, first, later]) == pytest.approx(100 / 3)
    assert first_read_shared_pct([record(3, [0.01])]) is None  # one chunk: nothing to share
    stats = request_stats([apart, first, later])
    assert stats.client_lag.first_read_shared_pct == pytest.approx(100 / 3)
    # a wave's start where a third of the first tokens were read late is saturation
    assert any("first token chunk read" in w for w in flagged(stats.client_lag))
