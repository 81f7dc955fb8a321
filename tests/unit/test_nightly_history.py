"""The nightly history store: rows round trip through the JSON Lines file, pandas reads it,
appends never rewrite, a night is recorded once, decisions override by appending, a torn line
is skipped and said."""

from __future__ import annotations

import dataclasses
import errno
import json
import stat
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.errors import OrchError, ResultsWriteError
from orchestrator.nightly.cases import NightAttributes
from orchestrator.nightly.history import History, HistoryRow, history_path
from orchestrator.nightly.verdict import replay
from tests.fixtures.nightly_histories import CASE, Scenario, history, night_id, row


def settled(nights: int = 4, seed: int = 0) -> list[list[HistoryRow]]:
    """``nights`` synthetic nights, judged and settled as a nightly stores them."""
    raw = history(Scenario(nights=nights), seed)
    done: list[list[HistoryRow]] = []
    for cases, rows in zip(replay(raw, find=lambda values: None), raw, strict=True):
        verdicts = {m.metric: m for m in cases[0].metrics}
        done.append(
            [
                dataclasses.replace(r, verdict=verdicts[r.metric].verdict, accepted=True)
                for r in rows
            ]
        )
    return done


def test_rows_round_trip(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    nights = settled(2)
    assert store.append(nights[0]) == len(nights[0])
    store.append(nights[1])
    assert store.rows() == [*nights[0], *nights[1]]
    assert store.rows(nights=[night_id(1)]) == nights[1]
    assert store.problems == []
    assert store.path == tmp_path / "history" / "nightly.jsonl"
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_a_row_is_one_flat_json_object_with_the_night_first(tmp_path: Path) -> None:
    attrs = NightAttributes(engine_version="0.9.0", hosts=("gpu-1", "gpu-2"), playbook_dirty=True)
    r = dataclasses.replace(row(3, "output_tok_s", [100.0, 102.0]), attributes=attrs)
    obj = r.to_json()
    assert list(obj)[:4] == ["night", "night_time", "playbook", "case_id"]
    assert (obj["night"], obj["night_time"]) == (night_id(3), "2026-11-04T03:00:00+00:00")
    assert (obj["case_id"], obj["engine"], obj["load_value"]) == (CASE.id, "vllm", 8.0)
    assert (obj["value"], obj["spread"], obj["n"], obj["values"]) == (
        101.0,
        pytest.approx(2**0.5),
        2,
        [100.0, 102.0],
    )
    assert (obj["hosts"], obj["playbook_dirty"], obj["verdict"], obj["accepted"]) == (
        ["gpu-1", "gpu-2"],
        True,
        None,
        None,
    )
    assert not any(isinstance(v, dict) for v in obj.values())
    assert HistoryRow.from_json(json.loads(json.dumps(obj))) == r


def test_pandas_reads_the_file_as_it_is(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    for rows in settled(3):
        store.append(rows)
    raw = pd.read_json(store.path, lines=True)
    assert len(raw) == 3 * len(settled(1)[0])
    assert set(raw["night"]) == {night_id(i) for i in range(3)}


def test_the_frame_has_every_column_and_the_decisions(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    empty = store.frame()
    assert len(empty) == 0 and "decision" in empty.columns and "accepted" in empty.columns
    for rows in settled(3):
        store.append(rows)
    frame = store.frame()
    assert list(frame.columns) == list(empty.columns)
    assert str(frame["night_time"].dtype) == "datetime64[ns, UTC]" or "UTC" in str(
        frame["night_time"].dtype
    )
    assert frame["accepted"].tolist() == [True] * len(frame)
    assert frame["decision"].tolist() == [None] * len(frame)
    first = frame[frame["metric"] == "output_tok_s"].iloc[0]
    assert first["values"] == list(settled(1)[0][0].values)
    assert first["case_label"] == CASE.label


def test_decisions_override_by_appending_the_last_one_wins(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    for rows in settled(3):
        store.append(rows)
    before = store.path.read_bytes()
    at = datetime(2026, 12, 1, tzinfo=timezone.utc)
    store.decide(night_id(1), "reject", note="the host was throttled", now=at)
    frame = store.frame()
    assert set(frame.loc[frame["night"] == night_id(1), "accepted"]) == {False}
    assert set(frame.loc[frame["night"] == night_id(1), "decision"]) == {"reject"}
    assert set(frame.loc[frame["night"] != night_id(1), "accepted"]) == {True}
    store.decide(night_id(1), "accept", now=at)
    assert set(store.frame().loc[lambda f: f["night"] == night_id(1), "accepted"]) == {True}
    assert store.path.read_bytes() == before  # the rows are never rewritten
    lines = store.decisions_path.read_text().splitlines()
    assert [json.loads(line)["decision"] for line in lines] == ["reject", "accept"]
    assert store.decisions()[night_id(1)].decision == "accept"


def test_a_decision_about_an_unknown_night_is_refused(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    store.append(settled(1)[0])
    with pytest.raises(OrchError, match="no night 2027") as caught:
        store.decide("2027", "accept")
    assert caught.value.hint == "`orch history PLAYBOOK` lists the recorded nights"


def test_a_night_is_recorded_once(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    rows = settled(1)[0]
    store.append(rows)
    before = store.path.read_bytes()
    with pytest.raises(OrchError, match=f"night {night_id(0)} is already in"):
        store.append(rows)
    assert store.path.read_bytes() == before


def test_a_torn_last_line_is_skipped_and_the_next_night_starts_a_fresh_line(
    tmp_path: Path,
) -> None:
    store = History(tmp_path, "nightly")
    nights = settled(2)
    store.append(nights[0])
    with store.path.open("ab") as fh:  # a crash in the middle of a line, and of a character
        fh.write('{"night": "torn", "note": "é'.encode()[:-1])
    store.append(nights[1])
    assert store.rows() == [*nights[0], *nights[1]]
    assert len(store.problems) == 1
    assert store.problems[0].startswith(f"{store.path}:{len(nights[0]) + 1}: skipped, not JSON")


def test_lines_another_tool_wrote_are_read_by_their_value(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    nights = settled(2)
    store.append(nights[0])
    with store.path.open("a") as fh:  # spaced JSON, keys in another order, and a stray value
        for r in nights[1]:
            fh.write(json.dumps(dict(reversed(list(r.to_json().items())))) + "\n")
        fh.write('{"night": "x", "what": "not a row"}\n[1, 2]\n')
    assert store.rows(nights=[night_id(1)]) == nights[1]
    assert store.nights_recorded() == {night_id(0), night_id(1), "x"}
    assert len(store.frame()) == len(nights[0]) + len(nights[1])
    first = len(nights[0]) + len(nights[1]) + 1
    missing = "not a row (no case_id, metric, night, night_time, value, values)"
    assert store.problems == [  # from the frame: rows() of a night only reads that night's
        f"{store.path}:{first}: skipped, {missing}",
        f"{store.path}:{first + 1}: skipped, {missing}",
    ]


def test_the_nights_with_their_worst_verdict(tmp_path: Path) -> None:
    store = History(tmp_path, "nightly")
    for rows in settled(4):
        store.append(rows)
    store.decide(night_id(3), "reject")
    summary = store.nights()
    assert [s.night for s in summary] == [night_id(i) for i in range(4)]
    assert [s.verdict for s in summary] == ["insufficient_data"] * 3 + ["ok"]
    assert summary[3].counts == (("ok", len(settled(1)[0])),)
    assert [s.decision for s in summary] == [None, None, None, "reject"]
    assert {s.cases for s in summary} == {1}


def test_the_history_file_is_named_after_the_playbook(tmp_path: Path) -> None:
    assert (
        history_path(tmp_path, "llama 70b/nightly")
        == tmp_path / "history" / "llama_70b_nightly.jsonl"
    )


def test_a_year_of_nights_reads_fast_enough_to_draw_a_trend(tmp_path: Path) -> None:
    # 365 nights x 11 metrics: the rows of one night are built once and renamed per night
    store = History(tmp_path, "nightly")
    template = settled(1)[0]
    lines = []
    for i in range(365):
        for r in template:
            obj = dataclasses.replace(
                r, night=night_id(i), night_time=row(i, r.metric, []).night_time
            )
            lines.append(json.dumps(obj.to_json()))
    store.path.parent.mkdir(parents=True)
    store.path.write_text("\n".join(lines) + "\n")
    frame = store.frame()
    assert len(frame) == 365 * len(template)
    assert frame["night"].nunique() == 365
    assert store.rows(nights=[night_id(364)]) == [
        dataclasses.replace(r, night=night_id(364), night_time=row(364, r.metric, []).night_time)
        for r in template
    ]


def test_a_full_disk_is_a_results_write_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = History(tmp_path, "nightly")

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("orchestrator.nightly.history.os.write", full)
    with pytest.raises(ResultsWriteError) as caught:
        store.append(settled(1)[0])
    assert str(caught.value) == f"cannot write {store.path}: no space left on device"
