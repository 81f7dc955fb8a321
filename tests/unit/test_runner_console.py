"""The results table's notes: client-saturation warnings are printed with the run they concern."""

from __future__ import annotations

import contextlib
import io

from orchestrator.cli.main import run as run_cli
from orchestrator.results.model import RunWarning
from tests.fixtures.run_results import make_result, request_stats, write_results


def test_warnings_are_printed_under_the_table(tmp_path) -> None:
    warning = (
        "client saturated: event-loop delay p99 35.0 ms > 20 ms: the load generator's host is busy"
    )
    saturated = RunWarning(kind="client_saturated", message=warning)
    write_results(
        tmp_path,
        [
            make_result(
                "fast[concurrency=64]",
                method="none",
                order=0,
                warnings=[saturated],
                requests=request_stats(completed=64, out=12345.67),
            ),
            make_result(
                "calm", method="none", order=1, requests=request_stats(completed=4, out=25.0)
            ),
        ],
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(["report", str(tmp_path)]) == 0
    text = " ".join(out.getvalue().split())
    assert "fast[concurrency=64]" in text and "12345.7" in text
    assert f"warning: fast[concurrency=64] on h1: {warning}" in text
    assert text.count("warning:") == 1
