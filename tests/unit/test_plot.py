"""comparison.png: what each bar says (pure specs) and that many runs stay readable."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.results.plot import (
    COLLAPSE_COLOR,
    COLLAPSE_HATCH,
    ENGINE_COLORS,
    bar_specs,
    comparison_figure,
    legend_entries,
    panel_specs,
    render_comparison,
    run_label,
    tick_style,
)
from orchestrator.results.report import summary_row


def summary(run: str, engine: str, *, out: float | None = None, decode: float | None = None,
            p10: float | None = None, p90: float | None = None, accept: float | None = None,
            collapse: bool = False, error: str | None = None, host: str = "h1") -> dict[str, Any]:
    return {
        "run": run, "host": host, "engine": engine, "method": "dflash",
        "requests": None if error else {
            "completed": 4, "failed": 0, "output_throughput": out,
            "decode_tok_s": {"median": decode, "p10": p10, "p90": p90}},
        "acceptance": None if error else {"length": accept},
        "collapse": {"message": "speculation collapsed"} if collapse else None,
        "error": {"message": error} if error else None,
    }


DEMO = [
    summary("vllm-dflash", "vllm", out=94.7, decode=98.2, p10=90.0, p90=101.5, accept=5.66),
    summary("vllm-dflash-broken", "vllm", out=18.7, decode=18.7, p10=18.0, p90=19.5, accept=1.07,
            collapse=True),
    summary("vllm-oom", "vllm", error="CUDA out of memory"),
]


def test_collapse_is_hatched_red_and_annotated_failed_says_failed() -> None:
    rows = [summary_row(s) for s in DEMO]
    panels = panel_specs(rows)
    assert [title.split("\n")[0] for title, _ in panels] == [
        "Output throughput (tok/s)", "Per-request decode speed (tok/s)", "Acceptance length"]
    out, decode, accept = (specs for _, specs in panels)
    ok, broken, failed = out
    assert (ok.color, ok.hatch, ok.text, ok.height) == (ENGINE_COLORS["vllm"], None, "94.7", 94.7)
    assert (broken.color, broken.hatch) == (COLLAPSE_COLOR, COLLAPSE_HATCH)
    assert broken.text == "18.7\ncollapse" and broken.text_color == COLLAPSE_COLOR
    assert accept[1].text == "1.07\ncollapse" and accept[1].hatch == COLLAPSE_HATCH
    assert accept[0].text == "5.66"
    for panel in (out, decode, accept):
        assert (panel[2].text, panel[2].height, panel[2].value) == ("failed", 0.0, None)
        assert panel[2].hatch is None
    # decode speed: the p10-p90 range around the median
    assert (decode[0].err_low, decode[0].err_high) == pytest.approx((8.2, 3.3))
    assert (decode[2].err_low, decode[2].err_high) == (0.0, 0.0)
    assert [s.label for s in out] == ["vllm-dflash\nh1", "vllm-dflash-broken\nh1", "vllm-oom\nh1"]


def test_unknown_value_says_na() -> None:
    rows = [summary_row(summary("plain", "sglang", out=25.0, decode=25.1))]
    (spec,) = bar_specs(rows, [None], fmt="{:.2f}")
    assert (spec.text, spec.height, spec.color) == ("n/a", 0.0, ENGINE_COLORS["sglang"])


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        # only vLLM runs: no SGLang entry
        ([("a", "vllm", False, None)], [("vllm", ENGINE_COLORS["vllm"], None)]),
        # a collapsed vLLM run is red whatever its engine; SGLang listed, vLLM not
        ([("a", "sglang", False, None), ("b", "vllm", True, None)],
         [("sglang", ENGINE_COLORS["sglang"], None),
          ("acceptance collapse", COLLAPSE_COLOR, COLLAPSE_HATCH)]),
        # a failed run has no bar: its engine is not listed for it
        ([("a", "vllm", False, None), ("b", "sglang", False, "died")],
         [("vllm", ENGINE_COLORS["vllm"], None)]),
        # order of appearance, an engine without a colour of its own in grey
        ([("a", "sglang", False, None), ("b", "trtllm", False, None), ("c", "sglang", False, None)],
         [("sglang", ENGINE_COLORS["sglang"], None), ("trtllm", "#777777", None)]),
    ],
)
def test_legend_lists_only_what_is_drawn(runs, expected) -> None:
    rows = [summary_row(summary(name, engine, out=10.0, collapse=collapse, error=error))
            for name, engine, collapse, error in runs]
    assert legend_entries(rows) == expected


def test_long_matrix_names_break_before_the_brackets() -> None:
    assert run_label({"run": "vllm-dflash[concurrency=4,num_draft_tokens=7]", "host": "h"}) == (
        "vllm-dflash\n[concurrency=4,num_draft_tokens=7]\nh")
    assert run_label({"run": "m[c=1]", "host": "h"}) == "m[c=1]\nh"
    assert tick_style(3).rotation == 20 and tick_style(6).rotation == 90


def test_many_runs_have_no_overlapping_tick_labels() -> None:
    """Seven matrix runs with long names: every panel's labels are drawn side by side."""
    summaries = [summary(f"vllm-dflash-long-name[concurrency={c}]", "vllm", out=10.0 * c,
                         decode=9.0 * c, accept=3.0, host="sim-a6000-2") for c in range(1, 8)]
    summaries[3] = summary("broken[concurrency=4]", "vllm", out=5.0, decode=5.0, accept=1.02,
                           collapse=True)
    fig = comparison_figure(summaries, title="matrix")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
            assert len(boxes) == 7
            for left, right in zip(boxes, boxes[1:], strict=False):
                assert left.x1 <= right.x0, f"tick labels overlap in {ax.get_title()!r}"
            hatched = [p.get_hatch() for p in ax.patches]
            assert hatched[3] == COLLAPSE_HATCH and hatched.count(COLLAPSE_HATCH) == 1
        legend = fig.legends[0]
        assert [t.get_text() for t in legend.get_texts()] == ["vllm", "acceptance collapse"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_render_writes_a_png() -> None:
    assert render_comparison(DEMO, title="demo")[:8] == b"\x89PNG\r\n\x1a\n"
