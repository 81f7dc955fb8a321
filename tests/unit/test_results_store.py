from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator.errors import OrchError
from orchestrator.metrics.summary import ClientLag, LagStats, Stats
from orchestrator.results.report import (
    CSV_COLUMNS,
    HISTORICAL_COLUMNS,
    csv_value,
    summary_row,
    write_summary_csv,
)
from orchestrator.results.store import AppendLog, new_results_dir, safe_name, write_json, write_text
from tests.fixtures.run_results import acceptance, make_result, request_stats


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm-dflash", "vllm-dflash"),
        (
            "vllm-dflash[concurrency=4,num_draft_tokens=7]",
            "vllm-dflash_concurrency_4_num_draft_tokens_7",
        ),
        ("x" * 150, "x" * 100),
        ("x" * 98 + "[c=1]", "x" * 98 + "_c"),  # no trailing "_" left by the cut
        ("../etc/passwd", "etc_passwd"),
        ("a b/c", "a_b_c"),
        ("...", "run"),
    ],
)
def test_safe_name(name: str, expected: str) -> None:
    assert safe_name(name) == expected


def test_results_dirs_are_never_reused(tmp_path) -> None:
    now = datetime(2026, 12, 2, 10, 57, 11, tzinfo=timezone.utc)
    a = new_results_dir(tmp_path, "demo", now=now)
    b = new_results_dir(tmp_path, "demo", now=now)
    assert a.name == "20261202T105711Z-demo"
    assert b.name == "20261202T105711Z-demo-1"


def test_write_refuses_to_overwrite_and_leaves_no_temp(tmp_path) -> None:
    p = write_json(tmp_path / "summary.json", {"a": 1})
    with pytest.raises(OrchError, match="refusing to overwrite"):
        write_text(p, "other")
    assert json.loads(p.read_text()) == {"a": 1}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["summary.json"]


def test_append_log_is_readable_while_it_grows(tmp_path) -> None:
    """`tail -f server.log` during a run: every line is on disk as soon as it was written."""
    log = AppendLog(tmp_path / "server.log")
    log.write_line("first\n")
    assert (tmp_path / "server.log").read_text() == "first\n"
    log.write_json({"k": 2})
    log.write_lines(["a", "b\n"])
    assert (tmp_path / "server.log").read_text() == 'first\n{"k": 2}\na\nb\n'
    assert log.close() == tmp_path / "server.log"
    assert log.closed and log.close() == tmp_path / "server.log"  # closing twice is harmless
    assert [x.name for x in tmp_path.iterdir()] == ["server.log"]  # no hidden partial file


def test_append_log_never_overwrites(tmp_path) -> None:
    (tmp_path / "events.jsonl").write_text("old\n")
    with pytest.raises(OrchError, match="refusing to overwrite"):
        AppendLog(tmp_path / "events.jsonl")
    assert (tmp_path / "events.jsonl").read_text() == "old\n"


def test_append_log_survives_kill_9(tmp_path) -> None:
    """A process killed mid-run (SIGKILL: no clean-up at all) leaves the lines it had written,
    under the file's own name."""
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from orchestrator.results.store import AppendLog\n"
        "log = AppendLog(Path(sys.argv[1]))\n"
        "for i in range(3):\n"
        "    log.write_line(f'line {i}')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "server.log")],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (tmp_path / "server.log").read_text() == "line 0\nline 1\nline 2\n"
    assert [x.name for x in tmp_path.iterdir()] == ["server.log"]


def test_summary_row_and_csv(tmp_path) -> None:
    req = request_stats(
        completed=8,
        failed=1,
        out=101.5,
        decode=Stats(median=110.25),
        ttft=Stats(median=42.5),
        tpot=Stats(median=9.0),
        lag=ClientLag(send_lag_ms=LagStats(p99=0.25), loop_delay_ms=LagStats(p99=3.5)),
    )
    result = make_result("vllm-dflash", requests=req).model_copy(
        update={"acceptance": acceptance(5.1, prometheus=5.1, log=5.0, client=5.05)}
    )
    row = summary_row(result)
    assert row["output_tok_s"] == 101.5
    assert row["decode_tok_s_median"] == 110.25
    assert row["ttft_ms_median"] == 42.5
    assert row["tpot_ms_median"] == 9.0
    assert row["acceptance_length"] == 5.1
    assert (row["acceptance_length_log"], row["acceptance_length_client"]) == (5.0, 5.05)
    assert row["client_lag_ms_p99"] == 0.25
    assert row["loop_delay_ms_p99"] == 3.5
    assert row["collapse"] is False
    assert row["error"] == ""
    assert (row["prompts"], row["concurrency"], row["max_tokens"]) == ("builtin:mixed", 1, 160)
    assert row["spec_decode_acceptance_rate"] == pytest.approx(100 * 4.1 / 15)
    broken = make_result("broken", error="died")
    path = write_summary_csv(tmp_path / "summary.csv", [result, broken])
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == CSV_COLUMNS
    assert lines[1].startswith("vllm-dflash,h1,vllm,dflash,15,8,1,")
    # ... then model, gpu_name, gpu_count (tensor_parallel here), load_kind, load_value, repeat,
    # output and total tok/s per GPU (101.5 / 2; no token counts), interactivity (1000 / 9),
    # goodput, slo_met, prompts_sha256 (none recorded here)
    tail = ",Qwen/Qwen3.6-27B,,2,,,,50.75,0,111.111,,,"
    historical = [",".join(line.split(",")[: len(HISTORICAL_COLUMNS)]) for line in lines[1:]]
    assert historical[0].endswith(",False,,z-lab/drafter,2,builtin:mixed,1,,160,27.33" + tail)
    assert historical[1].endswith(
        ",False,died,z-lab/drafter,2,builtin:mixed,1,,160,,Qwen/Qwen3.6-27B,,2,,,,,,,,,"
    )
    # the catalogued metrics appended after them: total tok/s (no token counts: 0), % of
    # roofline and decode GB/s (no model shape here), the other latency statistics (none
    # measured here), goodput share, failure rate (1 of 9 sent), the energy and clocks (no GPU
    # telemetry here)
    appended = [line.split(",")[len(HISTORICAL_COLUMNS) :] for line in lines[1:]]
    assert CSV_COLUMNS[-1] == "energy_problems"  # empty: no GPU telemetry here
    assert CSV_COLUMNS[len(HISTORICAL_COLUMNS) : -1][-8:] == [
        "goodput_fraction",
        "failure_rate",
        "j_per_output_token",
        "j_per_token",
        "output_tok_s_per_w",
        "gpu_power_w",
        "sm_clock_mhz",
        "gpu_throttled_pct",
    ]
    assert CSV_COLUMNS[len(HISTORICAL_COLUMNS) :][1:3] == ["roofline_pct", "decode_gb_s"]
    assert appended[0] == ["0", *[""] * 14, "0.1111", *[""] * 7]
    assert appended[1] == [""] * 23


@pytest.mark.parametrize(
    ("column", "value", "text"),
    [
        ("output_tok_s", 12345.67, "12345.67"),  # "%.4g" wrote 1.235e+04
        ("output_tok_s", 1234567.891, "1234567.89"),
        ("output_tok_s", 71.1, "71.1"),
        ("output_tok_s", 100.0, "100"),
        ("ttft_ms_median", 55.91234, "55.912"),
        ("acceptance_length", 5.663219, "5.6632"),
        ("request_throughput", 0.000123, "0.0001"),
        ("loop_delay_ms_p99", 1e-7, "0"),
        ("client_lag_ms_p99", -1e-9, "0"),
        ("duration_s", 1e15 + 0.5, "1000000000000000.5"),
        ("completed", 10, "10"),
        ("collapse", True, "True"),
        ("acceptance_length", None, ""),
        ("error", "died, badly", "died, badly"),
    ],
)
def test_csv_values_are_fixed_point(column: str, value, text: str) -> None:
    assert csv_value(column, value) == text


def test_csv_has_no_exponent_for_large_and_small_values(tmp_path) -> None:
    req = request_stats(
        completed=3,
        out=12345.67,
        request_throughput=0.00012,
        decode=Stats(median=98765.4321),
        lag=ClientLag(send_lag_ms=LagStats(p99=0.0), loop_delay_ms=LagStats(p99=23.45678)),
    )
    path = write_summary_csv(
        tmp_path / "summary.csv", [make_result("big", method="none", requests=req)]
    )
    with path.open(newline="") as fh:
        row = next(csv.DictReader(fh))
    assert row["output_tok_s"] == "12345.67"
    assert row["request_throughput"] == "0.0001"
    assert row["decode_tok_s_median"] == "98765.43"
    assert row["client_lag_ms_p99"] == "0"
    assert row["loop_delay_ms_p99"] == "23.457"
    assert "e+" not in path.read_text() and "e-" not in path.read_text()


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 000: a file's mode is then exactly what its writer asked for."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("summary.json", lambda p: write_json(p, {"a": 1})),
        ("metrics_after.txt", lambda p: write_text(p, "x 1\n")),
        ("server.log", lambda p: AppendLog(p).close()),
    ],
)
def test_result_files_are_for_their_owner_only(
    tmp_path: Path, open_umask: None, name: str, write: Callable[[Path], object]
) -> None:
    """Results hold engine logs and settings: mode 0600, whatever the umask."""
    write(tmp_path / name)
    assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
