"""Issue 20, item 8: a nightly case is keyed on its prompts' content, not their file's name,
and history rows carry a version: rows a newer orch wrote are kept apart, never merged into a
case. Nights are real results folders and a real history file on disk."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from orchestrator.nightly.history import History
from orchestrator.nightly.night import judge_results
from orchestrator.nightly.report import NightlyVerdict
from orchestrator.nightly.rows import ROW_VERSION
from orchestrator.results.model import RunResult
from tests.fixtures.nightly_histories import night_id
from tests.fixtures.sweep_results import measurement, write_sweep

OLD = "a" * 64  # the prompt file's content before it was rewritten
NEW = "b" * 64
STEADY = (100.0, 101.0, 99.0)
LOWER = (90.0, 91.0, 89.0)  # -10%: a violation against the same workload's baseline


def with_prompts(result: RunResult, sha: str | None) -> RunResult:
    settings = result.settings
    assert settings.workload is not None
    workload = settings.workload.model_copy(
        update={"prompts": "data/prompts.jsonl", "prompts_sha256": sha}
    )
    return result.model_copy(
        update={"settings": settings.model_copy(update={"workload": workload})}
    )


def night(root: Path, i: int, out: Sequence[float], sha: str | None) -> NightlyVerdict:
    results = [
        with_prompts(measurement(value=8, repeat=k + 1, repeats=len(out), out=v), sha)
        for k, v in enumerate(out)
    ]
    folder = write_sweep(root / night_id(i), results)
    return judge_results(folder, find=lambda values: None)


def output_verdict(verdict: NightlyVerdict) -> str:
    (case,) = verdict.cases
    return next(m.verdict for m in case.metrics if m.metric == "output_tok_s")


def test_a_rewritten_prompt_file_is_a_new_case_not_a_regression(tmp_path: Path) -> None:
    for i in range(4):
        night(tmp_path, i, STEADY, OLD)
    # the control: the same content 10% slower is a violation (the test can fail)
    control = tmp_path / "control"
    for i in range(4):
        night(control, i, STEADY, OLD)
    assert output_verdict(night(control, 4, LOWER, OLD)) == "suspicious"

    rewritten = night(tmp_path, 4, LOWER, NEW)
    assert output_verdict(rewritten) == "insufficient_data"
    (case,) = rewritten.cases
    (note,) = [n for n in rewritten.notes if "starts a new history" in n]
    assert f"case {case.case_id}" in note and "its 4 earlier night(s)" in note
    assert "other content of data/prompts.jsonl" in note and f"{OLD[:12]}…, now {NEW[:12]}" in note
    # the next night of the new content is judged against it, without a note
    again = night(tmp_path, 5, LOWER, NEW)
    assert not [n for n in again.notes if "starts a new history" in n]
    rows = History(tmp_path, "nightly").rows()
    assert {r.case.prompts_sha256 for r in rows} == {OLD, NEW}
    assert len({r.case_id for r in rows}) == 2


def test_the_first_night_that_records_content_names_the_history_it_leaves(
    tmp_path: Path,
) -> None:
    for i in range(3):  # nights of an orch that did not record the content
        night(tmp_path, i, STEADY, None)
    first = night(tmp_path, 3, STEADY, OLD)
    (note,) = [n for n in first.notes if "starts a new history" in n]
    assert "its 3 earlier night(s)" in note and "did not record the prompts' content" in note
    assert output_verdict(first) == "insufficient_data"
    # the old rows still read, as the case they were (no hash)
    old = [r for r in History(tmp_path, "nightly").rows() if r.night != night_id(3)]
    assert old and {r.case.prompts_sha256 for r in old} == {None}


def test_rows_of_a_newer_orch_are_kept_apart_with_file_and_line(tmp_path: Path) -> None:
    for i in range(3):
        night(tmp_path, i, STEADY, OLD)
    history = History(tmp_path, "nightly")
    path = history.path
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    assert first["v"] == ROW_VERSION
    # an old line (no version) reads as version 1; a newer orch's line, with a case field this
    # orch does not know, must not join the case its other fields name
    old = {k: v for k, v in first.items() if k not in ("v", "prompts_sha256")}
    newer = {**first, "night": night_id(9), "v": ROW_VERSION + 1, "kv_cache_dtype": "fp8"}
    path.write_text("\n".join([*lines, json.dumps(old), json.dumps(newer)]) + "\n")
    count = len(lines)

    history = History(tmp_path, "nightly")
    rows = history.rows()
    assert len(rows) == count + 1 and night_id(9) not in {r.night for r in rows}
    (problem,) = history.problems
    assert f"{path}: 1 row(s) (line {count + 2}) written by a newer orch" in problem
    assert f"row version {ROW_VERSION + 1}" in problem
    frame = History(tmp_path, "nightly").frame()
    assert len(frame) == count + 1 and list(frame["v"])[-1] == 1
    # judging a night reports the lines kept apart
    verdict = night(tmp_path, 3, STEADY, OLD)
    assert any("written by a newer orch" in n for n in verdict.notes)
