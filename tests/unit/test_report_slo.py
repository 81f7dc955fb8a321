"""The SLO search's answer where a person looks: read back from slo-search.json (the newest
session's; none, with why, when the search did not end or its file is broken), in report.md and
report.html with the sentence on verdict vs SLO met, on the console of `orch report`, and on the
Pareto plot (target line, missed points crossed, the answer starred)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from orchestrator.cli.main import run as run_cli
from orchestrator.results.figures.pareto import pareto_figure
from orchestrator.results.figures.slo import SloMarks
from orchestrator.results.frame import frame_of
from orchestrator.results.model import RunResult
from orchestrator.results.report import load_results
from orchestrator.results.report_doc import SLO_VERDICT_NOTE, build_report
from orchestrator.results.report_figures import slo_marks
from orchestrator.results.report_html import render_html
from orchestrator.results.report_markdown import render_markdown
from orchestrator.results.slo_answer import slo_answers, slo_targets
from orchestrator.results.stats import aggregate
from tests.fixtures.sweep_results import measurement, write_sweep

TARGET = "tpot_ms_median <= 30"  # the fixture's one check
EXPLAIN = "highest concurrency meeting every target: 8 (c=16 missed tpot_ms_median <= 30)"
RUN_DIR = "vllm-dflash_h1"


def searched(folder: Path, *, write: bool = True) -> list[RunResult]:
    """A sweep of c=1, 4, then the search's c=8 (met) and c=16 (missed); its file."""
    results = []
    for i, (value, tpot) in enumerate(((1, 10.0), (4, 20.0), (8, 25.0), (16, 40.0))):
        r = measurement(value=value, index=i, repeats=1, tpot=tpot, slo_met=tpot <= 30)
        if value > 4:
            assert r.point is not None
            r = r.model_copy(update={"point": r.point.model_copy(update={"origin": "slo_search"})})
        results.append(r)
    write_sweep(folder, results)
    if write:
        search = {"kind": "concurrency", "targets": [TARGET], "best": 8.0, "explain": EXPLAIN}
        (folder / RUN_DIR / "slo-search.json").write_text(json.dumps({**search, "points": []}))
    return load_results(folder)


def test_the_answer_is_read_from_the_newest_session(tmp_path: Path) -> None:
    results = searched(tmp_path)
    (answer,) = slo_answers(tmp_path, results)
    assert (answer.run, answer.host, answer.best, answer.label) == ("vllm-dflash", "h1", 8.0, "c=8")
    assert answer.detail == EXPLAIN and answer.targets == (TARGET,)
    again = {"kind": "concurrency", "targets": [TARGET], "best": 12, "explain": "twelve"}
    (tmp_path / RUN_DIR / "slo-search-2.json").write_text(json.dumps(again))
    (answer,) = slo_answers(tmp_path, results)
    assert (answer.best, answer.detail) == (12.0, "twelve")


def test_a_search_that_did_not_end_has_no_answer(tmp_path: Path) -> None:
    (answer,) = slo_answers(tmp_path, searched(tmp_path, write=False))
    assert answer.best is None and answer.label == "none"
    assert "stopped before it ended" in answer.detail and "--resume" in answer.detail


def test_a_run_without_a_search_has_no_entry(tmp_path: Path) -> None:
    results = [measurement(value=v, index=i, repeats=1, slo_met=True) for i, v in enumerate((1, 2))]
    write_sweep(tmp_path, results)
    assert slo_answers(tmp_path, load_results(tmp_path)) == []


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "cannot be read"),
        ('{"kind": "tokens", "explain": "x", "best": 3}', "'kind' is 'tokens'"),
        ('{"kind": "concurrency", "explain": "x", "best": "many"}', "'best' is 'many'"),
        ('{"kind": "concurrency", "explain": "x", "best": -1}', "not a load"),
        ("[]", "not a JSON object"),
    ],
)
def test_a_broken_search_file_is_named_not_trusted(tmp_path: Path, content: str, why: str) -> None:
    results = searched(tmp_path)
    (tmp_path / RUN_DIR / "slo-search.json").write_text(content)
    (answer,) = slo_answers(tmp_path, results)
    assert answer.best is None
    assert why in answer.detail and f"slo-search.json in {RUN_DIR}" in answer.detail


def test_report_md_and_html_give_the_answer_and_explain_the_verdict(tmp_path: Path) -> None:
    results = searched(tmp_path)
    frame = frame_of((str(tmp_path), r) for r in results)
    doc = build_report(frame, [], answers=slo_answers(tmp_path, results))
    markdown = render_markdown(doc, "report-files")
    assert "## SLO search" in markdown
    assert "| vllm-dflash | h1 | c=8 | highest concurrency meeting every target: 8 " in markdown
    assert SLO_VERDICT_NOTE in markdown  # one sentence, beside the verdict column's table
    html = render_html(doc)
    assert "<h2>SLO search</h2>" in html
    assert "highest concurrency meeting every target: 8 (c=16 missed" in html
    assert "not whether it met the SLO" in html


def test_orch_report_prints_the_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.commands import report as report_command_module
    from orchestrator.results.report_figures import Plots

    monkeypatch.setattr(report_command_module, "report_figures", lambda frame, **_: Plots())
    searched(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert run_cli(["report", str(tmp_path)]) == 0
    text = " ".join(out.getvalue().split())
    assert f"SLO search ({TARGET}): vllm-dflash on h1: c=8 {EXPLAIN}" in text
    assert "not whether it met the SLO" in text


def test_the_pareto_plot_draws_the_slo_and_stars_the_answer(tmp_path: Path) -> None:
    results = searched(tmp_path)
    frame = frame_of((str(tmp_path), r) for r in results)
    marks = slo_marks(frame, slo_targets(results), slo_answers(tmp_path, results))
    assert marks.answers == {(str(tmp_path), "vllm-dflash@h1"): 8.0}
    assert marks.missed == {(str(tmp_path), "vllm-dflash@h1", 16.0)}
    agg = aggregate(frame, ("interactivity", "output_tok_s_per_gpu"))
    fig = pareto_figure(agg, slo=marks)
    try:
        (ax,) = fig.axes
        (line,) = [ln for ln in ax.lines if ln.get_gid() == f"slo:{TARGET}"]
        assert list(line.get_xdata()) == pytest.approx([1000 / 30] * 2)  # interactivity >= 33.3
        shade = [p for p in ax.patches if p.get_gid() == f"miss:{TARGET}"]
        assert len(shade) == 1
        gids = {str(c.get_gid()): c for c in ax.collections}
        star = gids["slo-answer:vLLM DFlash"].get_offsets()
        assert list(star.ravel()) == pytest.approx([1000 / 25, 50.0])  # c=8: tpot 25, 100/2 GPUs
        crossed = gids["missed:vLLM DFlash"].get_offsets()
        assert list(crossed.ravel()) == pytest.approx([1000 / 40, 50.0])  # c=16 only
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert f"SLO {TARGET} (shaded: misses it)" in texts
        assert "SLO search answer: highest load meeting every target" in texts
    finally:
        plt.close(fig)


def test_targets_off_these_axes_are_named_not_drawn() -> None:
    frame = frame_of([("r", measurement(value=1, repeats=1, slo_met=True))])
    agg = aggregate(frame, ("interactivity", "output_tok_s_per_gpu"))
    fig = pareto_figure(agg, slo=SloMarks(targets=("ttft_ms_p99 <= 500",)))
    try:
        assert not [ln for ln in fig.axes[0].lines if str(ln.get_gid()).startswith("slo:")]
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "SLO ttft_ms_p99 <= 500: not on these axes" in texts
    finally:
        plt.close(fig)
