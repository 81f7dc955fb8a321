from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from orchestrator.errors import OrchError
from orchestrator.results.report import CSV_COLUMNS, summary_row, write_summary_csv
from orchestrator.results.store import AppendLog, new_results_dir, safe_name, write_json, write_text


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm-dflash", "vllm-dflash"),
        ("vllm-dflash[concurrency=4,num_draft_tokens=7]", "vllm-dflash_concurrency_4_num_draft_tokens_7"),
        ("x" * 150, "x" * 100),
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


def test_append_log_appears_only_when_closed(tmp_path) -> None:
    log = AppendLog(tmp_path / "server.log")
    log.write_line("first\n")
    log.write_json({"k": 2})
    assert not (tmp_path / "server.log").exists()
    log.close()
    assert (tmp_path / "server.log").read_text() == 'first\n{"k": 2}\n'
    assert [x.name for x in tmp_path.iterdir()] == ["server.log"]


def test_summary_row_and_csv(tmp_path) -> None:
    s = {
        "run": "vllm-dflash", "host": "h1", "engine": "vllm", "method": "dflash", "num_draft_tokens": 15,
        "requests": {"completed": 8, "failed": 1, "output_throughput": 101.5,
                     "decode_tok_s": {"median": 110.25}, "ttft_ms": {"median": 42.5},
                     "tpot_ms": {"median": 9.0}},
        "acceptance": {"length": 5.1, "source": "prometheus", "prometheus": 5.1, "log": 5.0, "client": 5.05},
        "collapse": None,
    }
    row = summary_row(s)
    assert row["output_tok_s"] == 101.5
    assert row["decode_tok_s_median"] == 110.25
    assert row["ttft_ms_median"] == 42.5
    assert row["tpot_ms_median"] == 9.0
    assert row["acceptance_length"] == 5.1
    assert row["collapse"] is False
    assert row["error"] == ""
    path = write_summary_csv(tmp_path / "summary.csv", [s, {"run": "broken", "error": {"message": "died"}}])
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == CSV_COLUMNS
    assert lines[1].startswith("vllm-dflash,h1,vllm,dflash,15,8,1,")
    assert lines[2].endswith(",False,died")
