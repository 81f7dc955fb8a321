"""The load generator's profiling script keeps working: 4 streams against the simulator, every
request matched with the simulator's record of it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.remote.httpconn import KERNEL_TIMESTAMPS
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration


def test_loadgen_profile_smoke(tmp_path: Path) -> None:
    data = smoke("loadgen_profile", tmp_path)
    (row,) = data["rows"]
    assert data["smoke"] is True
    assert (row["concurrency"], row["requests"], row["matched"]) == (4, 8, 8)
    assert row["arrival_clock"] == ("kernel" if KERNEL_TIMESTAMPS else "loop")
    assert row["event_loop"].split(", ")[0] in ("asyncio", "uvloop")
    assert all(math.isfinite(row[k]) for k in ("tpot_err_pct", "ttft_err_mean_ms"))
    assert row["tpot_truth_ms"] > 0 and row["cpu_s_per_1k_tokens"] > 0
