"""`orch history replay`: a history judged again night by night, with the decisions people
made before each night, under a policy read from a playbook or a section of one."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.commands.nightly import policy_file
from orchestrator.errors import ConfigError
from orchestrator.nightly.history import DecisionRecord
from orchestrator.nightly.replay import by_night, replay_history
from orchestrator.nightly.verdict import Policy, Thresholds, replay
from tests.fixtures.cli import orch_in_process
from tests.fixtures.nightly_histories import (
    THROUGHPUT_STEP,
    Noise,
    Scenario,
    history,
    night_id,
)

POLICY = Policy(min_baseline_nights=2)


def rows_of(nights: list) -> list:  # type: ignore[type-arg]
    return [row for night in nights for row in night]


def test_a_replay_gives_what_judging_night_by_night_gave() -> None:
    nights = history(Scenario(noise=Noise(0.02, 0.01), shifts=(THROUGHPUT_STEP,)), seed=3)
    expected = replay(nights, POLICY, find=lambda values: None)
    # rows as a history file holds them, each with what was decided that night
    judged = replay_history(rows_of(nights), {}, POLICY, find=lambda values: None)
    assert [n.verdict.night for n in judged] == [night_id(i) for i in range(30)]
    assert [n.verdict.cases for n in judged] == [tuple(cases) for cases in expected]
    assert all(n.recorded is None for n in judged)  # the synthetic rows carry no verdict


def test_a_recorded_verdict_is_shown_and_stripped_before_judging() -> None:
    nights = history(Scenario(), seed=1)
    marked = [[dataclasses.replace(r, verdict="regression") for r in night] for night in nights]
    judged = replay_history(rows_of(marked), {}, POLICY, find=lambda values: None)
    assert all(n.recorded == "regression" for n in judged)
    assert judged[5].verdict.verdict == "ok" and judged[5].differs


def test_a_decision_counts_from_the_nights_after_it_was_made() -> None:
    """Night 3 rejected on the morning after night 5: nights up to 5 still had it in their
    baseline; night 6 on does not."""
    nights = history(Scenario(noise=Noise(0.0, 0.01)), seed=2)
    rows = rows_of(nights)
    rejected = night_id(3)
    at = nights[5][0].night_time + timedelta(hours=5)
    decisions = {rejected: DecisionRecord(rejected, "reject", at)}
    judged = replay_history(rows, decisions, POLICY, find=lambda values: None)

    def baseline_of(i: int) -> tuple[str, ...]:
        return judged[i].verdict.cases[0].metrics[0].baseline_nights

    assert rejected in baseline_of(5) and rejected not in baseline_of(6)


def test_nights_are_grouped_oldest_first_whatever_the_file_order() -> None:
    nights = history(Scenario(nights=4), seed=1)
    shuffled = rows_of(nights[2:]) + rows_of(nights[:2])
    assert [n[0].night for n in by_night(shuffled)] == [night_id(i) for i in range(4)]


def test_the_policy_comes_from_a_playbook_or_its_section(tmp_path: Path) -> None:
    section = tmp_path / "policy.yaml"
    section.write_text("alpha: 0.05\nmin_baseline_nights: 2\nthresholds: {ttft_ms_p99: 15%}\n")
    got = policy_file(section)
    assert (got.alpha, got.min_baseline_nights) == (0.05, 2)
    assert got.thresholds.for_metric("ttft_ms_p99") == pytest.approx(0.15)
    nested = tmp_path / "nested.yaml"
    nested.write_text("nightly:\n  alpha: 0.02\n")
    assert policy_file(nested).alpha == 0.02
    playbook = Path(__file__).parents[2] / "playbooks" / "nightly.yaml"
    assert policy_file(playbook) == Policy(thresholds=Thresholds({"ttft_ms_p99": 0.15}))
    bad = tmp_path / "bad.yaml"
    bad.write_text("nightly:\n  alpha: 2\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:.*nightly.alpha"):
        policy_file(bad)


def test_the_command_line_says_what_replay_needs(tmp_path: Path) -> None:
    missing = orch_in_process("history", "replay", cwd=tmp_path)
    assert missing.returncode == 1 and "needs the history file to judge again" in missing.stderr
    absent = orch_in_process("history", "replay", "none.jsonl", cwd=tmp_path)
    assert absent.returncode == 1 and "no history file none.jsonl" in absent.stderr
    stray = orch_in_process("history", "nightly", "x.jsonl", cwd=tmp_path)
    assert stray.returncode == 1 and "go with `orch history replay`" in stray.stderr
    (tmp_path / "empty.jsonl").write_text("")
    empty = orch_in_process("history", "replay", "empty.jsonl", cwd=tmp_path)
    assert empty.returncode == 1 and "holds no history row" in empty.stderr
