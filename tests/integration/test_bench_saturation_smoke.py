"""The saturation calibration keeps working: 1 and 4 streams, alone and beside a busy loop,
against the simulator's ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.collect import collect
from benchmarks.saturation import COLUMNS
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration


def test_saturation_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("saturation", tmp_path)
    assert data["smoke"] is True and data["columns"] == COLUMNS
    rows = data["rows"]
    assert [(r[0], r[1]) for r in rows] == [
        ("plain c=1, 5 ms/step, 1 tok/chunk", "alone"),
        ("plain c=1, 5 ms/step, 1 tok/chunk", "busy"),
        ("plain c=4, 5 ms/step, 1 tok/chunk", "alone"),
        ("plain c=4, 5 ms/step, 1 tok/chunk", "busy"),
    ]
    for row in rows:
        assert isinstance(row[2], float) and isinstance(row[3], float)  # TPOT and TTFT errors
        assert row[4] in ("right", "wrong") and row[8] in ("flagged", "–")
        assert 0.0 <= row[7] <= 100.0  # shared reads %
    names = [t["name"] for t in data["targets"]]
    assert names == ["orch now: false alarms", "orch now: misses"]
    assert any(n.startswith("- 4 runs, ") for n in data["notes"])
    assert "## Client saturation: the detector against the simulator's truth\n\nNot measured" in (
        collect(tmp_path)
    )
