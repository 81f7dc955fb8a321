"""The sweep plots (orchestrator.results.figures): what each figure draws, read back from its
matplotlib artists (line data, markers, colours, labels), never from pixels."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib
import numpy
import pandas as pd
import pytest

from orchestrator.errors import OrchError
from orchestrator.metrics.summary import request_stats
from orchestrator.remote.wire import Chunk, RequestFailure, RequestRecord
from orchestrator.results.figures import (
    acceptance_figure,
    acceptance_plot,
    cdf_figure,
    cdf_plot,
    figure_colors,
    load_figure,
    load_plot,
    measurement_spans,
    pareto_figure,
    pareto_plot,
    request_latencies,
    setup_line,
    timeline_figure,
    timeline_plot,
)
from orchestrator.results.figures.acceptance import mean_positions
from orchestrator.results.figures.latency import ecdf, thinned
from orchestrator.results.figures.style import keyed_series, legend_columns, legend_key, statistic
from orchestrator.results.figures.timeline import log_seconds, metric_points
from orchestrator.results.plot import PALETTE, palette
from orchestrator.results.stats import aggregate

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METRICS = [
    "interactivity",
    "output_tok_s_per_gpu",
    "output_tok_s",
    "tpot_ms_median",
    "ttft_ms_p99",
    "acceptance_length",
]
DFLASH, MTP, PLAIN = "vLLM DFlash", "SGLang MTP", "vLLM (no speculation)"


def row(config: str, key: str, value: float, **figures: Any) -> dict[str, Any]:
    """One measurement's row with the columns the figures read."""
    engine, _, method = config.partition(" ")
    base: dict[str, Any] = {
        "results_dir": "results/a",
        "key": key,
        "run": key.split("@")[0],
        "host": key.split("@")[1],
        "config": config,
        "engine": engine,
        "method": method or "none",
        "model": "Qwen/Qwen3.6-27B",
        "gpu_name": "NVIDIA RTX A6000",
        "gpu_count": 2,
        "load_kind": "concurrency",
        "load_value": float(value),
        "verdict": "ok",
        "not_run": False,
        "noisy_ci": 0.1,
        "acceptance_per_position": None,
        "acceptance_source": "prometheus" if method else None,
    }
    base.update({m: float("nan") for m in METRICS})
    return base | figures


def repeats(config: str, key: str, value: float, n: int = 2, **figures: Any) -> list[dict]:
    """``n`` repeats of a point; a figure given as a list has one value per repeat."""
    return [
        row(
            config,
            key,
            value,
            **{k: v[i] if isinstance(v, list) else v for k, v in figures.items()},
        )
        for i in range(n)
    ]


# (config, key, concurrency, interactivity, throughput per GPU): A's c=4 is dominated by its c=2
POINTS = [
    ("vllm dflash", "a@h1", 1, 100.0, 50.0),
    ("vllm dflash", "a@h1", 2, 80.0, 90.0),
    ("vllm dflash", "a@h1", 4, 60.0, 85.0),
    ("vllm dflash", "a@h1", 8, 40.0, [100.0, 200.0]),  # noisy: 150 +- 635
    ("sglang mtp", "b@h2", 1, 70.0, 40.0),
    ("sglang mtp", "b@h2", 2, 60.0, 70.0),
    ("sglang mtp", "b@h2", 4, 50.0, 100.0),
    ("vllm", "c@h1", 1, 30.0, 20.0),
    ("vllm", "c@h1", 2, 25.0, 35.0),
]


def frame_of(points: list = POINTS, **extra: Any) -> pd.DataFrame:
    rows = []
    for config, key, c, x, y in points:
        accept = 3.0 if config != "vllm" else float("nan")
        rows += repeats(
            config, key, c, interactivity=x, output_tok_s_per_gpu=y, output_tok_s=c * 10.0,
            tpot_ms_median=[10.0 + c, 12.0 + c], ttft_ms_p99=100.0, acceptance_length=accept,
            **extra,
        )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture
def frame() -> pd.DataFrame:
    return frame_of()


@pytest.fixture
def agg(frame: pd.DataFrame) -> pd.DataFrame:
    return aggregate(frame, METRICS)


@pytest.fixture(autouse=True)
def close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def by_gid(artists: Any, prefix: str) -> dict[str, Any]:
    return {
        str(a.get_gid())[len(prefix) :]: a for a in artists if str(a.get_gid()).startswith(prefix)
    }


def xy(line: Any) -> list[tuple[float, float]]:
    return list(zip(map(float, line.get_xdata()), map(float, line.get_ydata()), strict=True))


def offsets(collection: Any) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in collection.get_offsets()]


def legend_texts(fig: Any) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


# ------------------------------------------------------------------------------- pareto


def test_pareto_draws_each_configurations_front(agg: pd.DataFrame) -> None:
    ax = pareto_figure(agg).axes[0]
    fronts = by_gid(ax.lines, "front:")
    assert sorted(fronts) == sorted([DFLASH, MTP, PLAIN])
    assert xy(fronts[DFLASH]) == [(40.0, 150.0), (80.0, 90.0), (100.0, 50.0)]  # c=4 dominated
    assert xy(fronts[MTP]) == [(50.0, 100.0), (60.0, 70.0), (70.0, 40.0)]
    assert xy(fronts[PLAIN]) == [(25.0, 35.0), (30.0, 20.0)]


def test_pareto_draws_every_point_noisy_ones_hollow(agg: pd.DataFrame) -> None:
    fig = pareto_figure(agg)
    ax = fig.axes[0]
    points, noisy = by_gid(ax.collections, "points:"), by_gid(ax.collections, "noisy:")
    assert sorted(offsets(points[DFLASH])) == [(60.0, 85.0), (80.0, 90.0), (100.0, 50.0)]
    assert offsets(noisy[DFLASH]) == [(40.0, 150.0)]
    assert list(noisy) == [DFLASH]
    assert noisy[DFLASH].get_facecolors().size == 0  # hollow: no face
    assert "hollow: noisy (95% CI wider than ±10% of the mean)" in legend_texts(fig)


def test_pareto_error_bars_are_the_95_percent_interval(agg: pd.DataFrame) -> None:
    ax = pareto_figure(agg).axes[0]
    bars = [c for c in ax.collections if c.get_gid() == f"ci:{DFLASH}"]
    assert len(bars) == 2  # x and y bars of the one point with a spread
    point = agg[(agg["key"] == "a@h1") & (agg["load_value"] == 8)].iloc[0]
    (segment,) = bars[1].get_segments()
    assert segment[:, 1].tolist() == pytest.approx(
        [point["output_tok_s_per_gpu_low"], point["output_tok_s_per_gpu_high"]]
    )
    assert point["output_tok_s_per_gpu_high"] - 150.0 == pytest.approx(12.706204736 * 50.0)
    assert not [c for c in ax.collections if c.get_gid() == f"ci:{MTP}"]  # no spread: no bar


def test_pareto_labels_every_point_with_its_load(agg: pd.DataFrame) -> None:
    ax = pareto_figure(agg).axes[0]
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(["c=1", "c=2", "c=4", "c=8", "c=1", "c=2", "c=4", "c=1", "c=2"])


def test_pareto_titles_say_what_on_what_and_which_statistic(agg: pd.DataFrame) -> None:
    fig = pareto_figure(agg)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Interactivity (tok/s/user = 1000 / median TPOT)"
    assert ax.get_ylabel() == "Output throughput per GPU (tok/s/GPU)"
    assert fig.get_suptitle() == (
        "Output throughput per GPU vs interactivity, Pareto front per configuration — "
        "Qwen3.6-27B, 2 × RTX A6000\nmean of 2 repeats, 95% CI"
    )
    assert legend_texts(fig)[:3] == [DFLASH, MTP, PLAIN]


def test_pareto_of_total_throughput(agg: pd.DataFrame, frame: pd.DataFrame) -> None:
    frame["total_tok_s_per_gpu"] = frame["output_tok_s_per_gpu"] * 2
    fig = pareto_figure(
        aggregate(frame, ["interactivity", "total_tok_s_per_gpu"]), y="total_tok_s_per_gpu"
    )
    assert fig.axes[0].get_ylabel() == "Total throughput per GPU (tok/s/GPU)"
    with pytest.raises(ValueError, match="no total_tok_s_per_gpu_mean"):
        pareto_figure(agg, y="total_tok_s_per_gpu")


def test_a_failed_point_is_left_out_and_a_failed_run_named(frame: pd.DataFrame) -> None:
    frame.loc[frame["key"] == "c@h1", "verdict"] = "failed"
    frame.loc[(frame["key"] == "a@h1") & (frame["load_value"] == 1), "verdict"] = "failed"
    fig = pareto_figure(aggregate(frame, METRICS))
    fronts = by_gid(fig.axes[0].lines, "front:")
    assert sorted(fronts) == [MTP, DFLASH] and (100.0, 50.0) not in xy(fronts[DFLASH])
    assert fig.get_suptitle().endswith(f"; no measured point: {PLAIN}")
    assert PLAIN not in legend_texts(fig)


def test_one_measurement_per_point_has_no_error_bars(frame: pd.DataFrame) -> None:
    single = frame.drop_duplicates(["key", "load_value"])
    fig = pareto_figure(aggregate(single, METRICS))
    assert not by_gid(fig.axes[0].collections, "ci:")
    assert fig.get_suptitle().endswith("one measurement per point")


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        ([2, 2], "mean of 2 repeats, 95% CI"),
        ([1, 3, 2], "mean of 1–3 repeats, 95% CI"),
        ([1, 1], "one measurement per point"),
        ([0, float("nan")], "one measurement per point"),
    ],
)
def test_statistic_words(counts: list[float], words: str) -> None:
    assert statistic(counts) == words


# ------------------------------------------------------------------------------ colours


def test_one_colour_per_configuration_in_every_figure(
    agg: pd.DataFrame, frame: pd.DataFrame
) -> None:
    colors = figure_colors(frame)
    assert (
        colors
        == palette(["vllm dflash", "sglang mtp", "vllm"])
        == {
            "vllm dflash": PALETTE[0],
            "sglang mtp": PALETTE[1],
            "vllm": PALETTE[2],
        }
    )
    pareto = by_gid(pareto_figure(agg, colors=colors).axes[0].lines, "front:")
    loads = by_gid(load_figure(agg, colors=colors).axes[0].lines, "mean:")
    accept = by_gid(acceptance_figure(agg, frame, colors=colors).axes[0].lines, "mean:")
    for label, config in ((DFLASH, "vllm dflash"), (MTP, "sglang mtp"), (PLAIN, "vllm")):
        assert pareto[label].get_color() == loads[label].get_color() == colors[config]
    assert accept[DFLASH].get_color() == colors["vllm dflash"]  # plain left out, colours kept
    assert accept[MTP].get_color() == colors["sglang mtp"]


def test_given_colours_win(agg: pd.DataFrame) -> None:
    fronts = by_gid(pareto_figure(agg, colors={"vllm": "#000000"}).axes[0].lines, "front:")
    assert fronts[PLAIN].get_color() == "#000000"
    assert fronts[DFLASH].get_color() == PALETTE[0]


def test_a_compare_tells_folders_apart_by_line_style(frame: pd.DataFrame) -> None:
    other = frame.assign(
        results_dir="results/b", output_tok_s_per_gpu=frame["output_tok_s_per_gpu"] * 2
    )
    agg = aggregate(pd.concat([frame, other], ignore_index=True), METRICS)
    fig = pareto_figure(agg, labels={"results/b": "tuesday"})
    fronts = by_gid(fig.axes[0].lines, "front:")
    a, b = fronts[f"{DFLASH} · a"], fronts[f"{DFLASH} · tuesday"]
    assert a.get_color() == b.get_color() == PALETTE[0]
    assert (a.get_linestyle(), b.get_linestyle()) == ("-", "--")
    assert xy(b) == [(x, 2 * y) for x, y in xy(a)]
    assert legend_texts(fig)[:2] == [f"{DFLASH} · a", f"{DFLASH} · tuesday"]


def test_two_runs_of_one_configuration_are_named_and_marked_apart(frame: pd.DataFrame) -> None:
    twin = frame[frame["key"] == "a@h1"].assign(key="a2@h2", run="a2", host="h2")
    agg = aggregate(pd.concat([frame, twin], ignore_index=True), METRICS)
    points = by_gid(pareto_figure(agg).axes[0].collections, "points:")
    first, second = points[f"{DFLASH} · a@h1"], points[f"{DFLASH} · a2@h2"]
    assert first.get_facecolors().tolist() == second.get_facecolors().tolist()  # one colour
    shapes = [c.get_paths()[0].vertices for c in (first, second)]
    assert not numpy.array_equal(*shapes)  # another marker


# ---------------------------------------------------------------------------- vs load


def test_load_plot_panels_lines_and_bands(agg: pd.DataFrame) -> None:
    fig = load_figure(agg)
    assert [ax.get_title() for ax in fig.axes] == [
        "Output throughput (tok/s)",
        "Median TPOT (ms)",
        "p99 TTFT (ms)",
    ]
    tpot = fig.axes[1]
    mean = by_gid(tpot.lines, "mean:")
    assert xy(mean[MTP]) == [(1.0, 12.0), (2.0, 13.0), (4.0, 15.0)]  # repeats 10+c, 12+c
    band = by_gid(tpot.collections, "band:")[MTP]
    ys = band.get_paths()[0].vertices[:, 1]
    low = agg[agg["key"] == "b@h2"]["tpot_ms_median_low"]
    high = agg[agg["key"] == "b@h2"]["tpot_ms_median_high"]
    assert ys.min() == pytest.approx(low.min()) and ys.max() == pytest.approx(high.max())
    assert set(by_gid(tpot.collections, "noisy:")) == {DFLASH, MTP, PLAIN}  # 12 +- 12.7
    assert set(by_gid(fig.axes[0].collections, "noisy:")) == set()
    assert fig.get_suptitle().endswith("mean of 2 repeats, band: 95% CI")


def test_concurrency_is_a_log2_axis_ticked_at_the_points(agg: pd.DataFrame) -> None:
    ax = load_figure(agg, ["output_tok_s"]).axes[0]
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    assert ax.get_xlabel() == "Concurrency (requests in flight, log2 scale)"


def test_request_rates_are_linear_and_two_kinds_two_rows(frame: pd.DataFrame) -> None:
    rates = frame.assign(load_kind="request_rate", results_dir="results/r")
    rates = rates[rates["key"] == "b@h2"]
    fig = load_figure(aggregate(rates, METRICS), ["output_tok_s"])
    assert fig.axes[0].get_xscale() == "linear"
    assert fig.axes[0].get_xlabel() == "Request rate (req/s)"
    both = aggregate(pd.concat([frame, rates], ignore_index=True), METRICS)
    fig = load_figure(both, ["output_tok_s", "ttft_ms_p99"])
    assert len(fig.axes) == 4
    assert [ax.get_xscale() for ax in fig.axes] == ["log", "log", "linear", "linear"]


# ------------------------------------------------------------------------- acceptance


def test_mean_positions_over_lists_of_any_length() -> None:
    assert mean_positions([[0.8, 0.6], [0.6, 0.4, 0.2], [None, 0.5]]) == pytest.approx(
        [0.7, 0.5, 0.2]
    )
    assert mean_positions([]) == []


def test_acceptance_skips_plain_decoding_and_draws_the_load_ends(frame: pd.DataFrame) -> None:
    lists = {1: [[0.8, 0.6], [0.6, 0.4]], 2: [[0.1, 0.1], [0.1, 0.1]], 4: [[0.3, 0.2], [0.5, 0.2]]}
    dflash = frame["key"] == "a@h1"
    for c, per_point in lists.items():
        at = numpy.flatnonzero(dflash & (frame["load_value"] == c))
        for i, values in zip(at, per_point, strict=True):
            frame.at[i, "acceptance_per_position"] = values
    fig = acceptance_figure(aggregate(frame, METRICS), frame)
    left, right = fig.axes
    assert sorted(by_gid(left.lines, "mean:")) == [MTP, DFLASH]
    positions = by_gid(right.lines, "position:")
    assert sorted(positions) == [f"{DFLASH} · c=1", f"{DFLASH} · c=4"]  # lowest, highest
    low, high = positions[f"{DFLASH} · c=1"], positions[f"{DFLASH} · c=4"]
    assert list(low.get_xdata()) == list(high.get_xdata()) == [1, 2]
    assert list(low.get_ydata()) == pytest.approx([0.7, 0.5])
    assert list(high.get_ydata()) == pytest.approx([0.4, 0.2])
    assert positions[f"{DFLASH} · c=4"].get_markerfacecolor() == "none"
    assert f"not shown (no speculation): {PLAIN}" in fig.get_suptitle()
    assert "source: prometheus" in fig.get_suptitle()


def test_acceptance_without_per_position_or_speculation_says_so(frame: pd.DataFrame) -> None:
    fig = acceptance_figure(aggregate(frame, METRICS), frame)
    assert [t.get_text() for t in fig.axes[1].texts] == [
        "no configuration here reports per-position acceptance"
    ]
    plain = frame[frame["config"] == "vllm"]
    fig = acceptance_figure(aggregate(plain, ["output_tok_s"]), plain)  # aggregated here
    assert [t.get_text() for t in fig.axes[0].texts] == [
        "no speculative configuration: plain decoding has no acceptance"
    ]


def test_a_failed_repeat_gives_no_per_position_curve(frame: pd.DataFrame) -> None:
    i = frame.index[(frame["key"] == "a@h1") & (frame["load_value"] == 1)][0]
    frame.at[i, "acceptance_per_position"] = [0.9]
    frame.at[i, "verdict"] = "failed"
    right = acceptance_figure(aggregate(frame, METRICS), frame).axes[1]
    assert not by_gid(right.lines, "position:")


# -------------------------------------------------------------------------------- CDF


def test_a_long_cdf_is_thinned_evenly_keeping_its_ends() -> None:
    xs, ys = ecdf([float(v) for v in range(10)])
    assert thinned(xs, ys, limit=20) == (xs, ys)  # short enough: untouched
    tx, ty = thinned(xs, ys, limit=4)
    assert list(tx) == [0.0, 2.0, 6.0, 9.0] and list(ty) == pytest.approx([0.0, 0.3, 0.7, 1.0])
    big_x, big_y = ecdf([float(v) for v in range(100_000)])
    tx, ty = thinned(big_x, big_y)
    assert len(tx) == 4000 and tx[0] == 0.0 and tx[-1] == 99_999.0 and ty[-1] == 1.0
    assert max(numpy.diff(ty)) < 0.0003  # no step of the CDF left out wider than 1/4000


def test_ecdf_steps_from_zero_to_one() -> None:
    xs, ys = ecdf([30.0, 10.0, 20.0, float("nan")])
    assert xs.tolist() == [10.0, 10.0, 20.0, 30.0]
    assert ys.tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


def test_cdf_one_curve_per_configuration(frame: pd.DataFrame) -> None:
    colors = figure_colors(frame)
    samples = {"vllm dflash": [3.0, 1.0, 2.0], "sglang mtp": [5.0, 4.0], "vllm": []}
    fig = cdf_figure(samples, point_label="c=4", setup=setup_line(frame), colors=colors)
    ax = fig.axes[0]
    curves = by_gid(ax.lines, "cdf:")
    assert sorted(curves) == [MTP, DFLASH]
    assert xy(curves[MTP]) == [(4.0, 0.0), (4.0, 0.5), (5.0, 1.0)]
    assert curves[MTP].get_drawstyle() == "steps-post"
    assert curves[DFLASH].get_color() == colors["vllm dflash"]
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == "TTFT (ms)"
    assert fig.get_suptitle() == (
        "TTFT distribution at c=4 — Qwen3.6-27B, 2 × RTX A6000\nempirical CDF over the "
        f"measured, completed requests; no samples: {PLAIN}"
    )


def test_cdf_of_a_compare_and_of_a_wide_spread() -> None:
    samples = {"vllm dflash · a": [1.0, 2.0], "vllm dflash · b": [1.0, 400.0]}
    fig = cdf_figure(samples, metric="ITL")
    curves = by_gid(fig.axes[0].lines, "cdf:")
    a, b = curves[f"{DFLASH} · a"], curves[f"{DFLASH} · b"]
    assert a.get_color() == b.get_color() and (a.get_linestyle(), b.get_linestyle()) == ("-", "--")
    assert fig.axes[0].get_xscale() == "log"
    assert fig.axes[0].get_xlabel() == "ITL (ms, log scale)"


def record(index: int, chunks: list[tuple[float, int]], **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {
        "index": index, "warmup": False, "start": 0.0, "start_wall": 0.0, "end": 1.0,
        "status": 200, "ttft": chunks[0][0], "e2el": chunks[-1][0],
        "chunks": tuple(Chunk(t, n) for t, n in chunks),
        "output_tokens": sum(n for _, n in chunks), "token_count_method": "usage",
    } | kw  # fmt: skip
    return RequestRecord(**fields)


def write_records(path: Path, records: list[RequestRecord]) -> Path:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records), encoding="utf-8")
    return path


def test_request_latencies_follow_the_summary_definitions(tmp_path: Path) -> None:
    records = [
        record(0, [(0.1, 1), (0.3, 4), (0.4, 1)]),
        record(1, [(0.2, 1), (0.5, 2)]),
        record(2, [(0.05, 1), (0.9, 1)], warmup=True),
        record(3, [(0.05, 1)], status=500, error="HTTP 500"),
        record(4, [(0.3, 1), (0.6, 3)], token_count_method="chunk"),
    ]
    got = request_latencies(write_records(tmp_path / "requests.jsonl", records))
    assert got["ttft_ms"] == pytest.approx([100.0, 200.0, 300.0])
    # one value per chunk, weighted by its tokens; not "chunk" counting
    assert got["itl_ms"] == pytest.approx([50.0, 100.0, 150.0])
    assert got["itl_weight"] == [4.0, 1.0, 2.0]
    assert got["tpot_ms"] == pytest.approx([60.0, 150.0, 100.0])
    assert got["e2el_ms"] == pytest.approx([400.0, 500.0, 600.0])
    stats = request_stats(records)
    assert numpy.median(got["ttft_ms"]) == stats.ttft_ms.median
    per_token = numpy.repeat(got["itl_ms"], numpy.array(got["itl_weight"], dtype=int))
    assert numpy.median(per_token) == stats.itl_token_ms.median
    assert numpy.percentile(per_token, 90) == pytest.approx(stats.itl_token_ms.p90)
    assert numpy.std(per_token) == pytest.approx(stats.itl_token_ms.std)
    assert numpy.median(got["tpot_ms"]) == stats.tpot_ms.median


def test_request_latencies_name_and_skip_a_hostile_line(tmp_path: Path) -> None:
    """A line that is not a record, or claims what cannot be, is named (file:line) and left
    out; the others still count, and a billion claimed tokens cost one value, not a billion."""
    billion = record(3, [(0.1, 1), (0.2, 10**9)])  # consistent, but no engine streams that
    lying = record(4, [(0.1, 1), (0.3, 2)], output_tokens=50000)  # chunks say 3
    failed = record(5, [(0.1, 1), (0.2, 10**9)], error="x", failure=RequestFailure.ABORTED)
    path = write_records(
        tmp_path / "requests.jsonl", [record(0, [(0.1, 1), (0.2, 2)]), billion, lying, failed]
    )
    path.write_text(
        path.read_text() + '{"index": "x"}\n' + "{" * 10 + "\n" + '{"index": 1e999}\n',
        encoding="utf-8",
    )
    notes: list[str] = []
    got = request_latencies(path, notes)
    assert got["ttft_ms"] == pytest.approx([100.0])  # the good line only
    assert (got["itl_ms"], got["itl_weight"]) == (pytest.approx([50.0]), [2.0])
    assert [n.split(": skipped: ")[0] for n in notes] == [f"{path}:{i}" for i in (2, 3, 5, 6, 7)]
    assert "1000000001 output tokens claimed" in notes[0]
    assert "its chunks add up to 3 tokens, its usage says 50000" in notes[1]
    assert "not a request record" in notes[2]
    with pytest.raises(OrchError, match="cannot read"):
        request_latencies(tmp_path / "missing.jsonl")


def test_a_line_past_the_limit_is_read_in_pieces_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line longer than MAX_LINE (with or without its newline) never sits in memory whole:
    it is read MAX_LINE bytes at a time, counted, named and skipped; the lines after it count."""
    import orchestrator.results.figures.latency as latency

    monkeypatch.setattr(latency, "MAX_LINE", 600)
    reads: list[int] = []

    class Watched(io.BufferedReader):
        def readline(self, size: int | None = -1) -> bytes:
            line = super().readline(size)
            reads.append(len(line))
            return line

    good = write_records(tmp_path / "a.jsonl", [record(0, [(0.1, 1), (0.2, 2)])]).read_bytes()
    path = tmp_path / "requests.jsonl"
    path.write_bytes(good + b"x" * 1500 + b"\n" + good + b"y" * 700)  # the last has no end
    notes: list[str] = []
    with io.FileIO(path) as raw, Watched(raw) as f:
        got = list(latency._records(path, f, notes))
    assert [r.index for r in got] == [0, 0]
    assert notes == [
        f"{path}:2: skipped: a line of 1501 bytes",
        f"{path}:4: skipped: a line of 700 bytes",
    ]
    assert max(reads) <= 601  # never more than MAX_LINE + 1 bytes at a time


def test_weighted_cdf_draws_what_the_expanded_values_draw() -> None:
    xs, ys = ecdf([3.0, 1.0, 2.0], [1, 2, 1])
    assert list(xs) == [1.0, 1.0, 2.0, 3.0]
    assert list(ys) == [0.0, 0.5, 0.75, 1.0]


# --------------------------------------------------------------------------- timeline


def vllm_events(start_minute: int = 0) -> list[dict]:
    """vLLM's lines every 10 s: the second interval drafted nothing."""
    out = []
    for i, (accept, drafted, gen) in enumerate(
        [(3.0, 300, 50.0), (None, 0, 0.0), (2.5, 200, 80.0)]
    ):
        time = f"12-02 10:{start_minute:02d}:{10 * i:02d}"
        out.append({"kind": "engine_stats", "line_no": 10 * i + 1, "time": time,
                    "generation_throughput": gen, "engine_index": 0})  # fmt: skip
        out.append({"kind": "spec_decode", "line_no": 10 * i + 2, "time": time,
                    "mean_acceptance_length": accept, "drafted_tokens": drafted,
                    "engine_index": None})  # fmt: skip
    return out


def test_log_seconds_of_both_clocks_and_a_new_year() -> None:
    sglang = [{"time": "2026-12-02 10:00:00"}, {"time": "2026-12-02 10:00:07"}, {"x": 1}]
    assert log_seconds(sglang) == [0.0, 7.0, None]
    vllm = [{"time": "12-31 23:59:58"}, {"time": "01-01 00:00:03"}, {"time": "13-01 00:00"}]
    assert log_seconds(vllm) == [0.0, 5.0, None]  # vLLM prints no year: time went back


def test_metric_points_skip_idle_speculation() -> None:
    events = vllm_events()
    assert metric_points(events, {"spec_decode": "mean_acceptance_length"}) == {
        "": ([0.0, 20.0], [3.0, 2.5])
    }
    assert metric_points(events, {"engine_stats": "generation_throughput"}) == {
        "engine 0": ([0.0, 10.0, 20.0], [50.0, 0.0, 80.0])
    }


def test_measurement_spans_from_the_points_events() -> None:
    server = vllm_events()
    points = {"c=1 #1": server[0:2], "c=2 #1": server[2:6], "c=4 #1": []}
    assert measurement_spans(server, points) == [(0.0, 1.0, "c=1 #1"), (0.0, 20.0, "c=2 #1")]
    assert measurement_spans([], points) == []


def test_timeline_rows_per_server(frame: pd.DataFrame) -> None:
    sglang = [
        {"kind": "decode_batch", "line_no": 5, "time": "2026-12-02 10:00:00",
         "accept_length": 2.5, "gen_throughput": 40.0},
        {"kind": "prefill_batch", "line_no": 6, "time": "2026-12-02 10:00:01"},
        {"kind": "decode_batch", "line_no": 7, "time": "2026-12-02 10:00:04",
         "accept_length": 2.7, "gen_throughput": 60.0},
    ]  # fmt: skip
    plain = [e for e in vllm_events() if e["kind"] == "engine_stats"]
    events = {"sglang mtp": sglang, "vllm": plain, "vllm dflash": vllm_events()}
    spans = {"vllm dflash": [(0.0, 10.0, "c=1 #1"), (10.0, 20.0, "c=2 #1")]}
    fig = timeline_figure(events, spans=spans, setup=setup_line(frame), colors=figure_colors(frame))
    assert len(fig.axes) == 6
    sg_accept, sg_gen, plain_accept, plain_gen, df_accept, _ = fig.axes
    assert xy(by_gid(sg_accept.lines, "acceptance:")[MTP]) == [(0.0, 2.5), (4.0, 2.7)]
    assert xy(by_gid(sg_gen.lines, "throughput:")[MTP]) == [(0.0, 40.0), (4.0, 60.0)]
    assert [t.get_text() for t in plain_accept.texts] == ["no speculation: no acceptance length"]
    assert by_gid(plain_gen.lines, "throughput:")[PLAIN].get_color() == PALETTE[2]
    assert sorted(by_gid(df_accept.patches, "span:")) == ["c=1 #1", "c=2 #1"]
    assert sorted(t.get_text() for t in df_accept.texts) == ["c=1 #1", "c=2 #1"]
    assert fig.get_suptitle().endswith("each log line's own interval figure; shaded: measurements")


# ------------------------------------------------------------------------------ bytes


def test_png_bytes_are_deterministic_and_carry_no_metadata(agg: pd.DataFrame) -> None:
    first, second = pareto_plot(agg), pareto_plot(agg)
    assert first == second and first.startswith(b"\x89PNG\r\n\x1a\n")
    assert b"tEXt" not in first and b"Software" not in first
    assert cdf_plot({"vllm": [1.0, 2.0]}) == cdf_plot({"vllm": [1.0, 2.0]})
    assert timeline_plot({"vllm dflash": vllm_events()}).startswith(b"\x89PNG")
    assert plt.get_fignums() == []  # every figure closed


def test_legend_columns_fit_the_width() -> None:
    assert legend_columns(["short"] * 5, 9.5) == 4
    assert legend_columns(["x" * 60] * 5, 9.5) == 2
    assert legend_columns(["x" * 200], 9.5) == 1


# ------------------------------------------------------------------------- real sweep


def demo_folder() -> Path | None:
    """$ORCH_SWEEP_RESULTS, else the newest results/*-sweep-demo (playbooks/sweep-demo.yaml)."""
    given = os.environ.get("ORCH_SWEEP_RESULTS")
    if given:
        return Path(given)
    found = sorted(Path(__file__).parents[2].glob("results/*-sweep-demo"))
    return found[-1] if found else None


def test_every_plot_of_a_real_sweep() -> None:
    folder = demo_folder()
    if folder is None or not folder.is_dir():
        pytest.skip("no sweep results: run playbooks/sweep-demo.yaml or set ORCH_SWEEP_RESULTS")
    from orchestrator.results.frame import load

    frame = load(folder)
    agg = aggregate(frame, METRICS)
    colors = figure_colors(frame)
    for png in (pareto_plot(agg, colors=colors), load_plot(agg, colors=colors),
                acceptance_plot(agg, frame, colors=colors)):  # fmt: skip
        assert png.startswith(b"\x89PNG")
    samples, events, spans = {}, {}, {}
    for config, folders in frame.groupby("config", sort=False)["folder"]:
        measured = [folder / f / "requests.jsonl" for f in folders]
        samples[config] = request_latencies([p for p in measured if p.is_file()][-1])["itl_ms"]
        run = folder / str(folders.iloc[0]).split("/points/")[0]
        events[config] = [json.loads(line) for line in (run / "events.jsonl").open()]
        points = {
            p.name: [json.loads(x) for x in p.open()] for p in run.glob("points/*/events.jsonl")
        }
        spans[config] = measurement_spans(events[config], points)
    assert cdf_plot(samples, metric="ITL", colors=colors).startswith(b"\x89PNG")
    assert timeline_plot(events, spans=spans, colors=colors).startswith(b"\x89PNG")
    fronts = by_gid(pareto_figure(agg, colors=colors).axes[0].lines, "front:")
    assert len(fronts) == frame.dropna(subset=["interactivity"])["key"].nunique()


@pytest.mark.parametrize(("servers", "kept"), [(3, 3), (12, 12), (13, 12), (40, 12)])
def test_a_report_over_many_servers_draws_the_first_twelve_timelines(
    servers: int, kept: int
) -> None:
    from orchestrator.results.report_figures import first_timelines

    events = {f"s{i}": vllm_events() for i in range(servers)}
    spans = {f"s{i}": [(0.0, 1.0, "c=1 #1")] for i in range(servers)}
    got, got_spans, note = first_timelines(events, spans)
    assert list(got) == [f"s{i}" for i in range(kept)] and list(got_spans) == list(got)
    assert note == (
        None
        if servers <= 12
        else f"timeline: the first 12 of {servers} servers (a report over one results folder "
        "shows all of its own)"
    )


def test_a_long_legend_becomes_one_entry_per_configuration_and_per_line_style() -> None:
    keys = [f"{config} · f{i}" for config in ("vllm dflash", "sglang mtp") for i in range(10)]
    few = legend_key(keyed_series(keys[:16]))
    assert [label for label, _ in few][:2] == ["vLLM DFlash · f0", "vLLM DFlash · f1"]
    assert len(few) == 16
    key = legend_key(keyed_series(keys))
    assert [label for label, _ in key] == [
        "vLLM DFlash",
        "SGLang MTP",
        "f0, f4, f8",
        "f1, f5, f9",
        "f2, f6",
        "f3, f7",
    ]
    assert [h.get_linestyle() for _, h in key] == ["-", "-", "-", "--", ":", "-."]
    assert key[0][1].get_color() != key[1][1].get_color()
    many = legend_key(keyed_series([f"vllm dflash · f{i}" for i in range(20)]))
    assert [label for label, _ in many][:2] == ["vLLM DFlash", "f0, f4, f8 +2 more"]
