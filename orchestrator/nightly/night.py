"""One night end to end: its results folder's rows, judged against the playbook's history,
appended to it, as a ``NightlyVerdict`` (``report.write_nightly`` writes it out).

``judge_and_record`` is what ``orch nightly`` calls once the playbook has run: a history that
cannot be appended to (disk full, the night already there) does not hide the verdict, which is
returned as judged, not recorded, with the reason first in its notes. ``judge_results`` raises
instead; with ``append=False`` it judges a night already in the history again (its own rows are
never part of its baseline).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import OrchError
from orchestrator.nightly.cases import CaseKey, content_notes
from orchestrator.nightly.changepoint import INSTALL_HINT, NOT_INSTALLED, Locate, change_points
from orchestrator.nightly.history import History, HistoryRow
from orchestrator.nightly.record import record_night
from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.verdict import CaseVerdict, Policy, judge_night, settle

NOT_RECORDED = "measured, but not recorded in the history"


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
    history, rows, cases, notes = _judge(results_dir, results_root, policy, playbook, find)
    if append:
        history.append(settle(rows, cases))
    return _verdict(results_dir, history, rows, cases, notes)


def judge_and_record(
    results_dir: Path | str,
    *,
    results_root: Path | str | None = None,
    policy: Policy | None = None,
    playbook: str | None = None,
    find: Locate = change_points,
) -> NightlyVerdict:
    """``judge_results`` for a new night, where the verdict outranks its history row: an
    append that fails leaves it as judged, ``recorded`` False, the reason its first note."""
    results_dir = Path(results_dir)
    history, rows, cases, notes = _judge(results_dir, results_root, policy, playbook, find)
    try:
        history.append(settle(rows, cases))
    except OrchError as exc:
        reason = f"{exc} ({exc.hint})" if exc.hint else str(exc)
        return _verdict(results_dir, history, rows, cases, notes, unrecorded=reason)
    return _verdict(results_dir, history, rows, cases, notes)


def _judge(
    results_dir: Path,
    results_root: Path | str | None,
    policy: Policy | None,
    playbook: str | None,
    find: Locate,
) -> tuple[History, list[HistoryRow], list[CaseVerdict], list[str]]:
    """The night's rows judged, and notes on cases whose history starts anew only because
    their prompts' content differs from (or was not recorded in) a case like them."""
    rows = record_night(results_dir, playbook=playbook)
    history = History(
        results_root if results_root is not None else results_dir.parent, rows[0].playbook
    )
    past_rows = history.rows()
    cases = judge_night(past_rows, history.decisions(), rows, policy or Policy(), find)
    nights: dict[CaseKey, set[str]] = {}
    for row in past_rows:
        if row.night != rows[0].night:
            nights.setdefault(row.case, set()).add(row.night)
    past = {case: len(seen) for case, seen in nights.items()}
    return history, rows, cases, content_notes(past, [r.case for r in rows])


def _verdict(
    results_dir: Path,
    history: History,
    rows: list[HistoryRow],
    cases: list[CaseVerdict],
    content: list[str],
    *,
    unrecorded: str | None = None,
) -> NightlyVerdict:
    notes = [f"{NOT_RECORDED}: {unrecorded}"] if unrecorded is not None else []
    notes += dict.fromkeys(history.problems)
    notes += content
    if any(m.change_point_note == NOT_INSTALLED for c in cases for m in c.metrics):
        notes.append(INSTALL_HINT)
    return NightlyVerdict(
        playbook=rows[0].playbook,
        night=rows[0].night,
        cases=tuple(cases),
        night_time=rows[0].night_time,
        results_dir=str(results_dir),
        notes=tuple(notes),
        recorded=unrecorded is None,
    )
