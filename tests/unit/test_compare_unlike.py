"""Issue 20, item 9: `orch compare` and `results.load()` never put unlike workloads or models
side by side silently. Results folders are real files on disk, read by the CLI."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

import orchestrator.commands.compare as compare_command_module
from orchestrator.cli.main import run as run_cli
from orchestrator.results import load
from orchestrator.results.likeness import differences
from orchestrator.results.model import RunResult
from orchestrator.results.report_figures import Plots
from tests.fixtures.sweep_results import measurement, write_sweep

SHA_A, SHA_B = "a" * 64, "b" * 64


@pytest.fixture(autouse=True)
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Comparisons without drawing (the plots have their own tests)."""
    monkeypatch.setattr(compare_command_module, "compare_figures", lambda *a: Plots())


def changed(result: RunResult, model: str | None = None, **workload: Any) -> RunResult:
    settings = result.settings
    assert settings.workload is not None
    update: dict[str, Any] = {"workload": settings.workload.model_copy(update=workload)}
    if model is not None:
        update["model"] = model
    return result.model_copy(update={"settings": settings.model_copy(update=update)})


def sweep(folder: Path, out: float, model: str | None = None, **workload: Any) -> Path:
    results = [
        changed(measurement(value=v, index=i, repeats=1, out=out * v), model, **workload)
        for i, v in enumerate((1, 2))
    ]
    return write_sweep(folder, results)


def compare(tmp_path: Path, a: Path, b: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert code == 0, err.getvalue()
    return " ".join(out.getvalue().split())


def test_another_max_tokens_is_not_compared_and_the_difference_is_named(tmp_path: Path) -> None:
    a = sweep(tmp_path / "demo", 200.0, max_tokens=160)
    b = sweep(tmp_path / "sweep-demo", 185.8, max_tokens=96)
    text = compare(tmp_path, a, b)
    assert "%" not in text.split("Not compared")[1].split("mean over repeats")[0]
    assert "vllm-dflash c=1 100.0 92.9 not compared: max_tokens differ" in text
    assert "vllm-dflash c=1 B vs A max_tokens 160 vs 96" in text
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "-7.1%" not in md and "max_tokens 160 vs 96" in md


def test_another_model_under_the_same_run_names_is_not_compared(tmp_path: Path) -> None:
    a = sweep(tmp_path / "big", 100.0, model="Qwen/Qwen3.6-27B")
    b = sweep(tmp_path / "small", 200.0, model="Qwen/Qwen3-0.6B")
    text = compare(tmp_path, a, b)
    assert "+100.0%" not in text
    assert "model Qwen/Qwen3.6-27B vs Qwen/Qwen3-0.6B" in text


def test_prompts_are_told_by_content_where_both_recorded_it(tmp_path: Path) -> None:
    base = sweep(tmp_path / "a", 200.0, prompts="p.jsonl", prompts_sha256=SHA_A)
    renamed = sweep(tmp_path / "b", 208.2, prompts="q.jsonl", prompts_sha256=SHA_A)
    text = compare(tmp_path, base, renamed)
    assert "vllm-dflash c=1 100.0 104.1 +4.1%" in text and "Not compared" not in text

    rewritten = sweep(tmp_path / "c", 208.2, prompts="p.jsonl", prompts_sha256=SHA_B)
    text = compare(tmp_path, base, rewritten)
    assert "+4.1%" not in text
    assert f"prompts_sha256 {SHA_A[:12]}… vs {SHA_B[:12]}…" in text
    # an older result, without the content: told by name only
    older = sweep(tmp_path / "d", 208.2, prompts="p.jsonl", prompts_sha256=None)
    assert "+4.1%" in compare(tmp_path, base, older)


def test_the_frame_has_the_workload_columns(tmp_path: Path) -> None:
    sweep(tmp_path / "a", 200.0, max_tokens=160, prompts="p.jsonl", prompts_sha256=SHA_A)
    sweep(tmp_path / "b", 200.0, max_tokens=96, temperature=0.7, seed=5)
    frame = load(tmp_path)
    by_folder = frame.groupby("results_dir")
    a, b = (by_folder.get_group(str(tmp_path / n)) for n in ("a", "b"))
    assert set(a["max_tokens"]) == {160} and set(b["max_tokens"]) == {96}
    assert set(a["prompts"]) == {"p.jsonl"} and set(a["prompts_sha256"]) == {SHA_A}
    assert list(b["prompts_sha256"]) == [None, None] and set(b["prompts"]) == {"builtin:mixed"}
    assert set(b["temperature"]) == {0.7} and set(b["seed"]) == {5}
    assert set(a["api"]) == {"chat"} and bool(a["ignore_eos"].all())
    assert str(frame["max_tokens"].dtype) == "Int64"
    assert len(frame.groupby(["model", "prompts", "max_tokens"])) == 2


def test_differences_leave_out_what_a_comparison_is_for() -> None:
    base = {"model": "m", "prompts": "p", "prompts_sha256": None, "max_tokens": 8}
    assert differences(base, dict(base)) == []
    assert differences(base, {**base, "max_tokens": 9}) == ["max_tokens 8 vs 9"]


def test_summary_csv_records_the_prompts_content(tmp_path: Path) -> None:
    import csv

    from orchestrator.results.report import write_summary_csv

    result = changed(measurement(value=1), prompts="p.jsonl", prompts_sha256=SHA_A)
    path = write_summary_csv(tmp_path / "summary.csv", [result])
    (row,) = csv.DictReader(path.open())
    assert (row["prompts"], row["prompts_sha256"], row["max_tokens"]) == ("p.jsonl", SHA_A, "160")
