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
    for values in rows:
        row = dict(zip(COLUMNS, values, strict=True))
        assert isinstance(row["TPOT err %"], float) and isinstance(row["TTFT err ms"], float)
        assert row["timings"] in ("right", "wrong")
        assert row["old rule"] in ("flagged", "–") and row["orch now"] in ("flagged", "–")
        assert 0.0 <= row["shared reads %"] <= 100.0
        assert 0.0 <= row["first-read shared %"] <= 100.0
    names = [t["name"] for t in data["targets"]]
    assert names == ["orch now: false alarms", "orch now: misses"]
    assert any(n.startswith("- 4 runs, ") for n in data["notes"])
    assert "## Client saturation: the detector against the simulator's truth\n\nNot measured" in (
        collect(tmp_path)
    )
