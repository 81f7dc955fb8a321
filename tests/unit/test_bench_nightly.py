"""The nightly detection benchmark's parts: seeded histories with what each scenario injects,
the two reference rules on histories whose answer is known, and how a history is counted."""

from __future__ import annotations

import statistics

from benchmarks.nightly import (
    CHANGE_AT,
    SCENARIOS,
    Figures,
    Scenario,
    count,
    first_cumulative_past_threshold,
    night_means,
    run,
    simple_rule,
    split_rule,
    targets,
)

STILL = Scenario("still", noise=0.0, repeat_noise=0.0)


def means(scenario: Scenario, seed: int = 1) -> list[float]:
    return [statistics.fmean(values) for values, _ in night_means(scenario, seed, 3)]


def test_histories_are_seeded_and_inject_what_they_say() -> None:
    noisy = SCENARIOS[1]
    assert night_means(noisy, 4, 5) == night_means(noisy, 4, 5) != night_means(noisy, 5, 5)
    assert means(STILL) == [1000.0] * 30
    step = means(Scenario("s", noise=0.0, repeat_noise=0.0, step=-0.10))
    assert step[:CHANGE_AT] == [1000.0] * CHANGE_AT and step[CHANGE_AT:] == [900.0] * 10
    blip = means(Scenario("b", noise=0.0, repeat_noise=0.0, blip=-0.2))
    assert blip[CHANGE_AT] == 800.0 and blip[CHANGE_AT + 1] == 1000.0
    latency = means(Scenario("l", noise=0.0, repeat_noise=0.0, metric="ttft_ms_p99", step=0.15))
    assert latency[-1] == 800.0 * 1.15  # a latency step is a rise
    modes = {m for _, m in night_means(Scenario("m", modes=(0.0, -0.07)), 1, 3)}
    assert modes == {0, 1}
    drift = Scenario("d", drift=-0.003)
    assert first_cumulative_past_threshold(drift) == 17  # -0.3% x 17 nights passes 5%


def test_the_reference_rules_on_a_clean_step() -> None:
    step = Scenario("s", noise=0.0, repeat_noise=0.0, step=-0.10)
    history = night_means(step, 1, 3)
    simple = simple_rule(step, history)
    assert simple.index("regression") == CHANGE_AT + 1  # two nights in a row
    assert "regression" not in split_rule(step, history)[: CHANGE_AT + 1]
    quiet = night_means(STILL, 1, 3)
    assert set(simple_rule(STILL, quiet)) == set(split_rule(STILL, quiet)) == {"ok"}


def test_a_history_is_counted_against_its_change() -> None:
    step = Scenario("s", step=-0.10)
    found = Figures()
    count(step, ["ok"] * 22 + ["regression"] + ["ok"] + ["regression"] * 6, found)
    assert (found.histories, found.false_regression, found.called, found.back_to_ok) == (1, 0, 1, 1)
    assert found.caught == {21: 0, 22: 1, 23: 1, 24: 1, 29: 1}
    drifted = Figures()  # a drift (exit 1) catches a change as a regression does
    count(step, ["ok"] * 21 + ["drift"] * 9, drifted)
    assert (drifted.called, drifted.caught[21], drifted.back_to_ok) == (1, 1, 0)
    quiet = Figures()
    count(STILL, ["ok"] * 5 + ["suspicious"] + ["regression"] + ["ok"] * 23, quiet)
    assert (quiet.false_regression, quiet.suspicious, quiet.called) == (1, 1, 0)


def test_every_scenario_and_rule_runs_and_the_targets_read_orchs_rows() -> None:
    found = run(seeds=2, repeats=5)
    assert len(found) == 3 * len(SCENARIOS)
    assert all(f.histories == 2 for f in found.values())
    checked = targets(found)
    assert len(checked) == 15 and all(0 <= t.value <= 100 for t in checked)
