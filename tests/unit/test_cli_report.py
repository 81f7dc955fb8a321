from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import shutil
from pathlib import Path

import pytest

import orchestrator.commands.compare as compare_command_module
import orchestrator.commands.report as report_command_module
from orchestrator.cli.main import run as run_cli
from orchestrator.loadgen.records import Chunk, RequestRecord
from orchestrator.results.frame import COLUMNS
from orchestrator.results.model import RankedCause
from orchestrator.results.report_figures import Plots
from orchestrator.results.store import write_json
from tests.fixtures.run_results import collapse_verdict, make_result, request_stats, write_results
from tests.fixtures.sweep_results import measurement, write_sweep

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


# --- report files, `orch results`, `orch compare` ---------------------------------------------


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports without drawing (the plots have their own tests): these tests are about the CLI."""
    monkeypatch.setattr(report_command_module, "report_figures", lambda frame, **_: Plots())
    monkeypatch.setattr(compare_command_module, "compare_figures", lambda *a: Plots())


def _sweep(folder: Path, out: float = 200.0) -> Path:
    return write_sweep(
        folder,
        [measurement(value=v, index=i, repeats=1, out=out * v) for i, v in enumerate((1, 2))],
    )


def test_report_writes_its_files_and_says_where(tmp_path: Path, no_plots: None) -> None:
    folder = _sweep(tmp_path / "20261202T100000Z-demo")
    code, out, err = _cli("report", str(folder))
    assert code == 0, err
    assert f"report:  {folder / 'report.html'} (0 plots)" in " ".join(out.split("\n"))
    assert (folder / "report.md").is_file()
    code, out, _ = _cli("report", str(folder), "--json")
    assert code == 0
    assert json.loads(out)["report"]["html"] == str(folder / "report.html")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("report", "{tmp}/missing"), 1, "no such results folder"),
        (("report", "{sweep}", "--cdf-at", "x=1"), 1, "not a load point"),
        (("report",), 2, "Missing argument"),
        (("results", "{tmp}/missing"), 1, "no such results folder"),
        (("results",), 1, "no results folder under results"),
        (("compare", "{sweep}"), 1, "needs two results folders or more"),
        (("compare", "{sweep}", "{tmp}/missing"), 1, "no such results folder"),
    ],
)
def test_bad_input_is_one_clear_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_plots: None,
    args: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # `orch results` looks in ./results
    sweep = _sweep(tmp_path / "sweep")
    argv = [a.format(tmp=tmp_path, sweep=sweep) for a in args]
    got, out, err = _cli(*argv)
    assert got == code
    assert message in " ".join(err.split())
    assert "Traceback" not in err and out == ""


def test_results_prints_the_frame_and_its_csv(tmp_path: Path, monkeypatch) -> None:
    older = _sweep(tmp_path / "results" / "20261201T000000Z-demo", out=100.0)
    newest = _sweep(tmp_path / "results" / "20261202T000000Z-demo")
    code, out, err = _cli("results", str(older), "--csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == COLUMNS
    assert [(r["load_value"], r["output_tok_s"], r["output_tok_s_per_gpu"]) for r in rows] == [
        ("1.0", "100.0", "50.0"),
        ("2.0", "200.0", "100.0"),
    ]
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli("results")  # the newest folder under ./results
    assert code == 0, err
    text = " ".join(out.split())
    assert "vllm-dflash h1 vllm dflash c=2 1 ok 400.0 200.0 50.0" in text
    assert str(newest.name) not in text  # one folder: no results column
    code, out, _ = _cli("results", "--all-columns")
    assert code == 0 and "output_tok_s_per_gpu" in out


def test_compare_prints_relative_differences(tmp_path: Path, no_plots: None) -> None:
    a = _sweep(tmp_path / "a")
    b = _sweep(tmp_path / "b", out=208.2)
    code, out, err = _cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    text = " ".join(out.split())
    assert f"A: {a}" in text and f"B: {b}" in text
    assert "vllm-dflash c=1 100.0 104.1 +4.1%" in text
    assert (tmp_path / "cmp" / "compare.html").is_file()
    assert (tmp_path / "cmp" / "compare.md").is_file()


def test_a_sweep_prints_a_row_per_load_point_with_its_interval(
    tmp_path: Path, no_plots: None
) -> None:
    """Repeats 100 and 110 tok/s (mean 105, s 7.07, t(0.975, 1) 12.706: ± 63.5, noisy), and
    200 and 200 (± 0.0)."""
    results = [
        measurement(value=1, index=0, repeat=1, out=100.0),
        measurement(value=1, index=0, repeat=2, out=110.0),
        measurement(value=2, index=1, repeat=1, out=200.0),
        measurement(value=2, index=1, repeat=2, out=200.0),
    ]
    folder = write_sweep(tmp_path / "20261202T100000Z-sweep", results)
    code, out, err = _cli("report", str(folder))
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("c=")}
    assert set(rows) == {"c=1", "c=2"}
    assert "105.0 ±63.5" in rows["c=1"] and "200.0 ±0.0" in rows["c=2"]
    assert "noisy" in out  # the legend under the tables


def test_report_names_and_skips_a_hostile_request_line(tmp_path: Path) -> None:
    """A requests.jsonl line claiming a billion tokens (orch report once died of MemoryError
    on one) or not JSON at all is named file:line in the report and left out; the report is
    written from the rest."""
    folder = _sweep(tmp_path / "20261202T100000Z-demo")
    good = RequestRecord(
        index=0, warmup=False, start=0.0, start_wall=0.0, end=1.0, status=200, ttft=0.1,
        e2el=0.3, chunks=(Chunk(0.1, 1), Chunk(0.3, 2)), output_tokens=3,
        token_count_method="usage", finish_reason="stop",
    )  # fmt: skip
    hostile = dataclasses.replace(
        good, index=1, chunks=(Chunk(0.1, 1), Chunk(0.3, 10**9)), output_tokens=10**9 + 1
    )
    lines = [json.dumps(r.to_json()) for r in (good, hostile)] + ["{not json"]
    paths = sorted(folder.glob("**/summary.json"))
    for summary in paths:
        (summary.parent / "requests.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = _cli("report", str(folder))
    assert code == 0, err
    assert "Traceback" not in err
    md = " ".join((folder / "report.md").read_text().replace("\\", "").split())  # unescaped
    path = folder / "vllm-dflash_h1" / "points" / "01-c2-r1" / "requests.jsonl"  # the CDFs' point
    assert f"{path}:2: skipped: 1000000001 output tokens claimed" in md
    assert f"{path}:3: skipped: not a request record" in md
    assert "per-token ITL distribution" in md  # drawn from the good line
