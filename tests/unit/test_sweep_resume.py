"""Resume bookkeeping: what an interrupted run's folder keeps, sets aside and measures again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.results.report import load_results
from orchestrator.sweep.resume import (
    Decision,
    PlanRecord,
    RunRecord,
    Status,
    decide,
    set_aside,
    survey,
)
from tests.fixtures.run_results import make_result

OK, FAILED, NOT_RUN, CUT, ABSENT = (
    Status.OK,
    Status.FAILED,
    Status.NOT_RUN,
    Status.INTERRUPTED,
    Status.ABSENT,
)
P = ["points/00-c1-r1", "points/01-c2-r1", "points/02-c4-r1"]


@pytest.mark.parametrize(
    ("statuses", "planned", "sessions", "expected"),
    [
        # a run measured once, in its own folder
        ({"": OK}, [""], 1, Decision(keep=[""], session=1, fresh=False, complete=True)),
        ({"": CUT}, [""], 1, Decision(keep=[], aside=[("", CUT)])),
        ({"": FAILED}, [""], 1, Decision(keep=[], aside=[("", CUT)])),
        ({"": ABSENT}, [""], 0, Decision(keep=[])),  # never started: nothing in the way
        # a sweep
        (
            {P[0]: OK, P[1]: CUT, P[2]: ABSENT},
            P,
            1,
            Decision(keep=[P[0]], aside=[(P[1], CUT)], session=2, fresh=False),
        ),
        (
            {P[0]: OK, P[1]: FAILED, P[2]: NOT_RUN},
            P,
            2,
            Decision(keep=[P[0]], aside=[(P[1], FAILED), (P[2], NOT_RUN)], session=3, fresh=False),
        ),
        (
            {P[0]: OK, P[1]: OK, P[2]: OK},
            P,
            1,
            Decision(keep=P, session=2, fresh=False, complete=True),
        ),
        ({P[0]: CUT, P[1]: ABSENT, P[2]: ABSENT}, P, 1, Decision(keep=[], aside=[("", CUT)])),
        ({P[0]: ABSENT, P[1]: ABSENT, P[2]: ABSENT}, P, 0, Decision(keep=[])),
        # an SLO search's measurement, found beside the planned ones, is kept too
        (
            {P[0]: OK, "points/01-c16-r1": OK},
            [P[0]],
            1,
            Decision(keep=[P[0], "points/01-c16-r1"], session=2, fresh=False, complete=True),
        ),
    ],
)
def test_decide(
    statuses: dict[str, Status], planned: list[str], sessions: int, expected: Decision
) -> None:
    assert decide(statuses, planned, sessions=sessions) == expected


def put(folder: Path, *, error: bool = False) -> None:
    folder.mkdir(parents=True)
    result = make_result("r", error="engine died") if error else make_result("r")
    (folder / "summary.json").write_text(json.dumps(result.to_json()))


def test_survey_reads_a_folder_and_set_aside_never_overwrites(tmp_path: Path) -> None:
    run_dir = tmp_path / "r@h"
    put(run_dir / P[0])
    put(run_dir / P[1], error=True)
    (run_dir / P[2]).mkdir(parents=True)  # cut short: no summary
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "r-1"}))
    found = survey(run_dir, P)
    assert found.statuses == {P[0]: OK, P[1]: FAILED, P[2]: CUT}
    assert list(found.results) == [P[0]]
    assert (found.sessions, found.run_ids) == (1, ["r-1"])

    first = set_aside(run_dir, P[2], CUT)
    (run_dir / P[2]).mkdir()
    second = set_aside(run_dir, P[2], CUT)
    assert (first.name, second.name) == ("02-c4-r1.interrupted-1", "02-c4-r1.interrupted-2")
    # set-aside folders are never read as results, nor surveyed as measurements
    assert survey(run_dir, P).statuses[P[2]] is ABSENT
    assert len(load_results(tmp_path)) == 2


def test_plan_record_round_trips_and_names_a_bad_file(tmp_path: Path) -> None:
    record = PlanRecord(
        playbook="/p/demo.yaml",
        playbook_sha256="ab",
        hosts_file="/p/hosts.yaml",
        only=["vllm-*"],
        force=False,
        runs=[RunRecord("r@h", "r_h")],
    )
    record.write(tmp_path)
    assert PlanRecord.read(tmp_path) == record
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "plan.json").write_text("{")
    from orchestrator.errors import OrchError

    with pytest.raises(OrchError, match="not a plan orch can read"):
        PlanRecord.read(tmp_path / "other")
    with pytest.raises(OrchError, match="nothing to resume"):
        PlanRecord.read(tmp_path / "missing")
