"""comparison.png: what each bar says (pure specs, from run results) and that many runs stay
readable."""

from __future__ import annotations

import pytest

from orchestrator.metrics.summary import Stats
from orchestrator.results.model import WorkloadSettings
from orchestrator.results.plot import (
    COLLAPSE_COLOR,
    COLLAPSE_HATCH,
    PALETTE,
    acceptance_text,
    bar_specs,
    comparison_figure,
    legend_entries,
    panel_specs,
    render_comparison,
    run_label,
    tick_style,
    workload_line,
)
from tests.fixtures.run_results import WORKLOAD, make_result, request_stats


def result(
    name: str,
    engine: str = "vllm",
    *,
    method: str = "dflash",
    out: float | None = None,
    decode: float | None = None,
    p10: float | None = None,
    p90: float | None = None,
    accept: float | None = None,
    collapse: bool = False,
    error: str | None = None,
    host: str = "h1",
    num_draft_tokens: int | None = 15,
):
    return make_result(
        name,
        engine,
        method=method,
        host=host,
        accept=accept,
        collapse=collapse,
        error=error,
        num_draft_tokens=num_draft_tokens,
        requests=request_stats(out=out, decode=Stats(median=decode, p10=p10, p90=p90)),
    )


DEMO = [
    result(
        "sglang-mtp",
        "sglang",
        method="mtp",
        out=72.5,
        decode=72.9,
        accept=2.9575,
        num_draft_tokens=3,
    ),
    result("vllm-dflash", out=94.7, decode=98.2, p10=90.0, p90=101.5, accept=5.66),
    result(
        "vllm-dflash-broken", out=18.7, decode=18.7, p10=18.0, p90=19.5, accept=1.07, collapse=True
    ),
    result("vllm-oom", error="CUDA out of memory"),
]


def test_collapse_is_hatched_red_and_annotated_failed_says_failed() -> None:
    panels = panel_specs(DEMO)
    assert [title.split("\n")[0] for title, _ in panels] == [
        "Output throughput (tok/s)",
        "Per-request decode speed (tok/s)",
        "Acceptance length (tokens per step)",
    ]
    out, decode, accept = (specs for _, specs in panels)
    mtp, ok, broken, failed = out
    assert (mtp.color, ok.color) == (PALETTE[0], PALETTE[1])  # one colour per configuration
    assert (ok.hatch, ok.text, ok.height) == (None, "94.7", 94.7)
    assert (broken.color, broken.hatch) == (COLLAPSE_COLOR, COLLAPSE_HATCH)
    assert broken.text == "18.7\ncollapse" and broken.text_color == COLLAPSE_COLOR
    assert accept[2].text == "1.07 of max 16\n0.5% accepted\ncollapse"
    assert accept[2].hatch == COLLAPSE_HATCH
    for panel in (out, decode, accept):
        assert (panel[3].text, panel[3].height, panel[3].value) == ("failed", 0.0, None)
        assert panel[3].hatch is None
    # decode speed: the p10-p90 range around the median
    assert (decode[1].err_low, decode[1].err_high) == pytest.approx((8.2, 3.3))
    assert (decode[3].err_low, decode[3].err_high) == (0.0, 0.0)
    assert [s.label for s in out][1:] == [
        "vllm-dflash\nh1",
        "vllm-dflash-broken\nh1",
        "vllm-oom\nh1",
    ]


def test_acceptance_reads_against_its_draft_tokens() -> None:
    """2.96 with 3 draft tokens and 5.66 with 15 are labelled with their maximum and rate, so
    neither reads as the better drafter by its height alone."""
    _, _, accept = (specs for _, specs in panel_specs(DEMO[:2]))
    assert [s.text for s in accept] == [
        "2.96 of max 4\n65% accepted",
        "5.66 of max 16\n31% accepted",
    ]
    assert acceptance_text(result("x", num_draft_tokens=None), 2.5) == "2.50"


def test_plain_and_speculative_runs_of_one_engine_differ_in_colour() -> None:
    runs = [result("plain", method="none", out=40.0), result("dflash", out=90.0, accept=5.0)]
    out = panel_specs(runs)[0][1]
    assert out[0].color != out[1].color
    assert legend_entries(runs) == [
        ("vLLM (no speculation)", PALETTE[0], None),
        ("vLLM DFlash", PALETTE[1], None),
    ]
    assert panel_specs(runs)[2][1][0].text == "n/a"  # no speculation: no acceptance length


def test_unknown_value_says_na() -> None:
    runs = [result("plain", "sglang", out=25.0, decode=25.1)]
    (spec,) = bar_specs(runs, [None])
    assert (spec.text, spec.height, spec.color) == ("n/a", 0.0, PALETTE[0])


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([("a", "vllm", "dflash", False, None)], [("vLLM DFlash", PALETTE[0], None)]),
        # a collapsed run is red whatever its configuration; its configuration is not listed
        (
            [("a", "sglang", "mtp", False, None), ("b", "vllm", "dflash", True, None)],
            [
                ("SGLang MTP", PALETTE[0], None),
                ("acceptance collapse", COLLAPSE_COLOR, COLLAPSE_HATCH),
            ],
        ),
        # a failed run has no bar: its configuration is not listed for it
        (
            [("a", "vllm", "dflash", False, None), ("b", "sglang", "mtp", False, "died")],
            [("vLLM DFlash", PALETTE[0], None)],
        ),
        # order of appearance, each configuration once; an engine or method orch has no name
        # for is shown as written ("unknown": `orch loadgen` against a server that does not say)
        (
            [
                ("a", "sglang", "mtp", False, None),
                ("b", "unknown", "eagle3", False, None),
                ("c", "sglang", "mtp", False, None),
                ("d", "vllm", "medusa", False, None),
            ],
            [
                ("SGLang MTP", PALETTE[0], None),
                ("unknown EAGLE-3", PALETTE[1], None),
                ("vLLM medusa", PALETTE[2], None),
            ],
        ),
    ],
)
def test_legend_lists_only_what_is_drawn(runs, expected) -> None:
    results = [
        result(name, engine, method=method, out=10.0, accept=3.0, collapse=collapse, error=error)
        for name, engine, method, collapse, error in runs
    ]
    assert legend_entries(results) == expected


def test_workload_line_says_what_was_measured() -> None:
    assert workload_line(DEMO) == (
        "workload: builtin:mixed, 10 prompts, concurrency 1, max_tokens 160 (ignore_eos)"
    )
    rate = WorkloadSettings(
        prompts="random", num_prompts=64, concurrency=None, request_rate=4.0, max_tokens=256
    )
    timed = WORKLOAD.model_copy(update={"duration_s": 30.0, "concurrency": 8})
    runs = [
        make_result("a", workload=WORKLOAD),
        make_result("b", workload=rate),
        make_result("c", workload=timed),
    ]
    assert workload_line(runs) == (
        "workload: builtin:mixed / random, 10-64 prompts, 30 s, "
        "concurrency 1 / 4 req/s / concurrency 8, max_tokens 160-256"
    )
    assert workload_line([make_result("old", workload=None)]).startswith("workload: not recorded")


def test_long_matrix_names_break_before_the_brackets() -> None:
    assert run_label("vllm-dflash[concurrency=4,num_draft_tokens=7]", "h") == (
        "vllm-dflash\n[concurrency=4,num_draft_tokens=7]\nh"
    )
    assert run_label("m[c=1]", "h") == "m[c=1]\nh"
    assert tick_style(3).rotation == 20 and tick_style(6).rotation == 90


def test_many_runs_have_no_overlapping_tick_labels() -> None:
    """Seven matrix runs with long names: every panel's labels are drawn side by side."""
    results = [
        result(
            f"vllm-dflash-long-name[concurrency={c}]",
            out=10.0 * c,
            decode=9.0 * c,
            accept=3.0,
            host="sim-a6000-2",
        )
        for c in range(1, 8)
    ]
    results[3] = result("broken[concurrency=4]", out=5.0, decode=5.0, accept=1.02, collapse=True)
    fig = comparison_figure(results, title="matrix")  # its own canvas: no pyplot to close
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
    assert [t.get_text() for t in legend.get_texts()] == ["vLLM DFlash", "acceptance collapse"]
    assert "workload: builtin:mixed, 10 prompts, concurrency 1" in fig._suptitle.get_text()


def test_render_writes_a_png() -> None:
    assert render_comparison(DEMO, title="demo")[:8] == b"\x89PNG\r\n\x1a\n"
