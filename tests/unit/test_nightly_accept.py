"""`orch baseline accept` on real history files: a night that measured nothing is refused (it
used to wipe the baseline, so a later 20% drop became insufficient_data), a case a night could
not measure keeps its baseline, and a measured night does what the message says: it counts in
every later baseline, which starts again from it (issue 20, item 11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orchestrator.nightly.cases import CaseKey
from orchestrator.nightly.history import History, HistoryRow
from orchestrator.nightly.verdict import judge_night, settle
from tests.fixtures.cli import orch_in_process
from tests.fixtures.nightly_histories import CASE, night_id, row

OTHER = dataclasses.replace(CASE, load_value=32.0)  # a second case of the same playbook
METRIC = "output_tok_s"


def values(level: float) -> list[float]:
    return [level * 0.99, level, level * 1.01]


def night_rows(i: int, level: float | None, case: CaseKey = CASE) -> list[HistoryRow]:
    """Night ``i``'s row of the throughput of ``case``: measured at ``level``, or failed."""
    if level is None:
        return [row(i, METRIC, [], status="failed", case=case)]
    return [row(i, METRIC, values(level), case=case)]


def judge_and_append(store: History, rows: list[HistoryRow]) -> dict[str, tuple[str, float | None]]:
    """Judge a night against the history's files as ``orch nightly`` does, append it, and give
    each case's (verdict, baseline)."""
    cases = judge_night(store.rows(), store.decisions(), rows)
    store.append(settle(rows, cases))
    return {c.case_id: (c.metrics[0].verdict, c.metrics[0].baseline) for c in cases}


def build(root: Path, levels: list[list[float | None]], cases: list[CaseKey]) -> History:
    """A history of nights judged and appended one by one (a night: a level per case)."""
    store = History(root, "nightly")
    for i, night in enumerate(levels):
        judge_and_append(
            store,
            [r for case, lv in zip(cases, night, strict=True) for r in night_rows(i, lv, case)],
        )
    return store


def accept(root: Path, night: str) -> tuple[int, str, str]:
    done = orch_in_process("baseline", "accept", night, "--results", str(root), cwd=root.parent)
    return done.returncode, " ".join(done.stdout.split()), " ".join(done.stderr.split())


def test_accepting_a_night_that_measured_nothing_is_refused_and_records_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results"
    store = build(root, [[1000.0]] * 5 + [[None]], [CASE])
    code, out, err = accept(root, night_id(5))
    assert (code, out) == (1, "")
    assert err == (
        f"error: night {night_id(5)} of nightly has no measured figure: none of its 1 case(s) "
        "could be measured (host down); nothing was recorded hint: accepting it would start "
        "every baseline again from a night with nothing in it. A night that measured nothing "
        "already counts in no baseline; accept the first night that measured the change "
        "instead (`orch history nightly` lists them)"
    )
    assert not store.decisions_path.exists()
    # the next night, 20% slower, is judged against the five measured nights
    verdicts = judge_and_append(store, night_rows(6, 800.0))
    assert verdicts[CASE.id] == ("suspicious", 1000.0)


def test_an_accept_of_an_unmeasured_night_left_by_an_older_orch_does_not_wipe_the_baseline(
    tmp_path: Path,
) -> None:
    """Decisions files written before the refusal may hold such an accept: the figure it did
    not measure starts no new baseline (it used to: a 20% drop became insufficient_data)."""
    root = tmp_path / "results"
    store = build(root, [[1000.0]] * 5 + [[None]], [CASE])
    store.decide(night_id(5), "accept")
    verdicts = judge_and_append(store, night_rows(6, 800.0))
    assert verdicts[CASE.id] == ("suspicious", 1000.0)


def test_accepting_a_measured_night_starts_every_later_baseline_from_it(tmp_path: Path) -> None:
    root = tmp_path / "results"
    # five nights at 1000, then a change to 800 (a slower engine on purpose)
    store = build(root, [[1000.0]] * 5 + [[800.0]], [CASE])
    assert store.rows(nights={night_id(5)})[0].verdict == "suspicious"
    code, out, err = accept(root, night_id(5))
    assert (code, err) == (0, "")
    assert out == (
        f"night {night_id(5)} of nightly: accepted; it counts in every later baseline, which "
        f"starts again from it recorded in {store.decisions_path}"
    )
    # the baseline starts again from night 5: it counts, the nights before it no longer do,
    # and the next night is judged against it at once (issue 24: no blind night)
    assert judge_and_append(store, night_rows(6, 800.0))[CASE.id] == ("ok", 800.0)
    assert judge_and_append(store, night_rows(7, 800.0))[CASE.id] == ("ok", 800.0)
    assert judge_and_append(store, night_rows(8, 800.0))[CASE.id] == ("ok", 800.0)
    # and a 20% drop from the new normal is called
    assert judge_and_append(store, night_rows(9, 640.0))[CASE.id] == ("suspicious", 800.0)


def test_a_case_the_accepted_night_could_not_measure_keeps_its_baseline(tmp_path: Path) -> None:
    root = tmp_path / "results"
    store = build(root, [[1000.0, 500.0]] * 5 + [[800.0, None]], [CASE, OTHER])
    code, out, err = accept(root, night_id(5))
    assert (code, err) == (0, "")
    assert out == (
        f"night {night_id(5)} of nightly: accepted; it counts in every later baseline, which "
        "starts again from it except for the 1 case(s) it could not measure, whose baselines "
        f"are unchanged: {OTHER.label} recorded in {store.decisions_path}"
    )
    tonight = night_rows(6, 800.0) + night_rows(6, 400.0, OTHER)
    verdicts = judge_and_append(store, tonight)
    assert verdicts[CASE.id] == ("ok", 800.0)  # starts again from night 5, judged at once
    assert verdicts[OTHER.id] == ("suspicious", 500.0)  # the five nights before still count
