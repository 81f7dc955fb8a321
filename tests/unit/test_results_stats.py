"""Repeat statistics: Student-t intervals against closed forms, noisy flags, the per-point
aggregate of a results frame, and the Pareto front.

Student's t quantiles have closed forms for 1 and 2 degrees of freedom, which the expected
values below use: t(p, 1) = tan(pi (p - 1/2)), t(p, 2) = (2p - 1) / sqrt(2 p (1 - p)).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from orchestrator.results.stats import Interval, aggregate, interval, is_noisy, pareto_front


def t1(p: float) -> float:
    return math.tan(math.pi * (p - 0.5))


def t2(p: float) -> float:
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-12)


# --- interval -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "confidence", "n", "mean", "std", "half"),
    [
        # mean 12, s = 2, half = t(0.975, 2) * 2 / sqrt(3) = 4.96827542...
        ([10, 12, 14], 0.95, 3, 12.0, 2.0, t2(0.975) * 2 / math.sqrt(3)),
        ([10, 12, 14], 0.90, 3, 12.0, 2.0, t2(0.95) * 2 / math.sqrt(3)),
        # mean 2, s = sqrt(2): half = t(0.975, 1) * sqrt(2) / sqrt(2)
        ([1, 3], 0.95, 2, 2.0, math.sqrt(2), t1(0.975)),
        # None and NaN are not measurements
        ([10, None, float("nan"), 12, 14], 0.95, 3, 12.0, 2.0, t2(0.975) * 2 / math.sqrt(3)),
        ([5, 5, 5], 0.95, 3, 5.0, 0.0, 0.0),
    ],
)
def test_student_t_interval(
    values: list[float | None], confidence: float, n: int, mean: float, std: float, half: float
) -> None:
    iv = interval(values, confidence)
    assert iv.n == n
    assert iv.mean == approx(mean)
    assert iv.std == approx(std)
    assert iv.half_width == approx(half)
    assert iv.low == approx(mean - half)
    assert iv.high == approx(mean + half)
    assert iv.relative == approx(half / mean)


def test_the_interval_of_three_values_by_hand() -> None:
    iv = interval([10.0, 12.0, 14.0])
    assert t2(0.975) == approx(4.302652729749462)
    assert iv.half_width == approx(4.96827542350066)  # 4.302652729749462 * 2 / sqrt(3)
    assert iv.relative == approx(4.96827542350066 / 12)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], Interval(n=0)),
        ([None, float("nan")], Interval(n=0)),
        ([7.5], Interval(n=1, mean=7.5)),  # one measurement: no spread, no interval
        ([float("nan"), 7.5], Interval(n=1, mean=7.5)),
    ],
)
def test_interval_below_two_values(values: list[float | None], expected: Interval) -> None:
    assert interval(values) == expected


def test_a_zero_mean_with_spread_is_infinitely_relative() -> None:
    iv = interval([-1.0, 1.0])
    assert iv.mean == 0.0
    assert iv.relative == math.inf
    assert interval([0.0, 0.0]).relative == 0.0


@pytest.mark.parametrize("confidence", [0.0, 1.0, 95.0, -0.5])
def test_confidence_is_a_fraction(confidence: float) -> None:
    with pytest.raises(ValueError, match="a fraction between 0 and 1"):
        interval([1.0, 2.0], confidence)


# --- is_noisy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "fraction", "noisy"),
    [
        ([10, 12, 14], 0.10, True),  # half-width 41% of the mean
        ([10, 12, 14], 0.41, True),
        ([10, 12, 14], 0.42, False),
        ([100, 101, 99, 100], 0.10, False),  # half-width 1.3% of the mean
        ([100, 101, 99, 100], 0.01, True),
        ([5, 5, 5], 0.0, False),  # no spread is never wider than any fraction
        ([7.5], 0.0, False),  # one measurement is "single", not noisy
        ([], 0.0, False),
    ],
)
def test_is_noisy(values: list[float], fraction: float, noisy: bool) -> None:
    assert is_noisy(interval(values), fraction) is noisy


def test_noisy_is_strictly_wider_than_the_fraction() -> None:
    iv = Interval(n=3, mean=10.0, std=1.0, low=9.0, high=11.0, half_width=1.0, relative=0.1)
    assert is_noisy(iv, 0.1) is False
    assert is_noisy(iv, 0.0999) is True


# --- aggregate ------------------------------------------------------------------------------


def row(key: str, value: float | None, tok_s: float | None, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "results_dir": "results/r",
        "folder": f"{key}/points/x",
        "run": key.split("@")[0],
        "host": key.split("@")[1],
        "key": key,
        "config": "vllm dflash",
        "engine": "vllm",
        "method": "dflash",
        "model": "m",
        "gpu_name": "NVIDIA RTX A6000",
        "gpu_count": 1,
        "load_kind": "concurrency" if value is not None else None,
        "load_value": value,
        "origin": "sweep",
        "noisy_ci": 0.10,
        "point_index": 0,
        "verdict": "ok",
        "not_run": False,
        "output_tok_s": tok_s,
        "ttft_ms_p99": 100.0,
    }
    base.update(extra)
    return base


FRAME = pd.DataFrame(
    [
        row("a@h1", 16, 50.0, point_index=2),  # out of order: sorted numerically by load
        row("a@h1", 2, 20.0, point_index=1),
        row("a@h1", 1, 10.0),
        row("b@h1", 1, 10.0, noisy_ci=0.5, config="sglang mtp", engine="sglang", method="mtp"),
        row("a@h1", 2, 22.0, point_index=1, ttft_ms_p99=104.0),
        row("a@h1", 1, 12.0),
        row("a@h1", 2, 99.0, point_index=1, verdict="failed"),  # a failed repeat
        row("a@h1", 2, None, point_index=1, verdict="failed", not_run=True),  # never made
        row("b@h1", 1, 12.0, noisy_ci=0.5, config="sglang mtp", engine="sglang", method="mtp"),
        row("a@h1", 1, 14.0),
        row("b@h1", 1, 14.0, noisy_ci=0.5, config="sglang mtp", engine="sglang", method="mtp"),
        row("c@h2", None, 30.0, results_dir="results/q", noisy_ci=None),  # an old result
    ]
)


def test_aggregate_one_row_per_load_point() -> None:
    out = aggregate(FRAME, ["output_tok_s", "ttft_ms_p99"])
    kinds = out["load_kind"].fillna("-")  # an old result has no load point (NaN)
    keys = list(zip(out["results_dir"], out["key"], kinds, strict=True))
    assert keys == [
        ("results/q", "c@h2", "-"),
        ("results/r", "a@h1", "concurrency"),
        ("results/r", "a@h1", "concurrency"),
        ("results/r", "a@h1", "concurrency"),
        ("results/r", "b@h1", "concurrency"),
    ]
    assert out["load_value"].tolist()[1:] == [1.0, 2.0, 16.0, 1.0]  # by value, not as text


def _point(out: pd.DataFrame, results_dir: str, key: str, value: float) -> pd.Series:
    found = out[(out.results_dir == results_dir) & (out.key == key) & (out.load_value == value)]
    assert len(found) == 1
    return found.iloc[0]


def test_aggregate_figures_and_noise() -> None:
    out = aggregate(FRAME, ["output_tok_s", "ttft_ms_p99"])
    a1 = _point(out, "results/r", "a@h1", 1)
    half = t2(0.975) * 2 / math.sqrt(3)
    assert (a1.output_tok_s_mean, a1.output_tok_s_std) == (12.0, 2.0)
    assert a1.output_tok_s_low == approx(12 - half)
    assert a1.output_tok_s_high == approx(12 + half)
    assert a1.output_tok_s_n == 3
    assert bool(a1.output_tok_s_noisy) is True  # 41% > 10%
    assert (a1.ttft_ms_p99_mean, a1.ttft_ms_p99_std, bool(a1.ttft_ms_p99_noisy)) == (
        100.0,
        0.0,
        False,
    )
    assert (a1.repeats, a1.failed_repeats) == (3, 0)

    b1 = _point(out, "results/r", "b@h1", 1)  # the same figures, judged against its 50%
    assert b1.output_tok_s_mean == 12.0
    assert bool(b1.output_tok_s_noisy) is False
    assert (b1.config, b1.engine, b1.method, b1.noisy_ci) == ("sglang mtp", "sglang", "mtp", 0.5)


def test_aggregate_leaves_failed_and_not_run_repeats_out() -> None:
    out = aggregate(FRAME, ["output_tok_s", "ttft_ms_p99"])
    a2 = _point(out, "results/r", "a@h1", 2)
    assert (a2.repeats, a2.failed_repeats) == (4, 2)
    assert (a2.output_tok_s_mean, a2.output_tok_s_n) == (21.0, 2)  # not 99, not the missing one
    assert a2.output_tok_s_std == approx(math.sqrt(2))
    assert a2.output_tok_s_high - a2.output_tok_s_mean == approx(t1(0.975))
    assert a2.ttft_ms_p99_mean == 102.0
    assert (a2.run, a2.host, a2.point_index, a2.gpu_name, a2.gpu_count, a2.origin) == (
        "a",
        "h1",
        1,
        "NVIDIA RTX A6000",
        1,
        "sweep",
    )


def test_aggregate_a_single_measurement_and_an_old_result() -> None:
    out = aggregate(FRAME, ["output_tok_s"])
    a16 = _point(out, "results/r", "a@h1", 16)
    assert (a16.output_tok_s_mean, a16.output_tok_s_n, bool(a16.output_tok_s_noisy)) == (
        50.0,
        1,
        False,
    )
    assert pd.isna(a16.output_tok_s_std) and pd.isna(a16.output_tok_s_low)
    old = out[out.results_dir == "results/q"].iloc[0]  # no load point: grouped, not dropped
    assert pd.isna(old.load_kind) and pd.isna(old.load_value)
    assert (old.output_tok_s_mean, old.repeats) == (30.0, 1)
    assert len(out) == 5


def test_aggregate_every_repeat_failed() -> None:
    frame = pd.DataFrame([row("a@h1", 4, None, verdict="failed")] * 2)
    out = aggregate(frame, ["output_tok_s"])
    assert len(out) == 1
    assert (out.iloc[0].failed_repeats, out.iloc[0].output_tok_s_n) == (2, 0)
    assert pd.isna(out.iloc[0].output_tok_s_mean)
    assert bool(out.iloc[0].output_tok_s_noisy) is False


def test_aggregate_names_a_missing_column() -> None:
    with pytest.raises(ValueError, match="no column 'goodput_req_s'"):
        aggregate(FRAME, ["goodput_req_s"])


def test_aggregate_an_empty_frame_keeps_its_columns() -> None:
    out = aggregate(FRAME.iloc[0:0], ["output_tok_s"])
    assert len(out) == 0
    assert {"key", "repeats", "failed_repeats", "output_tok_s_mean", "output_tok_s_noisy"} <= set(
        out.columns
    )


# --- pareto_front ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "front"),
    [
        (
            [
                (10, 100),  # 0: front (nothing has more of both)
                (20, 90),  # dominated by 3
                (20, 80),  # dominated by 1 and 3
                (30, 95),  # 3: front
                (5, 50),  # dominated by 0
                (40, 10),  # 5: front (the most interactive)
                (30, 95),  # a duplicate of 3: the first is kept
                (float("nan"), 200),  # unknown interactivity: never on the front
                (35, 5),  # dominated by 5
            ],
            [0, 3, 5],
        ),
        ([], []),
        ([(1.0, 1.0)], [0]),
        ([(1, 1), (1, 2)], [1]),  # the same x: the higher y
        ([(1, 5), (2, 5)], [1]),  # the same y: the higher x
        ([(3, 1), (2, 2), (1, 3)], [2, 1, 0]),  # a trade-off: all, by x
    ],
)
def test_pareto_front(points: list[tuple[float, float]], front: list[int]) -> None:
    assert pareto_front(points) == front
