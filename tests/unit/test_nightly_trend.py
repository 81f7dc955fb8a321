"""A night's trend (``nightly.trend``): the series, band, violations and change point of each
metric the night judged, exactly; its plot (``results/figures/trend``); and the "Nightly trend"
section a report of a night gets (and a report of anything else does not)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands.report import report
from orchestrator.config.nightly_terms import Decision, Verdict
from orchestrator.nightly.history import DecisionRecord, HistoryRow
from orchestrator.nightly.report import JSON_FILE, NightlyVerdict, write_nightly
from orchestrator.nightly.trend import (
    night_trend,
    read_verdict,
    split_labels,
    window,
)
from orchestrator.nightly.verdict import (
    CaseVerdict,
    MetricVerdict,
    Thresholds,
    judge_night,
    settle,
)
from orchestrator.results.figures.style import pyplot
from orchestrator.results.figures.trend import trend_figure, wrap
from orchestrator.results.trend import Band, CaseSummary, NightTrend
from tests.fixtures.night_folders import STEADY, STEP, night_folders
from tests.fixtures.nightly_histories import CASE, START, night_id, row
from tests.fixtures.sweep_results import measurement, write_sweep

N = [night_id(i) for i in range(7)]
AT = datetime(2026, 12, 1, tzinfo=timezone.utc)
# output tok/s: steady, then 10% lower (suspicious, then regression); no failed request ever
NIGHTS = [[100.0, 101.0, 99.0]] * 4 + [[90.0, 91.0, 89.0]] * 2


def history(
    outs: Sequence[list[float]] = NIGHTS,
) -> tuple[list[HistoryRow], list[CaseVerdict]]:
    """The settled rows of every night (as the history stores them) and the last night's cases;
    the change point is put at the fifth measured night (night 4)."""
    done: list[HistoryRow] = []
    cases: list[CaseVerdict] = []
    for i, out in enumerate(outs):
        tonight = [row(i, "output_tok_s", out), row(i, "failure_rate", [0.0, 0.0, 0.0])]
        cases = judge_night(done, {}, tonight, find=lambda values: [4] if len(values) > 4 else None)
        done += settle(tonight, cases)
    return done, cases


def verdict_of(cases: Sequence[CaseVerdict], night: int = 5) -> NightlyVerdict:
    return NightlyVerdict("nightly", N[night], tuple(cases), night_time=START + timedelta(night))


def rejected(*nights: str) -> dict[str, DecisionRecord]:
    return {n: DecisionRecord(n, "reject", AT) for n in nights}


Point = tuple[str, float | None, float | None, Verdict | None, Decision | None, bool]


def points(trend: NightTrend, metric: str) -> list[Point]:
    (case,) = next(m for m in trend.metrics if m.metric == metric).cases
    return [(p.night, p.value, p.spread, p.verdict, p.decision, p.counted) for p in case.points]


def test_a_regression_with_its_series_band_and_where_it_began() -> None:
    rows, cases = history()
    trend = night_trend(verdict_of(cases), rows, rejected(N[2]))
    assert trend.summary == (
        f"REGRESSION (exit 1): playbook nightly, night {N[5]} (2026-11-06 03:00 UTC): "
        "1 regression, 1 ok (1 case)."
    )
    assert (trend.verdict, trend.exit_code, trend.counts) == ("regression", 1, (("regression", 1), ("ok", 1)))  # fmt: skip
    assert trend.cases == (
        CaseSummary(CASE.id, CASE.label, "regression", (("output_tok_s", "regression"),)),
    )
    assert trend.nights == tuple(N[:6]) and trend.notes == ()
    assert [(m.metric, m.verdict, m.common) for m in trend.metrics] == [
        ("output_tok_s", "regression", CASE.label),
        ("failure_rate", "ok", CASE.label),
    ]
    assert points(trend, "output_tok_s") == [
        (N[0], 100.0, 1.0, "insufficient_data", None, True),
        (N[1], 100.0, 1.0, "insufficient_data", None, True),
        (N[2], 100.0, 1.0, "insufficient_data", "reject", False),  # a person rejected it since
        (N[3], 100.0, 1.0, "ok", None, True),
        (N[4], 90.0, 1.0, "suspicious", None, False),
        (N[5], 90.0, 1.0, "regression", None, False),
    ]
    (out,) = trend.metrics[0].cases
    assert out.band == Band(100.0, 95.0, 105.0, 0.05, False, tuple(N[:4]))
    assert (out.violating, out.since, out.change_point) == ((N[4], N[5]), N[4], N[4])
    assert (out.short, out.verdict) == ("", "regression")
    (rate,) = trend.metrics[1].cases
    # an absolute threshold, and a rate never below 0; the ok night 4 joined its baseline
    assert rate.band == Band(0.0, 0.0, 0.01, 0.01, True, tuple(N[:5]))
    assert (rate.violating, rate.since, rate.change_point) == ((), None, None)


def test_tonight_is_the_same_whether_or_not_the_history_holds_it() -> None:
    rows, cases = history()
    verdict = verdict_of(cases)
    kept = [r for r in rows if r.night != N[5]]  # judged again with append=False
    assert night_trend(verdict, kept, {}) == night_trend(verdict, rows, {})


@pytest.mark.parametrize(
    ("decision", "counted"), [(None, False), ("accept", True), ("reject", False)]
)
def test_tonight_outside_the_history_counts_as_its_verdict_and_decision_say(
    decision: Decision | None, counted: bool
) -> None:
    rows, cases = history()
    decisions = {N[5]: DecisionRecord(N[5], decision, AT)} if decision else {}
    trend = night_trend(verdict_of(cases), [r for r in rows if r.night != N[5]], decisions)
    assert points(trend, "output_tok_s")[-1] == (N[5], 90.0, 1.0, "regression", decision, counted)


@pytest.mark.parametrize(
    ("size", "night", "shown"),
    [
        (30, 5, N[:6]),
        (3, 5, N[3:6]),
        (1, 5, N[5:6]),
        (30, 3, N[:4]),  # a report made later: the nights after it are not shown
        (30, 6, N[:7]),  # tonight not in the history (yet): last
    ],
)
def test_the_window_is_the_last_nights_up_to_tonight(
    size: int, night: int, shown: list[str]
) -> None:
    rows, _ = history()
    assert window(rows, N[night], START + timedelta(night), size) == shown


def test_the_window_without_tonights_time_is_the_latest_nights() -> None:
    rows, _ = history()
    assert window(rows, "elsewhere", None, 2) == N[4:6]


def test_a_short_window_keeps_tonights_band_and_marks() -> None:
    rows, cases = history()
    trend = night_trend(verdict_of(cases), rows, {}, size=2)
    (out,) = trend.metrics[0].cases
    assert [p.night for p in out.points] == N[4:6] and out.violating == (N[4], N[5])
    assert out.band is not None and out.band.nights == tuple(N[:4])


def judged(
    metric: str, baseline: float | None, threshold: float | None, **kw: Any
) -> MetricVerdict:
    return MetricVerdict(metric, "higher", "", "ok", "", baseline=baseline, threshold=threshold, **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("metric", "baseline", "recorded", "playbook", "band"),
    [
        ("output_tok_s", 200.0, 0.05, {}, (190.0, 210.0, 0.05)),
        ("output_tok_s", 200.0, 0.05, {"output_tok_s": 0.5}, (190.0, 210.0, 0.05)),  # recorded wins
        ("output_tok_s", 200.0, None, {"output_tok_s": 0.5}, (100.0, 300.0, 0.5)),  # the playbook's
        ("ttft_ms_p99", 800.0, None, {}, (720.0, 880.0, 0.1)),  # the default
        ("acceptance_pos_2", 0.5, None, {"acceptance_pos": 0.2}, (0.4, 0.6, 0.2)),
        ("failure_rate", 0.02, None, {}, (0.01, 0.03, 0.01)),  # a difference, not a ratio
        ("failure_rate", 0.005, 0.01, {}, (0.0, 0.015, 0.01)),  # never below 0
        ("output_tok_s", -10.0, 0.1, {}, (-11.0, -9.0, 0.1)),  # widened by |baseline|
    ],
)
def test_the_band_is_the_baseline_plus_minus_the_threshold(
    metric: str,
    baseline: float,
    recorded: float | None,
    playbook: dict[str, float],
    band: tuple[float, float, float],
) -> None:
    rows, _ = history()
    case = CaseVerdict(CASE, "measured", False, None, rows[0].attributes, (judged(metric, baseline, recorded),))  # fmt: skip
    trend = night_trend(verdict_of([case]), rows, {}, thresholds=Thresholds(playbook))
    found = trend.metrics[0].cases[0].band
    assert found is not None
    assert (found.low, found.high, found.threshold) == pytest.approx(band, abs=1e-12)
    assert found.baseline == baseline


def test_no_baseline_no_band() -> None:
    rows, _ = history()
    case = CaseVerdict(CASE, "measured", False, None, rows[0].attributes, (judged("output_tok_s", None, None),))  # fmt: skip
    assert night_trend(verdict_of([case]), rows, {}).metrics[0].cases[0].band is None


@pytest.mark.parametrize(
    ("labels", "common", "own"),
    [
        (["a · b · c"], "a · b · c", [""]),
        (["a · b · c=1", "a · b · c=8"], "a · b", ["c=1", "c=8"]),
        (["x · m · c=1", "y · m · c=1", "x · m · c=8"], "m", ["x · c=1", "y · c=1", "x · c=8"]),
        (["a", "b"], "", ["a", "b"]),
        ([], "", []),
    ],
)
def test_a_legend_names_what_differs_between_cases(
    labels: list[str], common: str, own: list[str]
) -> None:
    assert split_labels(labels) == (common, own)


def test_two_cases_share_a_plot_each_with_its_own_line() -> None:
    plain = replace(CASE, method="none", draft_model=None, num_draft_tokens=None)
    rows, cases = history()
    rows += [row(i, "output_tok_s", [50.0, 50.0], case=plain) for i in range(6)]
    mine = MetricVerdict("output_tok_s", "higher", "tok/s", "ok", "", value=50.0)
    both = [*cases, CaseVerdict(plain, "measured", False, None, rows[0].attributes, (mine,))]
    out = night_trend(verdict_of(both), rows, {}).metrics[0]
    assert [(c.case_id, c.short, c.verdict) for c in out.cases] == [
        (CASE.id, "vllm dflash (z-lab/Qwen3-8B-DFlash, k=15)", "regression"),
        (plain.id, "vllm", "ok"),
    ]
    assert out.common == "Qwen/Qwen3-8B · TP1 · 1 × NVIDIA RTX A6000 · builtin:mixed out=256 ignore_eos · c=8"  # fmt: skip
    assert [p.value for p in out.cases[1].points] == [50.0] * 6


def test_nightly_json_reads_back_as_its_verdict(tmp_path: Path) -> None:
    _, cases = history()
    verdict = replace(verdict_of(cases), notes=("Apache Otava is not installed",))
    _, path = write_nightly(verdict, tmp_path)
    assert read_verdict(path) == (verdict, Thresholds())
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "thresholds": {"output_tok_s": 0.2}}))
    assert read_verdict(path) == (verdict, Thresholds({"output_tok_s": 0.2}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot read"),
        ("[]", "not a nightly verdict (not a JSON object)"),
        ('{"night": "N"}', "not a nightly verdict (no 'playbook')"),
        ('{"playbook": "p", "night": "N", "cases": [{"status": "x"}]}', "validation error"),
        ('{"playbook": "p", "night": "N", "thresholds": {"nope": 1}}', "unknown nightly metric"),
    ],
)
def test_a_nightly_json_that_is_not_one_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / JSON_FILE
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_verdict(path)


def by_gid(artists: Any, prefix: str) -> dict[str, Any]:
    return {
        str(a.get_gid())[len(prefix) :]: a for a in artists if str(a.get_gid()).startswith(prefix)
    }


def test_the_plot_draws_the_line_band_red_and_grey_nights_and_the_shift() -> None:
    rows, cases = history()
    trend = night_trend(verdict_of(cases), rows, rejected(N[2]))
    fig = trend_figure(trend.metrics[0], nights=trend.nights)
    try:
        (ax,) = fig.axes
        line = by_gid(ax.lines, "line:")[CASE.id]
        assert list(line.get_ydata()) == [100.0] * 4 + [90.0] * 2
        red = by_gid(ax.collections, "violated:")[CASE.id].get_offsets()
        grey = by_gid(ax.collections, "greyed:")[CASE.id].get_offsets()
        assert [y for _, y in red] == [90.0, 90.0] and [y for _, y in grey] == [100.0]
        assert CASE.id in by_gid(ax.collections, "band:")
        assert CASE.id in by_gid(ax.lines, "since:")  # since = change point: one line
        assert not by_gid(ax.lines, "change-point:")
        texts = [t.get_text() for t in ax.texts]
        assert texts == [" since = change point"]
        assert (
            fig.texts[0]
            .get_text()
            .startswith("Nightly trend: output_tok_s — tonight regression — last 6 nights")
        )
    finally:
        pyplot().close(fig)


@pytest.mark.parametrize(
    ("label", "width", "wrapped"),
    [
        ("a · b · c", 100, "a · b · c"),
        ("aaaa · bbbb · cc", 11, "aaaa · bbbb\ncc"),
        ("aaaa · bbbb", 3, "aaaa\nbbbb"),
        ("", 10, ""),
    ],
)
def test_a_long_case_label_is_broken_between_its_parts(label: str, width: int, wrapped: str) -> None:  # fmt: skip
    assert wrap(label, width) == wrapped


def figure_ids(html: str) -> list[str]:
    return re.findall(r'<figure id="([^"]+)"', html)


def test_the_report_of_a_night_starts_with_its_trend(tmp_path: Path) -> None:
    *_, folder = night_folders(tmp_path / "results", [STEADY] * 4 + [STEP, STEP])
    doc = json.loads((folder / JSON_FILE).read_text())
    judged = [m["metric"] for m in doc["cases"][0]["metrics"]]
    done = report([folder])
    html = done.written.html.read_text()
    trends = [f for f in figure_ids(html) if f.startswith("trend-")]
    assert trends == [f"trend-{m}" for m in judged] and len(judged) == 8
    assert done.plots == len(figure_ids(html)) == len(judged) + 4  # pareto x2, by-load, acceptance
    headings = re.findall(r"<h2>([^<]+)</h2>", html)
    assert headings[0] == "Nightly trend" and headings[1] == "Setup"
    assert "<p>REGRESSION (exit 1): playbook nightly, night " in html
    assert '<td class="bad text">regression</td>' in html
    md = done.written.markdown.read_text()
    assert md.index("## Nightly trend") < md.index("## Setup")
    assert "![output_tok_s over the last 6 nights: tonight regression](report-files/trend-output_tok_s.png)" in md  # fmt: skip
    assert {p.name for p in done.written.images} >= {f"trend-{m}.png" for m in judged}


def test_the_report_of_an_ordinary_folder_has_no_trend(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path / "20261202T100000Z-demo", [measurement(repeat=1), measurement(repeat=2)])  # fmt: skip
    html = report([folder]).written.html.read_text()
    assert "Nightly trend" not in html
    assert not [f for f in figure_ids(html) if f.startswith("trend-")]


def test_a_night_whose_verdict_cannot_be_read_still_gets_its_report(tmp_path: Path) -> None:
    (folder,) = night_folders(tmp_path / "results", [STEADY])
    (folder / JSON_FILE).chmod(0o644)
    (folder / JSON_FILE).write_text("[]")
    html = report([folder]).written.html.read_text()
    assert re.findall(r"<h2>([^<]+)</h2>", html)[0] == "Nightly trend"
    assert "no trend: " in html and "is not a nightly verdict (not a JSON object)" in html
    assert not [f for f in figure_ids(html) if f.startswith("trend-")]


def test_a_night_without_its_history_shows_tonight_alone(tmp_path: Path) -> None:
    (folder,) = night_folders(tmp_path / "results", [STEADY])
    history = tmp_path / "results" / "history" / "nightly.jsonl"
    history.unlink()
    html = report([folder]).written.html.read_text()
    assert f"no nightly history in {history}: tonight alone is shown" in html
    assert len([f for f in figure_ids(html) if f.startswith("trend-")]) == 8
