"""The SLO search on synthetic curves: the exact values it proposes, its answer, its bounds."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest

from orchestrator.sweep.search import SloSearch

TTFT = "ttft_ms_p99 <= 2000"


def ttft_p99(c: float) -> float:
    """A monotone curve: p99 TTFT grows 60 ms per request in flight -> c <= 31 meets 2000."""
    return 100 + 60 * c


def drive(
    search: SloSearch, meets: Callable[[float], bool], seeds: Sequence[float] = ()
) -> SloSearch:
    """Seed the search with already-measured points, then measure what it proposes."""
    for value in seeds:
        search.record(value, meets(value), [] if meets(value) else [TTFT])
    for _ in range(100):  # a search that does not stop fails here, not by hanging
        value = search.next_value()
        if value is None:
            return search
        search.record(value, meets(value), [] if meets(value) else [TTFT])
    raise AssertionError(f"the search did not stop: {search.proposed}")


@pytest.mark.parametrize(
    ("search", "meets", "proposed", "best"),
    [
        (  # bottom, top, then bisect between highest met and lowest missed, to adjacent values
            SloSearch("concurrency", 1, 256, max_points=12),
            lambda c: ttft_p99(c) <= 2000,
            [1, 256, 128, 64, 32, 16, 24, 28, 30, 31],
            31,
        ),
        (  # out of measurements: the best so far
            SloSearch("concurrency", 1, 256, max_points=6),
            lambda c: ttft_p99(c) <= 2000,
            [1, 256, 128, 64, 32, 16],
            16,
        ),
        (  # a coarser resolution stops at missed / met <= 1.1 (32 / 30)
            SloSearch("concurrency", 1, 256, max_points=12, resolution=1.1),
            lambda c: ttft_p99(c) <= 2000,
            [1, 256, 128, 64, 32, 16, 24, 28, 30],
            30,
        ),
        (  # median TPOT 20 + c / 2 ms <= 50 -> c <= 60, from a range that does not start at 1
            SloSearch("concurrency", 4, 100, max_points=12),
            lambda c: 20 + c / 2 <= 50,
            [4, 100, 52, 76, 64, 58, 61, 59, 60],
            60,
        ),
        (  # the bottom misses: nothing in the range meets
            SloSearch("concurrency", 1, 256, max_points=12),
            lambda c: False,
            [1],
            None,
        ),
        (  # the top meets: it is the answer
            SloSearch("concurrency", 1, 256, max_points=12),
            lambda c: True,
            [1, 256],
            256,
        ),
        (  # a one-value range
            SloSearch("concurrency", 8, 8, max_points=12),
            lambda c: True,
            [8],
            8,
        ),
        (  # rates: p99 TTFT 200 ms per req/s <= 1000 -> rate <= 5, readable midpoints,
            # stop at missed / met <= 1.05 (5.1 / 4.86)
            SloSearch("request_rate", 0.5, 16, max_points=12),
            lambda r: 200 * r <= 1000,
            [0.5, 16, 8.25, 4.38, 6.31, 5.34, 4.86, 5.1],
            4.86,
        ),
        (  # a coarser rate resolution: 5.34 / 4.86 <= 1.2
            SloSearch("request_rate", 0.5, 16, max_points=12, resolution=1.2),
            lambda r: 200 * r <= 1000,
            [0.5, 16, 8.25, 4.38, 6.31, 5.34, 4.86],
            4.86,
        ),
        (  # rates out of measurements
            SloSearch("request_rate", 0.5, 16, max_points=4),
            lambda r: 200 * r <= 1000,
            [0.5, 16, 8.25, 4.38],
            4.38,
        ),
    ],
)
def test_search_on_a_monotone_curve(
    search: SloSearch,
    meets: Callable[[float], bool],
    proposed: list[float],
    best: float | None,
) -> None:
    drive(search, meets)
    assert list(search.proposed) == proposed
    assert search.best == best
    assert len(search.proposed) <= search.max_points


@pytest.mark.parametrize("threshold", range(0, 260))
def test_concurrency_search_finds_every_threshold(threshold: int) -> None:
    """Met up to ``threshold``: the answer is it (clamped to the range), each value measured
    once, within 2 + ceil(log2(255)) measurements."""
    search = drive(SloSearch("concurrency", 1, 256, max_points=20), lambda c: c <= threshold)
    assert search.best == (min(threshold, 256) if threshold >= 1 else None)
    assert len(set(search.proposed)) == len(search.proposed) <= 2 + math.ceil(math.log2(255))


@pytest.mark.parametrize("limit", [0.51, 0.7, 1.0, 2.345, 5.0, 9.99, 15.9])
def test_rate_search_brackets_the_limit_within_the_resolution(limit: float) -> None:
    search = drive(SloSearch("request_rate", 0.5, 16, max_points=30), lambda r: r <= limit)
    best = search.best
    assert best is not None and best <= limit
    lowest_miss = min(v for v, met in search.points if not met)
    assert lowest_miss > limit
    assert lowest_miss / best <= 1.05
    assert len(set(search.proposed)) == len(search.proposed)


def test_points_from_the_sweep_list_seed_the_bracket() -> None:
    search = drive(
        SloSearch("concurrency", 1, 256, max_points=8),
        lambda c: ttft_p99(c) <= 2000,
        seeds=[1, 2, 4, 8, 16, 32, 64],
    )
    assert search.proposed == (24, 28, 30, 31)
    assert search.best == 31
    assert search.explain() == (
        "highest concurrency meeting every target: 31 (c=32 missed ttft_ms_p99 <= 2000);"
        " 11 points measured (4 by the search)"
    )


def test_seeds_that_already_resolve_the_limit_leave_nothing_to_measure() -> None:
    search = drive(
        SloSearch("concurrency", 1, 256, max_points=8),
        lambda c: ttft_p99(c) <= 2000,
        seeds=[1, 31, 32],
    )
    assert search.proposed == ()
    assert search.best == 31


def test_points_outside_the_range_do_not_enter_the_search() -> None:
    search = drive(
        SloSearch("concurrency", 8, 64, max_points=12),
        lambda c: ttft_p99(c) <= 2000,
        seeds=[1, 2, 128],  # met, met, missed: all outside [8, 64]
    )
    assert search.proposed == (8, 64, 36, 22, 29, 32, 30, 31)
    assert search.best == 31


def test_non_monotone_points_the_lowest_miss_bounds_the_answer() -> None:
    """c=24 met above c=16 that missed (noise): ignored; the search bisects (8, 16) and never
    measures a value twice or loops."""
    search = drive(
        SloSearch("concurrency", 1, 256, max_points=12),
        lambda c: c <= 10 or c == 24,
        seeds=[1, 8, 16, 24, 32],
    )
    assert search.proposed == (12, 10, 11)
    assert search.best == 10
    assert search.explain() == (
        "highest concurrency meeting every target: 10 (c=11 missed ttft_ms_p99 <= 2000);"
        " 8 points measured (3 by the search); ignored c=24: met above the lowest miss"
        " (non-monotone)"
    )


def test_a_point_meets_only_if_every_repeat_met() -> None:
    search = SloSearch("concurrency", 1, 64, max_points=12)
    search.record(1, True)
    search.record(16, True)
    search.record(16, False, ["tpot_ms_median <= 50"])
    search.record(16, False, [TTFT, "tpot_ms_median <= 50"])
    assert search.points == [(1.0, True), (16.0, False)]
    assert search.best == 1
    assert search.next_value() == 8
    assert "c=16 missed tpot_ms_median <= 50, ttft_ms_p99 <= 2000" in search.explain()


def test_next_value_repeats_its_proposal_until_it_is_recorded() -> None:
    search = SloSearch("concurrency", 1, 256, max_points=2)
    assert search.next_value() == 1
    assert search.next_value() == 1
    search.record(1, True)
    assert search.next_value() == 256
    assert search.next_value() == 256
    search.record(256, False, [TTFT])
    assert search.next_value() is None  # two measurements: the budget
    assert search.proposed == (1, 256)


@pytest.mark.parametrize(
    ("record", "explanation"),
    [
        ([], "SLO search over concurrency [1, 256]: nothing measured in range yet"),
        (
            [(1, False)],
            "no concurrency in [1, 256] meets every target (c=1 missed ttft_ms_p99 <= 2000);"
            " 1 point measured",
        ),
        (
            [(1, True), (256, True)],
            "highest concurrency meeting every target: 256 (the top of the range [1, 256]);"
            " 2 points measured",
        ),
        (
            [(1, True), (256, False), (128, False)],
            "highest concurrency meeting every target: 1 (c=128 missed ttft_ms_p99 <= 2000);"
            " 3 points measured (max_points=3 reached before the search converged)",
        ),
    ],
)
def test_explain(record: list[tuple[float, bool]], explanation: str) -> None:
    search = SloSearch("concurrency", 1, 256, max_points=3)
    for value, met in record:
        assert search.next_value() == value
        search.record(value, met, [] if met else [TTFT])
    assert search.explain() == explanation


def test_explain_a_rate_search() -> None:
    search = drive(SloSearch("request_rate", 0.5, 16, max_points=12), lambda r: 200 * r <= 1000)
    assert search.explain() == (
        "highest request rate meeting every target: 4.86 (rate=5.1 missed ttft_ms_p99 <= 2000);"
        " 8 points measured"
    )


def test_explain_a_search_without_a_meeting_point_yet() -> None:
    search = SloSearch("concurrency", 4, 64, max_points=3)
    search.record(32, False, [TTFT])  # seeded: the bottom is still to be measured
    assert search.explain() == (
        "no concurrency meeting every target found yet (c=32 missed ttft_ms_p99 <= 2000);"
        " 1 point measured (0 by the search)"
    )
    assert search.next_value() == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("throughput", 1, 8, 4), "search concurrency or request_rate"),
        (("concurrency", 0, 8, 4), r"need 0 < low <= high"),
        (("concurrency", 16, 8, 4), r"need 0 < low <= high"),
        (("concurrency", 1.5, 8, 4), "concurrency is a whole number"),
        (("concurrency", 1, 8, 0), "max_points 0: at least 1"),
        (("request_rate", 0.5, 8, 4, 1.0), "a ratio above 1"),
    ],
)
def test_invalid_searches(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SloSearch(*args)
