"""The client benchmark keeps working: orch's load generator alone, at 1 and 4 streams, against
the simulator's ground truth (no peer is installed in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.client import COLUMNS
from benchmarks.collect import collect
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration


def test_client_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("client", tmp_path)
    assert data["smoke"] is True and data["columns"] == COLUMNS
    one, four = data["rows"]
    assert one[:2] == ["plain c=1, 5 ms/step, 1 tok/chunk", "orch"]
    assert four[:2] == ["plain c=4, 5 ms/step, 1 tok/chunk", "orch"]
    assert (one[4], four[4]) == (200.0, 800.0)  # offered: streams x tokens per chunk / step
    for row in (one, four):
        achieved, truth = row[2], row[3]
        assert achieved > 0 and truth > 0
        assert isinstance(row[5], float) and isinstance(row[7], float)  # TPOT and TTFT errors
        assert row[8] > 0  # client CPU per 1k tokens
        assert row[9].startswith("send p99 ")
    # a rung orch marked failed (a busy machine) gives no figure to the target
    ok = [row for row in (one, four) if "marked failed" not in row[9]]
    if ok:
        (target,) = data["targets"]
        assert target["name"] == (
            f"orch TPOT error up to 256 streams (largest, over the {len(ok)} rungs orch reports ok)"
        )
        assert target["value"] == max(abs(row[5]) for row in ok)
    else:
        assert data["targets"] == []
    assert "none (smoke run: orch only)" in " ".join(data["notes"])
    # a smoke run never stands in for the benchmark in the README
    assert "## Client accuracy and capacity against AIPerf and GuideLLM\n\nNot measured yet." in (
        collect(tmp_path)
    )
