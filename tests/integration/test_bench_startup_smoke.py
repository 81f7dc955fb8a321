"""The start-up benchmark keeps working: at its smoke size it times each case in new processes,
for this checkout and for an earlier revision, and writes its files (its figures are not
checked against the target here: a smoke run on a busy machine is not a measurement)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.collect import collect
from tests.fixtures.benchsmoke import ROOT, smoke

pytestmark = pytest.mark.integration


def test_startup_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("startup", tmp_path)
    assert data["smoke"] is True and data["name"] == "startup"
    assert data["columns"] == ["what", "after wall s", "after CPU s"]
    names = [row[0] for row in data["rows"]]
    assert names[2:] == [
        "`orch --help`",
        "`orch run --help`",
        "`import orchestrator.cli.run` (the run path)",
    ]
    for _, wall, cpu in data["rows"]:
        assert wall > 0 and cpu > 0
    python_alone, help_ = data["rows"][0][2], data["rows"][2][2]
    assert help_ > python_alone  # orch's start costs more than Python's own
    assert [t["name"] for t in data["targets"]] == [
        "`orch --help`, wall",
        "`orch --help`, CPU",
        "`orch run --help`, wall",
    ]
    assert [t["value"] for t in data["targets"]] == [
        data["rows"][2][1],
        data["rows"][2][2],
        data["rows"][3][1],
    ]
    assert "## CLI start-up\n\nNot measured yet." in collect(tmp_path)


def test_startup_benchmark_times_an_earlier_revision(tmp_path: Path) -> None:
    """``--before REV`` extracts that revision's package and times it beside this checkout."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.startup", "--smoke", "--before", "HEAD"]
        + ["--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads((tmp_path / "startup.json").read_text())
    assert data["columns"] == [
        "what",
        "before wall s",
        "before CPU s",
        "after wall s",
        "after CPU s",
    ]
    assert all(v > 0 for row in data["rows"] for v in row[1:])
    assert "Before: revision HEAD." in data["notes"][0]
