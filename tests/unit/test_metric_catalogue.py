"""The metric catalogue is the one declaration every output reads: each test is built from the
catalogue itself, so a metric added to it but not wired into an output fails here."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli.results import KEY_COLUMNS
from orchestrator.config import nightly_terms as terms
from orchestrator.config import slo as grammar
from orchestrator.metrics import catalogue
from orchestrator.metrics.catalogue import CATALOGUE, Metric
from orchestrator.metrics.energy import window_energy
from orchestrator.metrics.roofline import DecodeShape, RooflineInputs, roofline_point
from orchestrator.metrics.summary import ClientLag, LagStats, Stats
from orchestrator.nightly.record import record_night
from orchestrator.nightly.verdict import Policy, replay
from orchestrator.remote.wire import GpuSample
from orchestrator.results.compare import compare_tables, diff_value
from orchestrator.results.figures.style import metric_name
from orchestrator.results.frame import frame_of
from orchestrator.results.model import RunResult, SloResult
from orchestrator.results.report import summary_row, write_summary_csv
from orchestrator.results.report_doc import build_report, column
from orchestrator.sweep import slo
from tests.fixtures.nightly_histories import row
from tests.fixtures.sweep_results import measurement, write_sweep


def stats(base: float) -> Stats:
    """A distribution whose every statistic is known and distinct."""
    return Stats(n=10, mean=base, median=base * 0.9, p10=base * 0.5, p90=base * 1.5, p99=base * 2)


def full(repeat: int = 1, scale: float = 1.0) -> RunResult:
    """A speculative measurement with SLO targets in which every catalogued metric is known."""
    base = measurement(
        repeat=repeat,
        out=300.0 * scale,
        prompt_tokens=1000,
        output_tokens=3000,
        slo_met=True,
        goodput=2.5 * scale,
    )
    assert base.requests is not None and base.slo is not None
    requests = base.requests.model_copy(
        update={
            "failed": 1,
            "request_throughput": 1.2 * scale,
            "decode_tok_s": stats(110.0 * scale),
            "ttft_ms": stats(40.0 * scale),
            "tpot_ms": stats(9.0 * scale),
            "e2el_ms": stats(900.0 * scale),
            "itl_chunk_ms": stats(12.0 * scale),
            "itl_token_ms": stats(8.0 * scale),
            "client_lag": ClientLag(
                send_lag_ms=LagStats(p99=0.25 * scale), loop_delay_ms=LagStats(p99=3.5 * scale)
            ),
        }
    )
    engine = base.engine_metrics.model_copy(update={"generation_throughput_mean": 280.0 * scale})
    slo_result = SloResult(
        checks=base.slo.checks, met=True, goodput=2.5 * scale, goodput_fraction=0.9
    )
    # a 10 s window on two GPUs at 150 and 250 W, read every 0.1 s with the energy counter
    samples = [
        GpuSample(
            100.0 + i / 10, gpu, 10**6 + int(watts * 100 * i), watts, 1740, 8001, 20480, 97, 60, 0
        )
        for i in range(101)
        for gpu, watts in ((0, 150.0 * scale), (1, 250.0 * scale))
    ]
    energy = window_energy(samples, 100.0, 110.0, output_tokens=3000, total_tokens=4000)
    # an 8B-like model on two 768 GB/s GPUs, a 25 ms step at batch 2
    shape = DecodeShape(weight_bytes=16 * 10**9, kv_bytes_per_token=147_456)
    roofline = roofline_point(
        RooflineInputs(shape, 2, 768.0, "table: RTX A6000"),
        step_ms=25.0 / scale,
        completed=20,
        duration_s=10.0,
        decode_ms_mean=1000.0,
        prompt_tokens=2000,
        output_tokens=3000,
    )
    return base.model_copy(
        update={
            "requests": requests,
            "engine_metrics": engine,
            "slo": slo_result,
            "energy": energy,
            "roofline": roofline,
        }
    )


@pytest.fixture(scope="module")
def result() -> RunResult:
    return full()


def test_every_metric_is_known_of_a_full_measurement(result: RunResult) -> None:
    unknown = [m.name for m in CATALOGUE if m.value(result) is None]
    assert unknown == []


def test_the_catalogue_is_one_consistent_declaration() -> None:
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    aliases = [a for m in CATALOGUE for a in m.aliases]
    assert not set(aliases) & set(names) and len(aliases) == len(set(aliases))
    for m in CATALOGUE:
        assert re.fullmatch(r"[a-z0-9_]+", m.name), m.name
        assert m.header and m.title and m.decimals >= 0 and format(1.5, m.spec)
        if m.slo or m.nightly is not None or m.table is not None:
            assert m.direction is not None, f"{m.name}: an output judges it but it has no direction"
        if m.slo:
            assert m.of_requests is not None, f"{m.name}: an SLO target needs the request reader"
    with pytest.raises(TypeError, match="compute or of_requests"):
        Metric(name="x", header="x", title="x", unit="", direction=None, decimals=1, spec="")
    assert {m.name for m in catalogue.SLO if m.per_request} == {
        f"{lat}_ms_{stat}"
        for lat in ("ttft", "tpot", "itl_token", "e2el")
        for stat in ("mean", "median", "p90", "p99")
    }


def test_summary_csv_offers_every_metric(result: RunResult, tmp_path: Path) -> None:
    path = write_summary_csv(tmp_path / "summary.csv", [result])
    with path.open() as f:
        written = next(csv.DictReader(f))
    row_values = summary_row(result)
    for m in CATALOGUE:
        value = m.value(result)
        assert value is not None
        assert row_values[m.name] == value
        assert float(written[m.name]) == pytest.approx(value, abs=10.0**-m.decimals), m.name


def test_the_dataframe_offers_every_metric(result: RunResult) -> None:
    frame_row = frame_of([("r", result)]).iloc[0]
    for m in CATALOGUE:
        assert frame_row[m.name] == pytest.approx(m.value(result)), m.name
        assert pd.api.types.is_float_dtype(frame_of([("r", result)])[m.name]), m.name


def test_the_nightly_watches_every_nightly_metric(tmp_path: Path) -> None:
    results = [full(repeat=1), full(repeat=2, scale=1.1)]
    rows = record_night(write_sweep(tmp_path / "20261205T000000Z-nightly", results))
    by_metric = {r.metric: r for r in rows}
    for m in catalogue.NIGHTLY:
        watched = terms.metric(m.name)
        assert (watched.direction, watched.unit) == (m.direction, m.unit)
        assert (watched.threshold, watched.absolute) == (m.nightly, m.absolute)
        values = [m.value(r) for r in results]
        assert by_metric[m.name].direction == m.direction
        assert by_metric[m.name].value == pytest.approx(sum(values) / 2), m.name  # type: ignore[arg-type]
    assert [m.name for m in terms.METRICS] == [m.name for m in catalogue.NIGHTLY]


def test_slo_targets_accept_every_slo_metric_with_its_direction(result: RunResult) -> None:
    assert result.requests is not None
    assert set(grammar.METRICS) == set(catalogue.slo_names())
    for m in catalogue.SLO:
        good, bad = ("<=", ">=") if m.direction == "lower" else (">=", "<=")
        for name in (m.name, *m.aliases):
            target = grammar.parse_target(f"{name} {good} 1")
            assert slo.figure(target, result.requests) == m.value(result), name
            assert target.latency == m.per_request
            with pytest.raises(ValueError, match=f"bounded with {good}"):
                grammar.parse_target(f"{name} {bad} 1")
    for m in CATALOGUE:
        if not m.slo:
            with pytest.raises(ValueError, match="unknown metric"):
                grammar.parse_target(f"{m.name} >= 1")


def _headers(tables: object) -> set[str]:
    return {h for t in tables for h in (t.title, *t.columns)}  # type: ignore[attr-defined]


def test_the_report_and_the_console_show_every_table_metric(result: RunResult) -> None:
    document = build_report(frame_of([("r", result)]), figures=())
    shown = _headers(t for s in document.sections for t in s.tables)
    assert {m.header for m in catalogue.TABLE} <= shown
    assert {m.name for m in catalogue.TABLE} <= {name for name, _, _ in KEY_COLUMNS}
    for m in CATALOGUE:
        assert metric_name(m.name) == (m.title, m.unit)


def test_compare_lines_up_every_table_metric(result: RunResult) -> None:
    frame = frame_of([("A", result), ("B", full(scale=1.2))])
    titles = {t.title for t in compare_tables(frame, ["A", "B"])}
    assert {m.header for m in catalogue.TABLE} <= titles


@pytest.mark.parametrize("m", catalogue.TABLE, ids=lambda m: m.name)
def test_compare_colours_a_change_by_the_metrics_direction(m: Metric) -> None:
    def point(value: float) -> pd.Series:
        return pd.Series({f"{m.name}_mean": value, f"{m.name}_noisy": False})

    up = diff_value(column(m), point(100.0), point(120.0))
    assert up.text == "+20.0%"
    assert up.tone == ("good" if m.direction == "higher" else "bad")


@pytest.mark.parametrize("m", catalogue.NIGHTLY, ids=lambda m: m.name)
def test_the_nightly_judges_by_the_metrics_direction(m: Metric) -> None:
    """A move past the threshold in the worse direction is suspicious, in the better one an
    improvement (a failure rate rising is worse still: the night could not be measured)."""
    assert m.nightly is not None
    base = [0.0, 0.0, 0.0] if m.absolute else [100.0, 101.0, 99.0]

    def verdict(sign: int) -> str:
        move = sign * 3 * m.nightly
        tonight = [v + move if m.absolute else v * (1 + move) for v in base]
        nights = [base] * 5 + [tonight]  # 5 nights: the default alpha's t-test decides
        history = [[row(i, m.name, values)] for i, values in enumerate(nights)]
        out = replay(history, Policy(), {}, find=lambda values: None)  # type: ignore[arg-type]
        return out[-1][0].metrics[0].verdict

    worse = 1 if m.direction == "lower" else -1
    if m.absolute:
        assert verdict(worse) == "could_not_measure"
        return
    assert verdict(worse) == "suspicious"
    assert verdict(-worse) == "improvement"


def test_finite_and_ratio_guard_unknowns() -> None:
    assert catalogue.finite(math.inf) is None and catalogue.finite(2) == 2.0
    assert catalogue.ratio(3.0, 0) is None and catalogue.ratio(3.0, 2) == 1.5


def test_every_plotted_figure_is_catalogued() -> None:
    from orchestrator.results.figures import LOAD_METRICS
    from orchestrator.results.report_figures import PLOT_METRICS

    assert set(PLOT_METRICS) | set(LOAD_METRICS) <= set(catalogue.NAMES)
