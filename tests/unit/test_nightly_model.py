"""The night model and the verdicts it adds (issue 24): a robust spread of whole nights, a run of
nights tested together, a slow drift, a change of the GPUs' operating mode, and an inconclusive
night with its interval and the repeats that would decide it."""

from __future__ import annotations

import dataclasses
import statistics

import numpy
import pytest
from scipy import stats

from orchestrator.config.nightly_terms import EXIT_CODES, VERDICT_ORDER
from orchestrator.nightly.cases import Change, NightAttributes
from orchestrator.nightly.history import HistoryRow
from orchestrator.nightly.model import NightModel, onset, robust_sd, trend
from orchestrator.nightly.report import HEADINGS, NightlyVerdict, render_markdown
from orchestrator.nightly.verdict import CaseVerdict, MetricVerdict, Policy, replay
from tests.fixtures.nightly_histories import CASE, night_id, row

NIGHTS = [100.0, 103.0, 97.0, 101.0, 99.0, 102.0, 98.0]


def test_the_model_is_a_student_t_prediction_from_the_nights_spread() -> None:
    model = NightModel.of(NIGHTS)
    assert model is not None
    sd, k = statistics.stdev(NIGHTS), len(NIGHTS)
    assert (model.center, model.spread, model.k) == (100.0, pytest.approx(sd), 7)
    t = 8.0 / (sd * (1 + 1 / k) ** 0.5)
    assert model.night_p(8.0) == pytest.approx(stats.t.sf(t, k - 1), rel=1e-9)
    assert NightModel.of(NIGHTS[:2]) is None  # two nights say nothing of a spread


def test_one_bad_night_neither_widens_the_spread_nor_moves_the_center() -> None:
    clean = NightModel.of(NIGHTS)
    bad = NightModel.of([*NIGHTS, 60.0])
    assert clean is not None and bad is not None
    assert bad.center == pytest.approx(99.5)  # the median moves half a step
    # winsorized at 3 MADs: under twice the clean spread, where the plain sd is over 13
    assert bad.spread < 2 * clean.spread
    assert statistics.stdev([*NIGHTS, 60.0]) > 13


def test_the_spread_is_never_below_a_nights_own_standard_error() -> None:
    model = NightModel.of([100.0] * 4, within=[0.6, 0.6, 0.6, 0.6])
    assert model is not None and model.spread == pytest.approx(0.6)
    assert model.between == 0.0  # the nights do not move: more repeats would help
    # a night whose repeats scattered more than the baseline's says less
    assert model.night_p(3.0, own=2.0) > model.night_p(3.0, own=0.5) == model.night_p(3.0)


def test_a_run_of_two_is_its_weaker_night_and_a_longer_one_leaves_its_worst_out() -> None:
    model = NightModel.of(NIGHTS)
    assert model is not None
    p2, est2 = model.run_p([9.0, 4.0])
    assert (p2, est2) == (model.night_p(4.0), 6.5)
    p3, est3 = model.run_p([30.0, 4.0, 5.0])  # a blip among them carries nothing
    assert est3 == 4.5
    assert p3 == pytest.approx(stats.t.sf(4.5 / model.se(2), 6), rel=1e-9)


def test_the_repeats_that_decide_a_change_or_that_none_would() -> None:
    steady = NightModel.of([100.0] * 7, within=[1.0] * 7)  # nights move only by their repeats
    moving = NightModel.of(NIGHTS, within=[0.3] * 7)  # nights move by 2% as a whole
    assert steady is not None and moving is not None
    need = steady.repeats_to_decide(4.0, 0.001, sd=3.0)
    assert need is not None and need > 9  # 9 repeats give a standard error of 1.0: too few
    assert moving.repeats_to_decide(4.0, 0.001, sd=1.0) is None


def test_a_trend_and_where_it_began() -> None:
    flat_then_down = [100.0] * 12 + [100.0 - 0.8 * i for i in range(1, 13)]
    found = trend(flat_then_down, higher=True)
    assert found is not None and found.p < 1e-4 and found.slope < 0
    assert onset(flat_then_down) == 12
    assert onset([100.0 - 0.5 * i for i in range(20)]) == 0
    rng = numpy.random.default_rng(0)
    quiet = trend(list(100.0 + rng.normal(size=30)), higher=True)
    assert quiet is not None and quiet.p > 0.01
    assert trend([1.0] * 9, higher=True) is None  # too few nights
    assert robust_sd([1.0]) == 0.0


def judged(levels: list[float], **kw: object) -> list[MetricVerdict]:
    """A throughput history: night i's three repeats at ``levels[i]`` +-1%."""
    nights = [[row(i, "output_tok_s", [v, v * 1.01, v * 0.99], **kw)] for i, v in enumerate(levels)]  # type: ignore[arg-type]
    return [n[0].metrics[0] for n in replay(nights, find=lambda values: None)]


def noisy(n: int, seed: int = 1, sd: float = 2.0) -> list[float]:
    return list(100.0 + numpy.random.default_rng(seed).normal(0.0, sd, n))


def test_a_run_of_moderately_bad_nights_is_a_regression_since_its_first() -> None:
    # 20 nights moving +-2%, then -7% three nights: no one night is beyond doubt
    levels = noisy(20) + [93.0, 93.5, 92.5]
    verdicts = judged(levels)
    assert [v.verdict for v in verdicts[:20]].count("regression") == 0
    last = verdicts[-1]
    assert last.verdict == "regression"
    assert last.since in (night_id(20), night_id(21))
    assert "the last" in last.reason and "vs baseline" in last.reason


def test_a_one_night_blip_is_not_a_regression() -> None:
    levels = noisy(20) + [80.0] + noisy(5, seed=2)
    out = judged(levels)
    verdicts = [v.verdict for v in out]
    assert verdicts[20] == "suspicious"
    assert "regression" not in verdicts and "drift" not in verdicts
    # the next night says that it clears it: a red night is never silently forgotten
    assert out[21].reason.startswith(f"clears the suspicious night {night_id(20)}")


def test_a_slow_drift_is_drift_with_the_night_it_began() -> None:
    # 10 flat nights, then -0.5% a night, each night +-1.5%: no run of nights is beyond doubt
    rng = numpy.random.default_rng(1)
    levels = [100.0 - 0.5 * max(0, i - 9) + rng.normal(0, 1.5) for i in range(30)]
    verdicts = judged(levels)
    night, found = next(
        (i, v) for i, v in enumerate(verdicts) if v.verdict in ("drift", "regression")
    )
    assert found.verdict == "drift", found.reason
    assert 15 <= night <= 20  # its total passed the 5% threshold at night 20
    assert found.since is not None and night_id(8) <= found.since <= night_id(12)
    assert "a night over the last" in found.reason and "Kendall" in found.reason
    assert EXIT_CODES["drift"] == 1


def test_nights_of_another_gpu_mode_are_judged_within_it() -> None:
    def night(i: int, level: float, clock: float) -> list[HistoryRow]:
        r = row(i, "output_tok_s", [level, level * 1.01, level * 0.99])
        return [dataclasses.replace(r, attributes=NightAttributes(sm_clock_mhz=clock))]

    fast = [night(i, 100.0, 1740.0) for i in range(6)]
    slow = [night(6 + i, 92.0, 1410.0) for i in range(5)]  # clocks down: 8% slower
    out = [n[0].metrics[0] for n in replay([*fast, *slow], find=lambda values: None)]
    first_slow = out[6]
    assert first_slow.verdict == "insufficient_data"
    assert "another operating mode (SM clock 1740 → 1410 MHz)" in first_slow.reason
    assert first_slow.changes == (Change("sm_clock_mhz", "1740", "1410"),)
    assert [v.verdict for v in out[9:]] == ["ok", "ok"]  # judged against the slow nights
    assert out[9].baseline == pytest.approx(92.0)


def test_an_inconclusive_night_says_how_unsure_and_exits_0() -> None:
    levels = noisy(10, sd=3.0) + [95.5]
    last = judged(levels)[-1]
    assert last.verdict == "inconclusive", last.reason
    assert last.interval is not None and last.change is not None
    assert last.interval[0] < last.change < -0.05 < last.interval[1]  # it may be within
    assert last.repeats_needed is not None and last.repeats_needed > last.n
    assert "95% interval" in last.reason
    assert EXIT_CODES["inconclusive"] == 0
    night = NightlyVerdict("nightly", night_id(10), ())
    assert night.exit_code == 3  # nothing judged: never a silent pass
    case = CaseVerdict(CASE, "measured", False, None, NightAttributes(), (last,))
    text = render_markdown(NightlyVerdict("nightly", night_id(10), (case,)))
    assert "## Inconclusive (past the threshold, not significant)" in text
    assert "  - why: " in text and "95% interval" in text


def test_every_verdict_has_a_heading_and_an_exit_code() -> None:
    assert set(HEADINGS) == set(VERDICT_ORDER) == set(EXIT_CODES)


def test_a_regression_stands_through_a_night_that_judged_nothing() -> None:
    # a -20% step called, then a night of one repeat (insufficient_data), then a night back
    # within the threshold: still a regression (1 of 2 nights back), never exit 0 at once
    levels = noisy(20) + [80.0, 80.5, 79.5]
    nights = [[row(i, "output_tok_s", [v, v * 1.01, v * 0.99])] for i, v in enumerate(levels)]
    nights.append([row(len(levels), "output_tok_s", [80.0])])  # one repeat: not judged
    nights.append([row(len(levels) + 1, "output_tok_s", [99.0, 100.0, 98.0])])
    # runs of two nights at most: the run test alone would call the step again tonight
    policy = Policy(run_nights=2)
    out = [n[0].metrics[0] for n in replay(nights, policy, find=lambda values: None)]
    assert [m.verdict for m in out[21:]] == [
        "regression",
        "regression",
        "insufficient_data",
        "regression",
    ]
    assert out[-1].reason.startswith(f"still in regression since {night_id(20)}: back within")


def test_recent_nights_past_the_threshold_unconfirmed_are_inconclusive_not_ok() -> None:
    # nights moving +-3%, then two nights at -6.5% and tonight at -4% (within the threshold
    # alone): the three together are past it but not significant: inconclusive, exit 0
    levels = [100.0, 103.0, 97.0, 101.0, 99.0, 104.0, 96.0, 100.0, 102.0, 98.0] * 2
    levels += [93.5, 93.5, 96.0]
    last = judged(levels)[-1]
    assert last.verdict == "inconclusive", last.reason
    assert last.reason.startswith("the last 3 nights") and "not significant" in last.reason
