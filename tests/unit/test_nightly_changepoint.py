"""Change points with Apache Otava: the adapter on a stand-in module (everywhere), None and a
note when Otava is not installed, and Otava itself where it is (``pip install 'orch[nightly]'``)."""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass

import numpy
import pytest

from orchestrator.nightly import changepoint
from orchestrator.nightly.changepoint import NOT_INSTALLED, change_points, nearest
from orchestrator.nightly.verdict import Policy, replay
from tests.fixtures.nightly_histories import night_id, row


@dataclass
class FakePoint:
    index: int


@pytest.fixture
def fake_otava(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """``otava.analysis`` as a stand-in that finds a shift where the series first drops by
    more than 5%; records what it was called with."""
    calls: list[dict[str, object]] = []

    def compute_change_points(
        series: list[float], **kwargs: object
    ) -> tuple[list[FakePoint], list[FakePoint]]:
        calls.append({"series": list(series), **kwargs})
        found = [FakePoint(i) for i in range(1, len(series)) if series[i] < 0.95 * series[i - 1]]
        return found, []

    module = types.ModuleType("otava.analysis")
    module.compute_change_points = compute_change_points  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "otava", types.ModuleType("otava"))
    monkeypatch.setitem(sys.modules, "otava.analysis", module)
    return calls


def test_the_adapter_passes_otavas_options_and_maps_indices_past_nans(
    fake_otava: list[dict[str, object]],
) -> None:
    values = [100.0, math.nan, 100.0, 100.0, 90.0, 90.0, 80.0]
    assert change_points(values) == [4, 6]
    assert fake_otava[0] == {
        "series": [100.0, 100.0, 100.0, 90.0, 90.0, 80.0],
        "window_len": 50,
        "max_pvalue": 0.001,
        "min_magnitude": 0.0,
    }
    assert change_points([100.0] * 10) == []
    assert change_points([1.0, math.nan]) == []  # fewer than 3 values: nothing to split


def test_without_otava_there_is_no_change_point_and_the_report_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(changepoint.importlib, "import_module", missing)
    assert (changepoint.available(), change_points([1.0, 1.0, 2.0, 2.0]), change_points([1.0])) == (
        False,
        None,
        None,
    )
    nights = [
        [row(i, "output_tok_s", [90.0, 91.0, 89.0] if i >= 3 else [100.0, 101.0, 99.0])]
        for i in range(5)
    ]
    verdict = replay(nights, Policy(alpha=0.01))[4][0].metrics[0]  # 3 nights: a loose alpha
    assert (verdict.verdict, verdict.change_point, verdict.change_point_note) == (
        "regression",
        None,
        NOT_INSTALLED,
    )


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ([100.0] * 20 + [90.0] * 10, [20]),  # a 10% step at night 20
        ([100.0] * 20 + [90.0] * 2, [20]),  # ... seen from night 21, when it is first called
        ([100.0] * 10 + [90.0] * 10 + [100.0] * 10, [10, 20]),  # a step and its fix
        ([100.0] * 30, []),
    ],
)
def test_otava_locates_a_shift(levels: list[float], expected: list[int]) -> None:
    pytest.importorskip(
        "otava.analysis", reason="Apache Otava is optional: pip install 'orch[nightly]'"
    )
    noise = numpy.random.default_rng(7).normal(0, 0.017, len(levels))  # 3% over 3 repeats
    values = [level * (1 + e) for level, e in zip(levels, noise, strict=True)]
    assert change_points(values) == expected


def test_a_regression_names_otavas_night() -> None:
    pytest.importorskip(
        "otava.analysis", reason="Apache Otava is optional: pip install 'orch[nightly]'"
    )
    noise = numpy.random.default_rng(3).normal(0, 0.01, (22, 3))
    nights = [
        [row(i, "output_tok_s", [100.0 * (0.9 if i >= 20 else 1.0) * (1 + e) for e in noise[i]])]
        for i in range(22)
    ]
    verdict = replay(nights)[21][0].metrics[0]
    assert (verdict.verdict, verdict.change_point) == ("regression", night_id(20))
    assert verdict.change_point_note == "Apache Otava, over the last 22 nights"


@pytest.mark.parametrize(
    ("found", "first_bad", "expected"),
    [
        ([20], 20, 20),
        ([20, 25], 20, 20),  # a later split by noise is no answer to "since when"
        ([20, 25], 21, 20),  # the shift began before the first night past the threshold
        ([10, 20], 21, 20),  # a step and its fix, then a new step: the latest before
        ([23], 21, 23),  # none at or before: the earliest after
        ([], 21, None),
    ],
)
def test_the_change_point_is_the_one_that_began_the_violating_nights(
    found: list[int], first_bad: int, expected: int | None
) -> None:
    assert nearest(found, first_bad) == expected
