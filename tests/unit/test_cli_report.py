from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

from orchestrator.cli.main import run as run_cli
from orchestrator.results.model import RankedCause
from orchestrator.results.store import write_json
from tests.fixtures.run_results import collapse_verdict, make_result, request_stats, write_results

V1_DEMO = Path(__file__).parents[1] / "fixtures" / "results" / "v1" / "demo"


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(list(args))
    return code, out.getvalue(), err.getvalue()


def test_report_reprints_a_results_folder(tmp_path) -> None:
    cause = RankedCause(
        rank=1,
        cause="mask_token",
        source="finding",
        evidence=["wrong id"],
        fix="set dflash_config.mask_token_id",
    )
    runs = [
        make_result("vllm-dflash", order=0, accept=5.66, requests=request_stats(out=94.7)),
        make_result(
            "broken", order=1, accept=1.07, requests=request_stats(completed=4, out=18.7)
        ).model_copy(update={"collapse": collapse_verdict(1.07, causes=[cause])}),
    ]
    write_results(tmp_path, runs)
    code, out, _ = _cli("report", str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert [r["run"]["name"] for r in doc["runs"]] == ["vllm-dflash", "broken"]
    assert [r["output_throughput"] for r in doc["runs"]] == [94.7, 18.7]  # vllm bench keys
    code, out, _ = _cli("report", str(tmp_path))
    assert code == 0
    assert "COLLAPSE" in out and "94.7" in out and "5.66" in out
    assert "broken on h1: speculation collapsed" in out
    assert "1. mask_token (finding)" in out and "fix: set dflash_config.mask_token_id" in out


def test_report_reads_results_written_before_the_schema_version(tmp_path) -> None:
    """A results folder of orch before the typed result model (schema version 1)."""
    shutil.copytree(V1_DEMO, tmp_path / "demo")
    code, out, err = _cli("report", str(tmp_path / "demo"))
    assert code == 0, err
    text = " ".join(out.split())
    assert "vllm-dflash-broken sim-a6000-2 vllm dflash 4 0 18.8" in text
    assert "sglang-mtp sim-a6000-1 sglang mtp 10 0 72.5 72.9 55.7 13.72 2.96 ok" in text


def test_report_names_a_summary_it_cannot_read(tmp_path) -> None:
    write_json(tmp_path / "a" / "summary.json", {"schema_version": 99})
    code, _, err = _cli("report", str(tmp_path))
    assert code == 1
    assert "summary.json: not a run result" in err and "newer orch" in err
    assert "Traceback" not in err


def test_report_of_an_empty_folder_is_one_clear_error(tmp_path) -> None:
    code, out, err = _cli("report", str(tmp_path))
    assert code == 1
    assert out == ""
    assert "holds no run results" in err and "Traceback" not in err
