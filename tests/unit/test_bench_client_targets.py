"""The client benchmark judges only figures orch would report: a rung orch marked failed gives
no figure, and capacity takes only rungs within orch's accuracy bar, orch's and the peers'."""

from __future__ import annotations

import pytest

from benchmarks.client_ladder import MAX_STEP_MS, MIN_STEP_MS, next_step, rung
from benchmarks.client_peers import ToolRun
from benchmarks.client_sim import Case, Truth
from benchmarks.client_targets import BAR_PCT, Measured, capacity, targets
from benchmarks.common import Target
from orchestrator.results.validity import ACCURACY_BAR


def ladder(step_ms: float, concurrency: int = 64) -> Case:
    return Case("plain", concurrency, step_ms, 1, 128, concurrency * 2, ladder=concurrency == 64)


def m(
    case: Case,
    tool: str,
    tok_s: float,
    truth_tok_s: float,
    tpot_err: float = 0.0,
    *,
    flagged: str | None = None,
    ttft_ms: float = 10.0,
) -> Measured:
    """A measurement whose tok/s is ``tok_s`` against ``truth_tok_s``, its TPOT off the truth's
    10 ms by ``tpot_err`` %."""
    run = ToolRun(
        tool,
        tok_s=tok_s,
        tpot_ms=10.0 * (1 + tpot_err / 100),
        ttft_ms=ttft_ms,
        flagged=flagged,
    )
    return Measured(case, run, Truth(128, 16384, truth_tok_s, 5.0, 10.0, 10.0))


def by_name(found: list[Target], start: str) -> Target:
    (target,) = [t for t in found if t.name.startswith(start)]
    return target


def test_the_bar_is_orchs_own() -> None:
    assert BAR_PCT == ACCURACY_BAR * 100 == 5.0


def test_capacity_skips_rungs_orch_marked_failed_and_peers_out_of_the_bar() -> None:
    rows = [
        m(ladder(20), "orch", 3_100, 3_110),
        m(ladder(10), "orch", 6_200, 6_210, tpot_err=-0.5),  # orch's best ok rung
        m(ladder(5), "orch", 11_400, 11_410, tpot_err=-2.2, flagged="ClientSaturated"),
        m(ladder(2.5), "orch", 16_300, 16_330, tpot_err=-6.1, flagged="ClientSaturated"),
        m(ladder(10), "AIPerf", 2_500, 2_600, tpot_err=3.0),  # tok/s -3.8%: in
        m(ladder(5), "AIPerf", 2_900, 2_990, tpot_err=4.9),  # in: the peers' best
        m(ladder(2.5), "AIPerf", 3_400, 3_450, tpot_err=-5.1),  # TPOT out of the bar
        m(ladder(2.5), "GuideLLM", 4_000, 4_300, tpot_err=1.0),  # tok/s -7%: out
        m(ladder(40, 256), "orch", 9_000, 9_000),  # not the ladder
    ]
    found = capacity(rows)
    assert found is not None
    assert (found.orch.run.tok_s, found.orch.case.step_ms) == (6_200, 10)
    assert (found.peer.run.tool, found.peer.run.tok_s) == ("AIPerf", 2_900)
    assert found.ratio == pytest.approx(6_200 / 2_900)
    target = by_name(targets(rows)[0], "orch capacity")
    assert target.value == pytest.approx(6_200 / 2_900) and target.met


def test_an_ok_orch_rung_outside_the_bar_gives_no_capacity() -> None:
    rows = [
        m(ladder(20), "orch", 3_000, 3_200),  # ok, but tok/s -6.25%
        m(ladder(20), "AIPerf", 2_800, 2_900),
    ]
    assert capacity(rows) is None
    found, lines = targets(rows)
    assert not [t for t in found if t.name.startswith("orch capacity")]
    assert any(line.startswith("Not evaluated: capacity") for line in lines)


def test_tpot_targets_judge_only_rungs_orch_reports_ok_and_count_the_failed() -> None:
    rows = [
        m(ladder(20), "orch", 3_100, 3_110, tpot_err=0.4),
        m(ladder(10), "orch", 6_200, 6_210, tpot_err=-0.8),
        m(ladder(5), "orch", 11_400, 11_410, tpot_err=-6.1, flagged="ClientSaturated"),
        m(ladder(40, 256), "orch", 5_800, 5_810, tpot_err=1.5),  # ok and off: a miss
        m(ladder(200, 1024), "orch", 4_400, 4_400, tpot_err=-0.7, flagged="ClientSaturated"),
        m(ladder(20), "AIPerf", 2_800, 2_900, tpot_err=9.0),  # a peer's error is not orch's
    ]
    found, lines = targets(rows)
    low = by_name(found, "orch TPOT error up to 256 streams")
    assert low.value == pytest.approx(1.5) and not low.met
    assert "over the 3 rungs orch reports ok" in low.name
    assert not [t for t in found if t.name.startswith("orch TPOT error at 1024")]
    (failed,) = [line for line in lines if "marked 1 of 4 rungs failed" in line]
    assert "plain c=64, 5 ms/step" in failed
    (none_ok,) = [line for line in lines if line.startswith("Not evaluated: orch TPOT")]
    assert "1024 streams (no rung orch reports ok)" in none_ok and "1 of 1 rungs" in none_ok


def test_ttft_is_compared_only_where_orch_is_ok_and_aiperf_within_the_bar() -> None:
    slow, fast = ladder(40, 256), ladder(20, 256)
    rows = [
        m(slow, "orch", 5_800, 5_810, ttft_ms=40.0),  # |err| 35 ms
        m(slow, "AIPerf", 4_100, 4_300, ttft_ms=300.0),  # tok/s -4.7%: in, |err| 295 ms
        m(fast, "orch", 9_000, 9_010, ttft_ms=90.0, flagged="ClientSaturated"),
        m(fast, "AIPerf", 4_500, 4_550, ttft_ms=6.0),  # in, but orch failed here
    ]
    target = by_name(targets(rows)[0], "orch TTFT")
    assert target.value == pytest.approx(35.0 - 295.0)
    out_of_bar = [rows[0], m(slow, "AIPerf", 4_000, 4_400, ttft_ms=300.0)]  # tok/s -9%
    found, lines = targets(out_of_bar)
    assert not [t for t in found if t.name.startswith("orch TTFT")]
    assert any(line.startswith("Not evaluated: TTFT") for line in lines)


def test_the_ladder_doubles_until_orch_fails_then_narrows_the_end() -> None:
    assert next_step({20.0: True}) == 10.0
    assert next_step({20.0: True, 10.0: True, 5.0: True, 2.5: True}) == MIN_STEP_MS
    assert next_step({20.0: True, MIN_STEP_MS: True}) is None  # the simulator's limit
    assert next_step({20.0: True, 5.0: False, 2.5: False}) == 10.0
    assert next_step({20.0: True, 10.0: True, 5.0: False}) == pytest.approx(7.07)
    assert next_step({10.0: True, 8.5: False}) is None  # close enough on a noisy machine
    assert next_step({200.0: False}) == 400.0  # every rung failed: slower
    assert next_step({MAX_STEP_MS: False}) is None
    # a failed rung slower than an ok one: its end is below the slowest failure
    assert next_step({40.0: True, 20.0: False, 10.0: True}) == pytest.approx(28.28)


def test_an_added_rung_keeps_the_shape_and_about_its_window() -> None:
    base = Case("plain", 64, 20, 1, 128, 128, ladder=True)  # 2 waves of 128 steps: 5.12 s
    added = rung(base, 5)
    assert (added.mode, added.concurrency, added.max_tokens, added.ladder) == (
        "plain",
        64,
        128,
        True,
    )
    assert added.added and added.num_prompts == 64 * 8 and added.offered_tok_s == 12_800
    assert rung(base, 40).num_prompts == 64 * 2  # at least 2 waves
