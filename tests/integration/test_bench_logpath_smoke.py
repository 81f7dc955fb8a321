"""The log-path benchmark keeps working: at its smoke size it follows a real agent's tail over
OpenSSH and over an embedded host, and writes its files (its figures are not checked here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.benchsmoke import smoke
from tests.fixtures.sshd import sshd_binary

pytestmark = pytest.mark.integration


@pytest.mark.skipif(sshd_binary() is None, reason="OpenSSH sshd is not installed")
def test_logpath_benchmark_smoke(tmp_path: Path) -> None:
    data = smoke("logpath", tmp_path)
    assert data["smoke"] is True and data["name"] == "logpath"
    assert data["columns"] == [
        "transport",
        "lines/s, tail alone",
        "CPU µs/line",
        "lines/s, tail + parse, engine log (1 in 100 a metrics line)",
        "CPU µs/line",
        "lines/s, tail + parse, worst case (every line a metrics line)",
        "CPU µs/line",
        "delay median ms (1,000/s)",
        "delay p99 ms (1,000/s)",
        "delay max ms",
    ]
    ssh, embedded = data["rows"]
    assert ssh[0] == "SSH (OpenSSH sshd, 127.0.0.1)" and embedded[0] == "embedded"
    for row in (ssh, embedded):
        assert all(value > 0 for value in row[1:])
        assert row[7] <= row[8] <= row[9]  # median <= p99 <= max
    targets = [(t["name"], t["limit"], t["unit"], t["at_most"]) for t in data["targets"]]
    assert targets == [
        (
            "lines/s, tail + parse over SSH, engine log (1 in 100 a metrics line)",
            100_000.0,
            "lines/s",
            False,
        ),
        ("delay p99 at 1,000 lines/s over SSH", 100.0, "ms", True),
    ]
    assert data["targets"][0]["value"] == ssh[3] and data["targets"][1]["value"] == ssh[8]
    assert data["notes"][0].startswith("Lines/s: 5,000 lines written as fast as the writer can")
    assert data["notes"][1].startswith("The lines/s target is judged on the engine log")
    assert (
        (tmp_path / "logpath.md")
        .read_text()
        .startswith("## Log path: tail + parse, host to controller")
    )
