"""One night end to end: its results folder's rows, judged against the playbook's history,
appended to it, as a ``NightlyVerdict`` (``report.write_nightly`` writes it out).

This is what ``orch nightly`` calls once the playbook has run; a night already in the history
is judged again with ``append=False`` (its own rows are never part of its baseline).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.nightly.changepoint import INSTALL_HINT, NOT_INSTALLED, Locate, change_points
from orchestrator.nightly.history import History
from orchestrator.nightly.record import record_night
from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.verdict import Policy, judge_night, settle


def judge_results(
    results_dir: Path | str,
    *,
    results_root: Path | str | None = None,
    policy: Policy | None = None,
    playbook: str | None = None,
    append: bool = True,
    find: Locate = change_points,
) -> NightlyVerdict:
    """Judge the night ``results_dir`` holds against the history under ``results_root`` (the
    folder holding ``results_dir`` by default), and append its rows (``append``)."""
    results_dir = Path(results_dir)
    rows = record_night(results_dir, playbook=playbook)
    history = History(
        results_root if results_root is not None else results_dir.parent, rows[0].playbook
    )
    cases = judge_night(history.rows(), history.decisions(), rows, policy or Policy(), find)
    if append:
        history.append(settle(rows, cases))
    notes = list(dict.fromkeys(history.problems))
    if any(m.change_point_note == NOT_INSTALLED for c in cases for m in c.metrics):
        notes.append(INSTALL_HINT)
    return NightlyVerdict(
        playbook=rows[0].playbook,
        night=rows[0].night,
        cases=tuple(cases),
        night_time=rows[0].night_time,
        results_dir=str(results_dir),
        notes=tuple(notes),
    )
