"""A history judged again, night by night, as ``orch nightly`` would have judged it.

A team that wants another policy (a threshold, alpha, the baseline's length) can back-test it on
its own past before adopting it: each night's rows, stripped of what was decided then (verdict,
baseline, p-value, whether it joined later baselines), are judged against the nights before it
as this replay settled them, with the people's decisions made before that night began. Only the
history file's documented row format is read (``rows.py``, versioned), so a history written by
any tool in that format replays. Nights that measured nothing have no rows and are not in it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.config.nightly_terms import Verdict, worst
from orchestrator.nightly.changepoint import Locate, change_points
from orchestrator.nightly.history import DecisionRecord, HistoryRow
from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.verdict import Policy, judge_night, settle


@dataclass(frozen=True)
class ReplayedNight:
    """A night's verdict as replayed, beside the one the history recorded for it (None: the
    rows carry none, as a history another tool wrote may not)."""

    verdict: NightlyVerdict
    recorded: Verdict | None

    @property
    def differs(self) -> bool:
        return self.recorded is not None and self.recorded != self.verdict.verdict

    def to_json(self) -> dict[str, object]:
        return {**self.verdict.to_json(), "recorded_verdict": self.recorded}


def _fresh(row: HistoryRow) -> HistoryRow:
    return dataclasses.replace(row, verdict=None, baseline=None, p_value=None, accepted=None)


def by_night(rows: Sequence[HistoryRow]) -> list[list[HistoryRow]]:
    """The rows grouped by night, oldest first (file order within a night)."""
    nights: dict[str, list[HistoryRow]] = {}
    for row in rows:
        nights.setdefault(row.night, []).append(row)
    return sorted(nights.values(), key=lambda night: (night[0].night_time, night[0].night))


def replay_history(
    rows: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord],
    policy: Policy | None = None,
    find: Locate = change_points,
) -> list[ReplayedNight]:
    """Every night of ``rows`` judged in turn (see the module docstring); ``policy`` None: the
    default one."""
    policy = policy or Policy()
    done: list[HistoryRow] = []
    out = []
    for night in by_night(rows):
        tonight = [_fresh(r) for r in night]
        began = tonight[0].night_time
        known = {n: d for n, d in decisions.items() if d.at <= began}
        cases = judge_night(done, known, tonight, policy, find)
        done += settle(tonight, cases)
        recorded = [r.verdict for r in night if r.verdict is not None]
        verdict = NightlyVerdict(
            playbook=tonight[0].playbook,
            night=tonight[0].night,
            cases=tuple(cases),
            night_time=began,
        )
        out.append(ReplayedNight(verdict, worst(recorded) if recorded else None))
    return out
