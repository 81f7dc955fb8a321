"""The benchmarks keep working: each runs in its smoke size (`--smoke`) and writes its files.

Not a measurement (the figures of a smoke run are never collected into the README); the
benchmarks themselves run with `make bench`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.collect import collect
from tests.fixtures.benchsmoke import smoke

pytestmark = pytest.mark.integration


def test_reports_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("reports", tmp_path)
    assert data["smoke"] is True and data["name"] == "reports"
    (load, report) = data["rows"]
    assert load[1] == report[1] == 4 and load[2] == 4  # 4 runs, 4 rows in the frame
    assert load[3] > 0 and load[4] > 0 and report[3] > 0 and report[4] > 0
    assert data["machine"]["cores"] == os.cpu_count()
    assert "--smoke" in data["command"]
    assert (tmp_path / "reports.md").read_text().startswith("## Reports over 4 runs")
    # a smoke run never stands in for the benchmark in the README
    assert "## Reports over 1,000 runs\n\nNot measured yet." in collect(tmp_path)


def test_overhead_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("overhead", tmp_path)
    assert data["smoke"] is True
    (single, sweep) = data["rows"]
    # wall > workload > 0; the two workloads are not compared: on a busy machine a 2-point
    # sweep's windows can sum to less than one run's
    assert single[1] > single[2] > 0 and sweep[1] > sweep[2] > 0
    assert sweep[0].startswith("`orch run`, a 2-point sweep")
    names = [t["name"] for t in data["targets"]]
    assert names == [
        "overhead of a first run",
        "overhead of each further load point",
        "agent bytes re-pushed on the next command",
    ]
    assert data["targets"][2]["value"] == 0.0 and data["targets"][2]["met"] is True
