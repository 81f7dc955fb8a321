"""The results table's notes: client-saturation warnings are printed with the run they concern."""

from __future__ import annotations

import contextlib
import io

from orchestrator.cli.main import run as run_cli
from orchestrator.results.store import write_json


def test_warnings_are_printed_under_the_table(tmp_path) -> None:
    warning = "client saturated: event-loop delay p99 35.0 ms > 20 ms: the load generator's host is busy"
    runs = [
        {"run": "fast[concurrency=64]", "host": "h1", "engine": "vllm", "method": "none", "order": 0,
         "requests": {"completed": 64, "failed": 0, "output_throughput": 12345.67},
         "warnings": [warning]},
        {"run": "calm", "host": "h1", "engine": "vllm", "method": "none", "order": 1,
         "requests": {"completed": 4, "failed": 0, "output_throughput": 25.0}, "warnings": []},
    ]
    for s in runs:
        write_json(tmp_path / s["run"] / "summary.json", s)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(["report", str(tmp_path)]) == 0
    text = " ".join(out.getvalue().split())
    assert "fast[concurrency=64]" in text and "12345.7" in text
    assert f"warning: fast[concurrency=64] on h1: {warning}" in text
    assert text.count("warning:") == 1
