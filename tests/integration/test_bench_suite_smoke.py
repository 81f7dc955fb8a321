"""The suite-time benchmark keeps working: at its smoke size it runs two unit modules the way
`make pytest` does and reads their times from pytest's own JUnit report (its figures are not
checked against the target here: a smoke run is not the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.collect import collect
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration


def test_suite_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("suite", tmp_path)
    assert data["smoke"] is True and data["name"] == "suite" and data["targets"] == []
    rows = {row[0]: row[1:] for row in data["rows"]}
    wall, cpu = rows["pytest, wall"][0], rows["CPU used (user + system)"][0]
    assert wall > 0 and cpu > 0
    modules = {name.strip("`"): tests for name, (_, tests) in rows.items() if name.startswith("`")}
    assert set(modules) == {"tests.unit.test_slurm_jobs", "tests.unit.test_slurm_facts"}
    assert all(n > 5 for n in modules.values()), modules
    # the tier's time is the sum of its modules'
    unit = rows["tier unit, summed test time"][0]
    summed = sum(seconds for name, (seconds, _) in rows.items() if name.startswith("`"))
    assert unit == pytest.approx(summed, abs=0.2)
    assert data["notes"][0].startswith(f"{sum(modules.values())} tests passed or skipped")
    assert "## Test suite time\n\nNot measured yet." in collect(tmp_path)
