"""Detection on seeded synthetic histories of 30 nights (``tests.fixtures.nightly_histories``):
no false regression in a steady history, a 10% throughput step called and located, a 10%
acceptance drop caught the first night, a 2% drift never called a regression, a host down and
a collapse with their exit codes.

Each figure is counted over the same 40 seeds, so a test is deterministic. These histories
have run-to-run noise only; the night-to-night noise, operating modes, drifts and blips the
nightly must also stand are measured by ``python -m benchmarks.nightly`` (200 seeds a scenario,
``benchmarks/results/nightly.md``, quoted in the README)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.verdict import replay
from tests.fixtures.nightly_histories import (
    ACCEPTANCE_DROP,
    SMALL_DRIFT,
    SMALL_STEP,
    THROUGHPUT_STEP,
    Noise,
    Scenario,
    Shift,
    first,
    history,
    night_id,
    verdicts_of,
)

SEEDS = range(40)
THREE = Scenario(noise=Noise(0.0, 0.03), repeats=3)  # the "a few percent"
FIVE = replace(THREE, repeats=5)


def no_locate(values: object) -> None:
    return None


def every_verdict(scenario: Scenario, seed: int) -> list[str]:
    nights = replay(history(scenario, seed), find=no_locate)
    return [m.verdict for night in nights for m in night[0].metrics]


@pytest.mark.parametrize("scenario", [THREE, FIVE], ids=["3 repeats", "5 repeats"])
def test_a_steady_history_never_raises_a_regression(scenario: Scenario) -> None:
    false = [seed for seed in SEEDS if "regression" in every_verdict(scenario, seed)]
    assert false == []


@pytest.mark.parametrize("shift", [SMALL_STEP, SMALL_DRIFT], ids=["2% step", "2% drift"])
def test_a_change_under_the_threshold_is_never_a_regression(shift: Shift) -> None:
    scenario = replace(THREE, shifts=(shift,))
    assert [seed for seed in SEEDS if "regression" in every_verdict(scenario, seed)] == []


def step_nights(scenario: Scenario) -> list[int | None]:
    """The night a regression of output tok/s is first called, per seed."""
    stepped = replace(scenario, shifts=(THROUGHPUT_STEP,))
    out = []
    for seed in SEEDS:
        seen = verdicts_of(replay(history(stepped, seed), find=no_locate), "output_tok_s")
        assert "regression" not in seen[:20]
        out.append(first(seen, ("regression",), 20))
    return out


def test_a_10pct_step_is_a_regression_by_night_21_with_5_repeats() -> None:
    called = step_nights(FIVE)
    on_time = sum(1 for night in called if night is not None and night <= 21)
    assert on_time >= 0.95 * len(SEEDS)
    assert all(night is not None and night <= 23 for night in called)


def test_a_10pct_step_is_a_regression_a_few_nights_later_with_3_repeats() -> None:
    # over 200 seeds: 50% by night 21, 84% by night 23, 91.5% by night 25, 98% by night 29
    called = step_nights(THREE)
    assert sum(1 for night in called if night is not None and night <= 25) >= 0.85 * len(SEEDS)
    assert sum(1 for night in called if night is not None) >= 0.95 * len(SEEDS)


def test_otava_locates_the_step_at_night_20_when_it_is_called() -> None:
    pytest.importorskip(
        "otava.analysis", reason="Apache Otava is optional: pip install 'orch[nightly]'"
    )
    stepped = replace(FIVE, shifts=(THROUGHPUT_STEP,))
    located = []
    for seed in SEEDS:
        nights = replay(history(stepped, seed))
        called = first(verdicts_of(nights, "output_tok_s"), ("regression",), 20)
        assert called is not None
        found = next(m for m in nights[called][0].metrics if m.metric == "output_tok_s")
        located.append(found.change_point)
    assert located.count(night_id(20)) >= 0.95 * len(SEEDS)


def test_a_10pct_acceptance_drop_is_caught_the_first_night() -> None:
    dropped = replace(THREE, shifts=(ACCEPTANCE_DROP,))
    for seed in SEEDS:
        seen = verdicts_of(replay(history(dropped, seed), find=no_locate), "acceptance_length")
        assert seen[20] in ("suspicious", "regression"), seed
        assert seen[21] == "regression", seed


def night_exit_codes(scenario: Scenario, seed: int = 0) -> list[int]:
    nights = replay(history(scenario, seed), find=no_locate)
    return [
        NightlyVerdict("nightly", night_id(i), tuple(c)).exit_code for i, c in enumerate(nights)
    ]


def test_exit_codes_over_a_history_with_a_host_down_a_step_and_a_collapse() -> None:
    steady = replace(THREE, nights=12, noise=Noise(0.0, 0.005))
    assert night_exit_codes(steady) == [3, 3, 3] + [0] * 9  # too few nights, then fine
    # the host is down on night 5: could not measure (3), never a regression (1)
    assert night_exit_codes(replace(steady, failed_at=(5,))) == [3, 3, 3, 0, 0, 3] + [0] * 6
    # a 10% step from night 8: suspicious (2), then regression (1) every night after
    step = replace(THROUGHPUT_STEP, at=8)
    assert night_exit_codes(replace(steady, shifts=(step,))) == [3, 3, 3] + [0] * 5 + [2] + [1] * 3
    # ... with the host down on night 9: the run of violating nights goes on past it
    down = replace(steady, shifts=(step,), failed_at=(9,))
    assert night_exit_codes(down) == [3, 3, 3] + [0] * 5 + [2, 3, 1, 1]
    # a collapse is a failure (1) whatever the history, on night 1 too; the collapsed night is
    # no baseline for acceptance, so night 3 still has only 2 baseline nights for it (3)
    collapsed = night_exit_codes(replace(steady, collapse_at=(1, 6)))
    assert collapsed == [3, 1, 3, 3, 0, 0, 1] + [0] * 5
