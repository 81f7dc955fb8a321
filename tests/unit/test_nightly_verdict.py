"""The nightly verdict rules on hand-made histories, with exact figures: baseline, threshold and
t-test, consecutive nights, the decisions of a person, collapses, failed nights, exit codes."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from scipy import stats

from orchestrator.config.nightly_terms import Verdict
from orchestrator.nightly.cases import Change, NightAttributes, changed_attributes
from orchestrator.nightly.history import HistoryRow
from orchestrator.nightly.report import NightlyVerdict, could_not_measure
from orchestrator.nightly.verdict import (
    CaseVerdict,
    MetricVerdict,
    Policy,
    Thresholds,
    replay,
    welch_p,
)
from tests.fixtures.nightly_histories import CASE, night_id, row

NORMAL = [100.0, 101.0, 99.0]  # mean 100, sample std 1
# The rules' mechanics on short hand-made histories of 3 repeats: a 7-night baseline and a
# single night at p < 0.01 (the defaults, 20 nights and 0.001, are for real histories:
# benchmarks/nightly.py measures them; test_nightly_model.py tests the model itself)
RULES = Policy(baseline_nights=7, alpha=0.01)
FAILED: list[float] = []  # a night whose measurements all failed


def night(
    i: int, values: list[float], name: str = "output_tok_s", **kw: object
) -> list[HistoryRow]:
    status = "failed" if values is FAILED else None
    return [row(i, name, values, status=status, **kw)]  # type: ignore[arg-type]


def judged(
    nights: list[list[float]],
    name: str = "output_tok_s",
    *,
    decisions: dict[int, str] | None = None,
    policy: Policy | None = None,
) -> list[MetricVerdict]:
    """The verdicts of metric ``name``, night by night, of a history with these values."""
    history = [night(i, values, name) for i, values in enumerate(nights)]
    by_night = {night_id(i): d for i, d in (decisions or {}).items()}
    out = replay(history, policy or RULES, by_night, find=lambda values: None)  # type: ignore[arg-type]
    return [cases[0].metrics[0] for cases in out]


def scaled(factor: float, values: list[float] = NORMAL) -> list[float]:
    return [v * factor for v in values]


@pytest.mark.parametrize(
    ("nights", "expected"),
    [
        # 10% below a steady baseline, the repeats tight: violating -> suspicious
        ([NORMAL] * 3 + [scaled(0.9)], "suspicious"),
        # a second violating night in a row: regression
        ([NORMAL] * 3 + [scaled(0.9)] * 2, "regression"),
        # 4% below, significant, but under the 5% threshold: ok
        ([NORMAL] * 3 + [scaled(0.96)], "ok"),
        # 6% below but the repeats spread (94 +/- 6): past the threshold, not significant
        ([NORMAL] * 3 + [[94.0, 100.0, 88.0]], "inconclusive"),
        # 10% above: improvement
        ([NORMAL] * 3 + [scaled(1.1)], "improvement"),
        # two baseline nights only (the minimum is 3)
        ([NORMAL] * 2 + [scaled(0.9)], "insufficient_data"),
        # one repeat tonight (the minimum is 2)
        ([NORMAL] * 3 + [[90.0]], "insufficient_data"),
        # every measurement failed: could not measure, never a regression
        ([NORMAL] * 3 + [scaled(0.9), FAILED], "could_not_measure"),
        # a failed night between two violating ones does not break the run of them
        ([NORMAL] * 3 + [scaled(0.9), FAILED, scaled(0.9)], "regression"),
        # an ok night does
        ([NORMAL] * 3 + [scaled(0.9), NORMAL, scaled(0.9)], "suspicious"),
        # a night 50% down is no baseline, nor are the nights after it that stay down
        ([NORMAL] * 3 + [scaled(0.5)] + [NORMAL] + [scaled(0.5)], "suspicious"),
        # ... and the violating night is not part of the next baseline: still a regression
        ([NORMAL] * 7 + [scaled(0.9)] * 5, "regression"),
    ],
)
def test_verdicts_of_a_throughput(nights: list[list[float]], expected: Verdict) -> None:
    assert judged(nights)[-1].verdict == expected


def test_the_baseline_is_the_median_of_the_last_7_counted_nights() -> None:
    # 7 nights at 104, 7 at 100 (each within 5% of its baseline: all counted), then 95.5
    nights = [scaled(1.04)] * 7 + [NORMAL] * 7 + [scaled(0.955)]
    last = judged(nights)[-1]
    assert (last.verdict, last.baseline) == ("ok", 100.0)
    assert last.baseline_nights == tuple(night_id(i) for i in range(7, 14))
    # over 14 nights the median would be 102: -6.4%
    wide = judged(nights, policy=dataclasses.replace(RULES, baseline_nights=14))[-1]
    assert wide.verdict == "suspicious"
    assert wide.baseline == pytest.approx(102.0)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy, identical means
def test_a_violation_carries_its_figures() -> None:
    verdicts = judged([NORMAL] * 3 + [scaled(0.9)] * 2)
    first, second = verdicts[3], verdicts[4]
    assert (first.verdict, first.baseline, first.n) == ("suspicious", 100.0, 3)
    assert first.change == pytest.approx(-0.10)
    assert first.baseline_nights == tuple(night_id(i) for i in range(3))
    assert (first.since, first.violating_nights, first.last_good) == (
        night_id(3),
        (night_id(3),),
        night_id(2),
    )
    assert second.verdict == "regression"
    assert (second.since, second.violating_nights) == (night_id(3), (night_id(3), night_id(4)))
    # the larger of two p: tonight's repeats against one value per baseline night (their
    # means: 100, 100, 100), and tonight's mean against the night model, whose spread is
    # never below a night's own standard error (here 1 / sqrt(3): the nights do not vary)
    means = [statistics.fmean(NORMAL)] * 3
    welch = stats.ttest_ind(scaled(0.9), means, equal_var=False, alternative="less").pvalue
    model = stats.t.sf(10.0 / ((1 / 3) ** 0.5 * (1 + 1 / 3) ** 0.5), 2)
    assert model > welch
    assert second.p_value == pytest.approx(float(model), rel=1e-9)


def test_a_night_past_the_threshold_but_not_significant_is_inconclusive_and_counts() -> None:
    # nights 3 and 4 at -6% (spread repeats) and -4%: inconclusive, then ok; both join later
    # baselines (leaving the worse nights out would narrow the spread and lift the center)
    history = [
        night(i, v) for i, v in enumerate([NORMAL] * 3 + [[94.0, 100.0, 88.0], scaled(0.96)])
    ]
    out = replay(history, RULES, find=lambda values: None)
    assert [c[0].metrics[0].verdict for c in out[3:]] == ["inconclusive", "ok"]
    assert [c[0].metrics[0].past_threshold for c in out[3:]] == [True, False]
    first = out[3][0].metrics[0]
    assert first.interval is not None and first.interval[0] < -0.05 < first.interval[1]
    assert "95% interval" in first.reason
    follow = replay([*history, night(5, NORMAL)], RULES, find=lambda values: None)
    assert follow[5][0].metrics[0].baseline_nights == tuple(night_id(i) for i in range(5))


@pytest.mark.parametrize(
    ("name", "nights", "expected"),
    [
        # lower is better: +15% TTFT against a 10% threshold
        ("ttft_ms_p99", [NORMAL] * 3 + [scaled(1.15)], "suspicious"),
        ("ttft_ms_p99", [NORMAL] * 3 + [scaled(1.075)], "ok"),
        ("ttft_ms_median", [NORMAL] * 3 + [scaled(0.85)], "improvement"),
        # acceptance: 5%
        ("acceptance_length", [scaled(0.03)] * 3 + [scaled(0.03 * 0.94)], "suspicious"),
        ("acceptance_pos_2", [scaled(0.006)] * 3 + [scaled(0.006 * 0.96)], "ok"),
        # 2% of requests failed (threshold: 0.01): the night's figures are not to be trusted
        ("failure_rate", [[0.0, 0.0, 0.0]] * 3 + [[0.02, 0.02, 0.02]], "could_not_measure"),
        ("failure_rate", [[0.0, 0.0, 0.0]] * 3 + [[0.005, 0.005, 0.005]], "ok"),
        ("failure_rate", [[0.0, 0.0, 0.0]] * 3 + [[0.0, 0.0, 0.0]], "ok"),
    ],
)
def test_directions_and_thresholds_of_each_metric(
    name: str, nights: list[list[float]], expected: Verdict
) -> None:
    assert judged(nights, name)[-1].verdict == expected


def test_thresholds_are_settable_per_metric() -> None:
    nights = [NORMAL] * 5 + [scaled(0.96)]
    assert judged(nights)[-1].verdict == "ok"
    strict = dataclasses.replace(RULES, thresholds=Thresholds({"output_tok_s": 0.03}))
    assert judged(nights, policy=strict)[-1].verdict == "suspicious"
    positions = Thresholds({"acceptance_pos": 0.2, "acceptance_pos_3": 0.01})
    assert (positions.for_metric("acceptance_pos_1"), positions.for_metric("acceptance_pos_3")) == (
        0.2,
        0.01,
    )
    assert positions.for_metric("tpot_ms_p99") == 0.10


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"throughput": 0.05}, "unknown nightly metric 'throughput'"),
        ({"output_tok_s": -0.1}, "threshold of output_tok_s: -0.1 is not a number >= 0"),
        ({"acceptance_pos_0": 0.1}, "unknown nightly metric 'acceptance_pos_0'"),
    ],
)
def test_a_wrong_threshold_is_named(overrides: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Thresholds(overrides)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"baseline_nights": 2}, "need 1 <= min_baseline_nights <= baseline_nights"),
        ({"min_repeats": 1}, "a t-test needs at least 2 repeats"),
        ({"alpha": 0.0}, "between 0 and 1"),
    ],
)
def test_a_wrong_policy_is_named(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**kwargs)  # type: ignore[arg-type]


def test_a_rejected_night_is_out_of_the_baseline_and_of_the_run() -> None:
    nights = [NORMAL] * 3 + [scaled(0.5), scaled(0.9)]
    assert judged(nights)[-1].verdict == "regression"
    verdicts = judged(nights, decisions={3: "reject"})
    assert verdicts[-1].verdict == "suspicious"
    assert night_id(3) not in verdicts[-1].baseline_nights


def test_accepting_a_night_starts_the_baseline_again_from_it() -> None:
    """No blind night after an accepted change: fewer baseline nights than the policy's
    minimum are enough when a person accepted them."""
    nights = [NORMAL] * 3 + [scaled(0.9)] * 6
    plain = [v.verdict for v in judged(nights)]
    assert plain[3:] == ["suspicious"] + ["regression"] * 5
    accepted = judged(nights, decisions={4: "accept"})
    assert [v.verdict for v in accepted][3:] == [
        *("suspicious", "regression"),  # as judged before the decision
        *("ok", "ok", "ok", "ok"),  # the accepted night seeds the new normal at once (issue 24)
    ]
    assert accepted[5].baseline_nights == (night_id(4),)  # one night: judged all the same
    assert accepted[7].baseline == pytest.approx(90.0)
    assert accepted[7].baseline_nights == tuple(night_id(i) for i in (4, 5, 6))


def test_a_regression_stands_until_two_nights_back_within_the_threshold() -> None:
    """Issue 24: a called regression never goes back to exit 0 on one good night; two nights
    running back within the threshold are ``recovered``; a step that stays stays regression."""
    back = judged([NORMAL] * 3 + [scaled(0.9)] * 2 + [NORMAL] * 3)
    assert [v.verdict for v in back][3:] == [
        *("suspicious", "regression"),
        "regression",  # back within the threshold 1 of 2 nights: still exit 1
        *("recovered", "ok"),
    ]
    assert back[5].since == night_id(3) and "still in regression since" in back[5].reason
    assert back[6].reason.startswith("back within the threshold 2 nights running")
    assert night_id(6) in back[7].baseline_nights  # the recovered night counts again
    assert night_id(5) not in back[7].baseline_nights  # the one still in regression does not
    stays = judged([NORMAL] * 3 + [scaled(0.9)] * 8)
    assert [v.verdict for v in stays][4:] == ["regression"] * 7
    # a night still past the threshold but not significant is no recovery: still regression
    vague = judged([NORMAL] * 3 + [scaled(0.9)] * 2 + [[100.0, 80.0, 90.0]] + [NORMAL] * 2)
    assert vague[5].past_threshold and vague[5].p_value is not None and vague[5].p_value > 0.01
    assert [v.verdict for v in vague][5:] == ["regression", "regression", "recovered"]
    # a person's accept of the step ends it at once: the next good night is just ok
    accepted = judged([NORMAL] * 3 + [scaled(0.9)] * 2 + [NORMAL], decisions={4: "accept"})
    assert accepted[5].verdict == "improvement"  # +11% on the accepted normal, no regression


@pytest.mark.parametrize(
    ("decisions", "baseline_nights"),
    [
        ({3: "accept", 4: "accept"}, (3, 4, 5)),  # both nights of the step: the new normal
        ({3: "accept", 4: "reject", 5: "accept"}, (3, 5)),  # a rejected night does not break it
        ({3: "accept", 5: "accept"}, (5,)),  # night 4 in between was not accepted
    ],
)
def test_accepted_nights_in_a_row_all_start_the_new_normal(
    decisions: dict[int, str], baseline_nights: tuple[int, ...]
) -> None:
    nights = [NORMAL] * 3 + [scaled(0.9)] * 4
    verdicts = judged(nights, decisions=decisions, policy=Policy(min_baseline_nights=1))
    assert verdicts[6].baseline_nights == tuple(night_id(i) for i in baseline_nights)
    assert verdicts[6].verdict == "ok"


def two_metrics(i: int, tok_s: list[float], failed: list[float]) -> list[HistoryRow]:
    return [row(i, "output_tok_s", tok_s), row(i, "failure_rate", failed)]


@pytest.mark.parametrize(
    "tonight",
    [
        [0.9, 0.0, 0.0],  # 90% failed in one repeat: the t-test alone would call it ok
        [0.5, 0.5, 0.0],
        [0.02, 0.02, 0.02],  # two such nights must never make a regression
    ],
)
def test_failed_requests_make_a_case_could_not_measure_never_ok(tonight: list[float]) -> None:
    history = [two_metrics(i, NORMAL, [0.0, 0.0, 0.0]) for i in range(7)]
    history += [two_metrics(7, scaled(0.9), tonight), two_metrics(8, scaled(0.9), tonight)]
    out = replay(history, find=lambda values: None)
    for night_cases in out[7:]:
        [case] = night_cases
        assert [m.verdict for m in case.metrics] == ["could_not_measure"] * 2
        assert case.metrics[0].reason.startswith(f"{max(tonight):.1%} of requests failed")
    # and those nights are in no later baseline
    after = replay([*history, two_metrics(9, NORMAL, [0.0] * 3)], find=lambda values: None)
    assert night_id(7) not in after[9][0].metrics[0].baseline_nights


def test_a_failed_repeat_makes_the_case_could_not_measure() -> None:
    history = [night(i, NORMAL) for i in range(3)]
    broken = dataclasses.replace(row(3, "output_tok_s", scaled(0.9)[:2]), failed_repeats=1)
    [case] = replay([*history, [broken]], find=lambda values: None)[3]
    assert case.metrics[0].verdict == "could_not_measure"
    assert case.metrics[0].reason.startswith("1 of 3 measurements failed; ")
    # the first failure's own message is named: a saturated client is not a dead host
    why = "client saturated: 12.5% of requests had their first token chunk read together"
    noted = dataclasses.replace(broken, note=why)
    [case] = replay([*history, [noted]], find=lambda values: None)[3]
    assert case.metrics[0].reason.startswith(f"1 of 3 measurements failed (the first: {why}); ")


def test_a_collapsed_night_is_in_no_baseline() -> None:
    history = [night(i, NORMAL) for i in range(3)]
    history.append([row(3, "output_tok_s", NORMAL, collapse=True)])
    history += [night(i, NORMAL) for i in (4, 5)]
    out = replay(history, find=lambda values: None)
    assert night_id(3) not in out[5][0].metrics[0].baseline_nights


def test_a_collapse_fails_the_acceptance_figures_whatever_the_history() -> None:
    rows = [
        row(0, "acceptance_length", [1.1, 1.1], collapse=True),
        row(0, "acceptance_pos_1", [0.05, 0.05], collapse=True),
        row(0, "output_tok_s", [50.0, 51.0], collapse=True),
    ]
    [[case]] = replay([rows], find=lambda values: None)
    assert [(m.metric, m.verdict) for m in case.metrics] == [
        ("acceptance_length", "failure"),
        ("acceptance_pos_1", "failure"),
        ("output_tok_s", "insufficient_data"),  # no history: judged as any figure
    ]
    assert case.verdict == "failure"
    assert case.metrics[0].reason == "acceptance collapse: drafts rejected"


def test_the_attributes_that_changed_between_the_last_good_and_the_first_bad_night() -> None:
    good = NightAttributes(engine_version="0.9.0", driver_version="550.1", hosts=("a",))
    bad = NightAttributes(engine_version="0.9.1", driver_version="550.1", hosts=("a", "b"))
    assert changed_attributes(good, bad) == [
        Change("engine_version", "0.9.0", "0.9.1"),
        Change("hosts", "a", "a, b"),
    ]
    assert changed_attributes(good, good) == []
    assert Change("engine_version", None, "0.9.1").text == "engine_version - → 0.9.1"


def test_the_gpus_operating_mode_is_named_past_its_noise() -> None:
    """A busy clock 2% lower or a throttling share of 3% is a night's noise; 1740 -> 1410 MHz
    under sw_thermal for 40% of the window is a change, and names the night's mode."""
    good = NightAttributes(sm_clock_mhz=1740.0, power_limit_w=300.0, throttled_pct=0.0)
    noise = NightAttributes(sm_clock_mhz=1705.0, power_limit_w=300.0, throttled_pct=3.0,
                            throttle_reasons="sw_power_cap")  # fmt: skip
    assert changed_attributes(good, noise) == [] and noise.mode is None
    hot = NightAttributes(sm_clock_mhz=1410.0, power_limit_w=250.0, throttled_pct=40.0,
                          throttle_reasons="sw_thermal")  # fmt: skip
    changes = changed_attributes(good, hot)
    assert [c.text for c in changes] == [
        "SM clock 1740 → 1410 MHz",
        "power limit 300 → 250 W",
        "throttled 0 → 40% of the window",
        "throttle reasons - → sw_thermal",
    ]
    assert hot.mode == "GPUs throttled 40% of the window (sw_thermal), SM clock 1410 MHz"
    merged = NightAttributes.merge([hot, good])
    assert (merged.sm_clock_mhz, merged.power_limit_w, merged.throttled_pct) == (
        1575.0,
        250.0,
        40.0,
    )
    assert merged.throttle_reasons == "sw_thermal"


def test_a_regression_names_what_changed_and_where_the_shift_began() -> None:
    nights = [
        [
            row(
                i,
                "output_tok_s",
                scaled(0.9 if i >= 4 else 1.0),
                version="0.9.1" if i >= 4 else "0.9.0",
            )
        ]
        for i in range(6)
    ]
    calls: list[list[float]] = []

    def find(values: list[float]) -> list[int]:
        calls.append(list(values))
        return [4]

    verdict = replay(nights, RULES, find=find)[5][0].metrics[0]  # type: ignore[arg-type]
    assert (verdict.verdict, verdict.since, verdict.last_good) == (
        "regression",
        night_id(4),
        night_id(3),
    )
    assert verdict.changes == (Change("engine_version", "0.9.0", "0.9.1"),)
    assert calls == [[100.0] * 4 + [90.0] * 2]  # asked once, over every night up to tonight
    assert verdict.change_point == night_id(4)


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # scipy, no spread
@pytest.mark.parametrize(
    ("night_values", "base_values", "worse_when"),
    [
        ([90.0, 91.0, 89.0], NORMAL * 3, "less"),
        ([94.0, 100.0, 88.0], NORMAL * 3, "less"),
        ([230.0, 215.0, 240.0], [200.0, 205.0, 198.0, 202.0], "greater"),
        ([1.0, 2.0], [1.5, 1.5, 1.5], "greater"),  # no spread on one side
    ],
)
def test_welch_p_is_scipys_one_sided_welch_test(
    night_values: list[float], base_values: list[float], worse_when: str
) -> None:
    expected = stats.ttest_ind(night_values, base_values, equal_var=False, alternative=worse_when)
    assert welch_p(night_values, base_values, worse_when) == pytest.approx(
        float(expected.pvalue), rel=1e-9
    )


@pytest.mark.parametrize(
    ("night_values", "base_values", "worse_when", "p"),  # ttest_ind: NaN for the last
    [
        ([2.0, 2.0], [1.0, 1.0], "greater", 0.0),
        ([2.0, 2.0], [1.0, 1.0], "less", 1.0),
        ([1.0, 1.0], [1.0, 1.0], "less", 1.0),
    ],
)
def test_welch_p_without_any_spread(
    night_values: list[float], base_values: list[float], worse_when: str, p: float
) -> None:
    assert welch_p(night_values, base_values, worse_when) == p


def _case(*verdicts: Verdict) -> CaseVerdict:
    metrics = tuple(MetricVerdict("output_tok_s", "higher", "tok/s", v, "") for v in verdicts)
    return CaseVerdict(CASE, "measured", False, None, NightAttributes(), metrics)


@pytest.mark.parametrize(
    ("cases", "verdict", "exit_code"),
    [
        ([("ok", "ok")], "ok", 0),
        ([("ok", "improvement")], "improvement", 0),
        ([("ok", "suspicious")], "suspicious", 2),
        ([("regression", "suspicious")], "regression", 1),
        ([("ok",), ("failure",)], "failure", 1),
        ([("could_not_measure",)], "could_not_measure", 3),
        ([("ok",), ("insufficient_data",)], "insufficient_data", 3),
        ([("suspicious",), ("could_not_measure",)], "suspicious", 2),
        ([("regression",), ("could_not_measure",)], "regression", 1),
    ],
)
def test_exit_codes(cases: list[tuple[Verdict, ...]], verdict: Verdict, exit_code: int) -> None:
    result = NightlyVerdict("nightly", night_id(0), tuple(_case(*c) for c in cases))
    assert (result.verdict, result.exit_code) == (verdict, exit_code)


def test_a_night_that_measured_nothing_exits_3() -> None:
    result = could_not_measure("nightly", night_id(0), "gpu-1: host unreachable")
    assert (result.verdict, result.exit_code, result.notes) == (
        "could_not_measure",
        3,
        ("gpu-1: host unreachable",),
    )


def test_otava_sees_the_measured_nights_a_person_did_not_reject() -> None:
    levels = [1.0, 0.5, 1.0, 1.0, FAILED, 1.0, 0.9, 0.9]  # night 1 broken, night 4 host down
    nights = [night(i, FAILED if v is FAILED else scaled(v)) for i, v in enumerate(levels)]  # type: ignore[arg-type]
    calls: list[list[float]] = []

    def find(values: list[float]) -> list[int]:
        calls.append([round(v, 6) for v in values])
        return [len(values) - 2]

    decisions = {night_id(1): "reject"}
    verdict = replay(nights, RULES, decisions=decisions, find=find)[7][0].metrics[0]  # type: ignore[arg-type]
    assert calls == [[100.0, 100.0, 100.0, 100.0, 90.0, 90.0]]  # nights 0, 2, 3, 5, 6, 7
    assert (verdict.verdict, verdict.change_point) == ("regression", night_id(6))


def test_a_night_within_the_ordinary_night_to_night_spread_is_not_a_violation() -> None:
    # nights move by +-4% as a whole, each with tight repeats; tonight 6% down, tight too:
    # Welch over the repeats alone calls that significant, the nights' own spread does not
    moves = [1.0, 1.04, 0.96, 1.03, 0.97, 1.04, 0.96]
    nights = [[100.0 * m, 100.2 * m, 99.8 * m] for m in moves] + [[94.0, 94.2, 93.8]]
    last = judged(nights)[-1]
    assert last.verdict == "inconclusive"
    assert "past the threshold, not significant" in last.reason
    # the nights move 4% as a whole: more repeats would not have decided it, more nights will
    assert last.repeats_needed is None
    assert "more repeats would not decide it" in last.reason
