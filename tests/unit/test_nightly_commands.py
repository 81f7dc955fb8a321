"""`orch nightly`, `orch history` and `orch baseline` around the nightly library: the playbook's
settings as a policy, the notes about repeats, the CI step summary, a night that measured
nothing, listing nights (history rows and could_not_measure folders), finding and deciding a
night; then the commands themselves, in-process on synthetic histories, and `orch nightly`
against a host that refuses connections (a subprocess: `orch nightly` installs signal
handlers)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator.commands import nightly
from orchestrator.commands.run import PlaybookOutcome
from orchestrator.config import load_playbook
from orchestrator.errors import ConfigError, OrchError
from orchestrator.metrics.summary import Stats
from orchestrator.nightly.history import History, HistoryRow
from orchestrator.nightly.night import judge_results
from orchestrator.nightly.report import could_not_measure, render_markdown
from orchestrator.nightly.verdict import Policy, Thresholds, replay
from orchestrator.results.mdtext import md_block
from orchestrator.results.model import RunResult
from tests.fixtures.cli import CliResult, orch_in_process
from tests.fixtures.nightly_histories import Scenario, history, night_id
from tests.fixtures.sshd import free_port
from tests.fixtures.sweep_results import measurement, write_sweep

UTC = timezone.utc
NO_HISTORY_HINT = (
    "`orch history PLAYBOOK` lists the recorded nights; a night that measured nothing has no "
    "figure to accept"
)
REFUSED = OrchError("the doctor refused to launch", hint="fix the configuration")
REASON = "the doctor refused to launch (fix the configuration)"


def write_playbook(path: Path, name: str = "nightly", nightly_section: str = "") -> Path:
    path.write_text(
        f"name: {name}\n"
        "defaults: {engine: vllm, model: m, workload: {num_prompts: 4}}\n"
        "runs:\n"
        "  - {name: two, workload: {repeat: 2}}\n"
        "  - {name: four, workload: {repeat: 4}}\n"
        "  - {name: five, workload: {repeat: 5}}\n" + nightly_section
    )
    return path


def record(root: Path, nights: int = 4) -> list[list[HistoryRow]]:
    """``nights`` synthetic nights of playbook "nightly", judged and appended as a nightly does
    (nights 0-2: insufficient_data, short of baseline nights; night 3: ok)."""
    raw = history(Scenario(nights=nights), 0)
    store = History(root, "nightly")
    done = []
    for cases, rows in zip(replay(raw, find=lambda values: None), raw, strict=True):
        verdicts = {m.metric: m.verdict for m in cases[0].metrics}
        settled = [dataclasses.replace(r, verdict=verdicts[r.metric], accepted=True) for r in rows]
        store.append(settled)
        done.append(settled)
    return done


def flat(text: str) -> str:
    """Console text with its wrapping undone (a long tmp path may wrap a line)."""
    return " ".join(text.split())


# -- the library ----------------------------------------------------------------------------


def test_the_playbooks_settings_are_the_policy(tmp_path: Path) -> None:
    section = (
        "nightly:\n  baseline_nights: 10\n  min_baseline_nights: 4\n  min_repeats: 3\n"
        "  alpha: 0.05\n  thresholds: {output_tok_s: 2%, acceptance_pos: 0.1}\n"
    )
    playbook = load_playbook(write_playbook(tmp_path / "pb.yaml", nightly_section=section))
    policy = nightly.policy_of(playbook.nightly)
    assert policy == Policy(
        baseline_nights=10,
        min_baseline_nights=4,
        min_repeats=3,
        alpha=0.05,
        thresholds=Thresholds({"output_tok_s": 0.02, "acceptance_pos": 0.1}),
    )
    assert policy.thresholds.for_metric("acceptance_pos_2") == 0.1
    assert policy.thresholds.for_metric("ttft_ms_p99") == 0.10  # the default stays
    assert nightly.policy_of(load_playbook(write_playbook(tmp_path / "d.yaml")).nightly) == Policy()


def test_repeats_too_few_to_judge_or_to_judge_on_time_are_noted(tmp_path: Path) -> None:
    section = "nightly: {min_repeats: 3}\n"
    playbook = load_playbook(write_playbook(tmp_path / "pb.yaml", nightly_section=section))
    assert nightly.repeat_notes(playbook) == [
        "run two: workload.repeat is 2; a night needs at least 3 to be judged (its figures will "
        "be insufficient_data); use 5",
        "run four: workload.repeat is 4; with fewer than 5 repeats a night's own scatter weighs "
        "more in its verdict (see the README's nightly section)",
    ]


def test_a_playbook_is_named_by_its_file_or_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    book = write_playbook(tmp_path / "book.yaml", name="llama-nightly")
    assert nightly.playbook_name(str(book)) == "llama-nightly"
    assert nightly.playbook_name("book.yaml") == "llama-nightly"
    assert nightly.playbook_name(str(write_playbook(tmp_path / "b.pb", name="odd"))) == "odd"
    assert nightly.playbook_name("llama-nightly") == "llama-nightly"
    assert nightly.playbook_name("llama-3.1") == "llama-3.1"  # a dot is not a file
    with pytest.raises(ConfigError) as caught:
        nightly.playbook_name("gone.yml")
    err = caught.value
    assert (str(err), err.hint) == (
        "gone.yml: file not found",
        "give the playbook file orch nightly runs, or its name",
    )


def test_the_ci_step_summary_is_appended_to_when_there_is_one(tmp_path: Path) -> None:
    verdict = could_not_measure("nightly", night_id(0), "hosts down")
    markdown = render_markdown(verdict)
    assert nightly.step_summary(verdict, environ={}) is None
    assert nightly.step_summary(verdict, environ={"GITHUB_STEP_SUMMARY": ""}) is None
    summary = tmp_path / "summary.md"
    summary.write_text("# an earlier step\n")
    environ = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert nightly.step_summary(verdict, environ=environ) == summary
    assert nightly.step_summary(verdict, environ=environ) == summary
    once = markdown.rstrip("\n") + "\n\n"
    assert summary.read_text() == "# an earlier step\n" + once + once
    with pytest.raises(OrchError) as caught:
        nightly.step_summary(verdict, environ={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert str(caught.value) == (
        f"cannot append the verdict to GITHUB_STEP_SUMMARY={tmp_path}: Is a directory"
    )


def test_a_night_that_measured_nothing_gets_a_folder_and_says_why(tmp_path: Path) -> None:
    playbook = load_playbook(write_playbook(tmp_path / "pb.yaml"))
    root = tmp_path / "results"
    when = datetime(2026, 11, 5, 3, 0, tzinfo=UTC)
    night = nightly.measured_nothing(playbook, root, REFUSED, now=when)
    folder = root / "20261105T030000Z-nightly"
    assert (night.folder, night.files) == (folder, (folder / "nightly.md", folder / "nightly.json"))
    assert (night.exit_code, night.report, night.verdict.verdict) == (3, None, "could_not_measure")
    doc = json.loads((folder / "nightly.json").read_text())
    assert {k: doc[k] for k in ("night", "verdict", "exit_code", "counts", "notes", "cases")} == {
        "night": folder.name,
        "verdict": "could_not_measure",
        "exit_code": 3,
        "counts": {},
        "notes": [REASON],
        "cases": [],
    }
    assert (folder / "nightly.md").read_text() == (
        "# Nightly: COULD NOT MEASURE (exit 3)\n\n"
        f"Playbook **nightly**, night `{folder.name}`: nothing judged (0 cases).\n"
        f"> {REASON}\n"
    )
    again = nightly.measured_nothing(playbook, root, OrchError("hosts down"), now=when)
    assert again.folder == root / "20261105T030000Z-nightly-1"  # never over the first one
    assert again.verdict.notes == ("hosts down",)
    assert not (root / "history").exists()  # nothing measured: no row


def test_nights_listed_from_the_history_and_from_folders_oldest_first(tmp_path: Path) -> None:
    root = tmp_path / "results"
    nights = record(root)
    playbook = load_playbook(write_playbook(tmp_path / "pb.yaml"))
    between = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)  # after night 1, before night 2
    nightly.measured_nothing(playbook, root, REFUSED, now=between)
    nightly.measured_nothing(playbook, root, REFUSED, now=datetime(2026, 11, 9, tzinfo=UTC))
    other = load_playbook(write_playbook(tmp_path / "other.yaml", name="other"))
    nightly.measured_nothing(other, root, REFUSED, now=between)  # another playbook's night
    for name, text in (("20261103T120000Z-nightly", "{torn"), ("not-a-night", "{}")):
        (root / name).mkdir()
        (root / name / "nightly.json").write_text(text)
    listed, problems = nightly.list_nights(root, "nightly")
    assert [n.night for n in listed] == [
        night_id(0),
        night_id(1),
        "20261102T120000Z-nightly",
        night_id(2),
        night_id(3),
        "20261109T000000Z-nightly",
    ]
    assert [n.verdict for n in listed] == [
        "insufficient_data",
        "insufficient_data",
        "could_not_measure",
        "insufficient_data",
        "ok",
        "could_not_measure",
    ]
    assert [n.cases for n in listed] == [1, 1, 0, 1, 1, 0]
    assert listed[4].counts == (("ok", len(nights[3])),)
    assert problems == []
    assert listed[2].to_json() == {
        "night": "20261102T120000Z-nightly",
        "night_time": "2026-11-02T12:00:00+00:00",
        "cases": 0,
        "verdict": "could_not_measure",
        "exit_code": 3,
        "counts": {},
        "decision": None,
        "note": REASON,
    }


def test_listing_needs_a_history_or_a_folder_and_says_skipped_lines_once(tmp_path: Path) -> None:
    root = tmp_path / "results"
    with pytest.raises(OrchError) as caught:
        nightly.list_nights(root, "nightly")
    assert (str(caught.value), caught.value.hint) == (
        f"no nightly history of playbook 'nightly' under {root}",
        f"`orch nightly PLAYBOOK --results {root}` records one; expected "
        f"{root}/history/nightly.jsonl",
    )
    playbook = load_playbook(write_playbook(tmp_path / "pb.yaml"))
    only = nightly.measured_nothing(playbook, root, REFUSED)
    assert [n.night for n in nightly.list_nights(root, "nightly")[0]] == [only.folder.name]
    nights = record(root, nights=2)
    with History(root, "nightly").path.open("a") as fh:
        fh.write("{torn\n")
    listed, problems = nightly.list_nights(root, "nightly")
    assert [n.night for n in listed][:2] == [night_id(0), night_id(1)]
    line = 2 * len(nights[0]) + 1
    assert problems == [
        f"{root}/history/nightly.jsonl:{line}: skipped, not JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    ]


def test_a_night_is_found_by_name_or_by_folder_in_its_playbooks_history(tmp_path: Path) -> None:
    root = tmp_path / "results"
    record(root, nights=2)
    History(root, "alpha").path.write_text("")  # another playbook's (empty) history
    name, where, found = nightly.locate_night(night_id(1), root)
    assert (name, where, found.playbook, found.path) == (
        night_id(1),
        root,
        "nightly",
        root / "history" / "nightly.jsonl",
    )
    folder = root / night_id(1)
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"  # --results elsewhere: the folder's own root is looked in
    name, where, found = nightly.locate_night(f"{folder}/", elsewhere)
    assert (name, where, found.playbook) == (night_id(1), root, "nightly")


@pytest.mark.parametrize(
    "night",
    ["20991231T000000Z-nightly", night_id(1)[:8], f"elsewhere/{night_id(1)}x"],
    ids=["unknown", "a prefix", "a path to no recorded night"],
)
def test_a_night_no_history_records_is_an_error_with_a_hint(tmp_path: Path, night: str) -> None:
    root = tmp_path / "results"
    record(root, nights=2)
    with pytest.raises(OrchError) as caught:
        nightly.locate_night(night, root)
    name = Path(night).name
    assert str(caught.value) == f"night {name} is in no nightly history under {root}/history"
    assert caught.value.hint == NO_HISTORY_HINT


def test_the_later_decision_about_a_night_wins(tmp_path: Path) -> None:
    root = tmp_path / "results"
    record(root, nights=3)
    rows = History(root, "nightly").path.read_bytes()
    playbook, first = nightly.decide(night_id(1), "accept", root, note="new driver")
    assert (playbook, first.decisions()[night_id(1)].decision) == ("nightly", "accept")
    playbook, later = nightly.decide(night_id(1), "reject", root)
    assert playbook == "nightly"
    record_ = later.decisions()[night_id(1)]
    assert (record_.decision, record_.note) == ("reject", None)
    lines = [json.loads(line) for line in later.decisions_path.read_text().splitlines()]
    assert [(d["night"], d["decision"], d["note"]) for d in lines] == [
        (night_id(1), "accept", "new driver"),
        (night_id(1), "reject", None),
    ]
    assert History(root, "nightly").path.read_bytes() == rows  # decisions never rewrite rows
    listed, _ = nightly.list_nights(root, "nightly")
    assert [n.decision for n in listed] == [None, "reject", None]


# -- the commands ---------------------------------------------------------------------------


def hosts_file(path: Path, port: int) -> Path:
    path.write_text(
        "hosts:\n  gpu-1:\n    address: 127.0.0.1\n"
        f"    port: {port}\n    python: {sys.executable}\n    connect_timeout: 3\n"
        "    gpus: 1 x RTX A6000\n"
    )
    return path


def night_lines(text: str) -> list[list[str]]:
    """The rows of a table that start with a night, split at whitespace."""
    return [line.split() for line in text.splitlines() if line.strip().startswith("2026")]


def test_orch_history_lists_the_nights_their_verdicts_and_decisions(tmp_path: Path) -> None:
    root = tmp_path / "results"
    metrics = len(record(root)[0])
    nightly.decide(night_id(3), "accept", root)
    done = orch_in_process("history", "nightly", "--results", str(root), "--json", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    doc = json.loads(done.stdout)
    assert doc["playbook"] == "nightly"
    assert [
        (n["night"], n["cases"], n["verdict"], n["exit_code"], n["counts"], n["decision"])
        for n in doc["nights"]
    ] == [
        *[
            (night_id(i), 1, "insufficient_data", 3, {"insufficient_data": metrics}, None)
            for i in range(3)
        ],
        (night_id(3), 1, "ok", 0, {"ok": metrics}, "accept"),
    ]
    book = write_playbook(tmp_path / "book.yaml")  # the playbook file names the same history
    table = orch_in_process("history", str(book), "--results", str(root), cwd=tmp_path)
    assert (table.returncode, table.stderr) == (0, "")
    assert "nights of nightly" in table.stdout
    assert night_lines(table.stdout) == [
        *[
            [night_id(i), "1", "insufficient_data", str(metrics), "insufficient_data"]
            for i in range(3)
        ],
        [night_id(3), "1", "ok", str(metrics), "ok", "accept"],
    ]


def test_orch_history_metric_shows_the_figure_of_each_night(tmp_path: Path) -> None:
    root = tmp_path / "results"
    nights = record(root, nights=3)
    nightly.decide(night_id(2), "reject", root)
    wanted = [next(r for r in night if r.metric == "output_tok_s") for night in nights]
    args = ("history", "nightly", "--results", str(root), "--metric", "output_tok_s")
    done = orch_in_process(*args, "--json", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    doc = json.loads(done.stdout)
    assert (doc["playbook"], doc["metric"]) == ("nightly", "output_tok_s")
    assert [
        (r["night"], r["value"], r["values"], r["verdict"], r["decision"]) for r in doc["rows"]
    ] == [
        (w.night, w.value, list(w.values), "insufficient_data", d)
        for w, d in zip(wanted, [None, None, "reject"], strict=True)
    ]
    table = orch_in_process(*args, cwd=tmp_path)
    assert (table.returncode, table.stderr) == (0, "")
    # a row: the night, the case's label (several cells), value, sd, n, baseline, verdict and
    # the decision (no cell when there is none)
    rows = night_lines(table.stdout)
    assert [r[0] for r in rows] == [w.night for w in wanted]
    figures = [[f"{w.value:.4g}", f"{w.spread:.4g}", "3", "-", "insufficient_data"] for w in wanted]
    assert [r[-5:] for r in rows[:2]] == figures[:2]
    assert rows[2][-6:] == [*figures[2], "reject"]


def test_orch_history_refuses_an_unknown_metric_or_a_missing_playbook_file(tmp_path: Path) -> None:
    root = tmp_path / "results"
    record(root, nights=1)
    bogus = orch_in_process(
        "history", "nightly", "--results", str(root), "--metric", "tok_s", cwd=tmp_path
    )
    assert (bogus.returncode, bogus.stdout) == (1, "")
    assert flat(bogus.stderr) == (
        "error: --metric: unknown nightly metric 'tok_s': one of output_tok_s, "
        "decode_tok_s_median, ttft_ms_median, ttft_ms_p99, tpot_ms_median, tpot_ms_p99, "
        "acceptance_length, failure_rate, acceptance_pos_<k>"
    )
    gone = orch_in_process("history", "gone.yaml", "--results", str(root), cwd=tmp_path)
    assert (gone.returncode, gone.stdout) == (2, "")
    assert flat(gone.stderr) == (
        "config error: gone.yaml: file not found "
        "hint: give the playbook file orch nightly runs, or its name"
    )


def test_orch_baseline_accept_and_reject_say_what_they_recorded(tmp_path: Path) -> None:
    root = tmp_path / "results"
    record(root, nights=2)
    args = ("--results", str(root))
    accepted = orch_in_process(
        "baseline", "accept", night_id(1), *args, "--note", "x", cwd=tmp_path
    )
    assert (accepted.returncode, accepted.stderr) == (0, "")
    decisions = root / "history" / "nightly.decisions.jsonl"
    assert accepted.stdout.splitlines() == [
        f"night {night_id(1)} of nightly: accepted; it counts in every later baseline, which "
        "starts again from it",
        f"recorded in {decisions}",
    ]
    rejected = orch_in_process("baseline", "reject", str(root / night_id(1)), *args, cwd=tmp_path)
    assert (rejected.returncode, rejected.stderr) == (0, "")
    assert rejected.stdout.splitlines()[0] == (
        f"night {night_id(1)} of nightly: rejected; it is left out of every baseline"
    )
    assert History(root, "nightly").decisions()[night_id(1)].decision == "reject"


def test_orch_baseline_of_an_unknown_night_is_one_message(tmp_path: Path) -> None:
    root = tmp_path / "results"
    record(root, nights=1)
    night = "20991231T000000Z-nightly"
    done = orch_in_process("baseline", "accept", night, "--results", str(root), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert flat(done.stderr) == flat(
        f"error: night {night} is in no nightly history under {root}/history "
        f"hint: {NO_HISTORY_HINT}"
    )
    assert not (root / "history" / "nightly.decisions.jsonl").exists()


def test_orch_nightly_with_a_bad_playbook_launches_nothing_and_exits_3(tmp_path: Path) -> None:
    book = write_playbook(tmp_path / "pb.yaml", nightly_section="nightly:\n  alpha: 2\n")
    hosts = hosts_file(tmp_path / "hosts.yaml", free_port())
    done = orch_in_process(
        "nightly", str(book), "--hosts", str(hosts), "--results", "results", cwd=tmp_path
    )
    assert (done.returncode, done.stdout) == (3, "")
    assert flat(done.stderr) == flat(
        f"config error: {book}:8:10: nightly.alpha: must be > 0 and < 1, found 2\n"
        "nightly: could not measure: nothing was launched (exit 3)"
    )
    assert not (tmp_path / "results").exists()


def refuse_to_launch(*args: object, **kwargs: object) -> None:
    raise REFUSED


def test_orch_nightly_that_could_not_launch_still_writes_its_night(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.cli.nightly.launch", refuse_to_launch)
    book = write_playbook(tmp_path / "pb.yaml")
    hosts = hosts_file(tmp_path / "hosts.yaml", free_port())
    summary = tmp_path / "summary.md"
    done = orch_in_process(
        *("nightly", str(book), "--hosts", str(hosts), "--results", "results", "--json"),
        cwd=tmp_path,
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert done.returncode == 3, done.stderr
    doc = json.loads(done.stdout)
    folder = Path(doc["results_dir"])
    assert [p.name for p in (tmp_path / "results").iterdir()] == [folder.name]
    assert (doc["verdict"], doc["exit_code"], doc["notes"], doc["cases"], doc["report"]) == (
        "could_not_measure",
        3,
        [REASON],
        [],
        None,
    )
    assert doc["files"] == [str(folder / "nightly.md"), str(folder / "nightly.json")]
    assert summary.read_text() == (tmp_path / folder / "nightly.md").read_text() + "\n"
    assert flat(done.stderr) == flat(
        "note: run two: workload.repeat is 2; with fewer than 5 repeats a night's own scatter "
        "weighs more in its verdict (see the README's nightly section)\n"
        "note: run four: workload.repeat is 4; with fewer than 5 repeats a night's own scatter "
        "weighs more in its verdict (see the README's nightly section)\n"
        "error: the doctor refused to launch\n  hint: fix the configuration"
    )


def test_a_step_summary_that_cannot_be_written_hides_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.cli.nightly.launch", refuse_to_launch)
    book = write_playbook(tmp_path / "pb.yaml")
    hosts = hosts_file(tmp_path / "hosts.yaml", free_port())
    done = orch_in_process(
        *("nightly", str(book), "--hosts", str(hosts), "--results", "results"),
        cwd=tmp_path,
        env={"GITHUB_STEP_SUMMARY": str(tmp_path)},  # a folder: cannot be appended to
    )
    assert done.returncode == 3  # the night's verdict, not a failure to write the summary
    assert done.stdout.startswith("# Nightly: COULD NOT MEASURE (exit 3)\n")
    assert flat(done.stderr).endswith(
        f"warning: cannot append the verdict to GITHUB_STEP_SUMMARY={tmp_path}: Is a directory"
    )


@pytest.mark.integration
def test_orch_nightly_against_a_host_refusing_connections(tmp_path: Path) -> None:
    """A dead host fails its runs: exit 3, could_not_measure naming why, never a regression;
    its case is in the history as failed, without a figure."""
    port = free_port()
    hosts = hosts_file(tmp_path / "hosts.yaml", port)
    book = tmp_path / "pb.yaml"
    book.write_text(
        "name: nightly\n"
        "runs:\n  - {name: a, engine: vllm, model: m, workload: {num_prompts: 4, repeat: 2}}\n"
    )
    (tmp_path / "known_hosts").write_text("")
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "nightly", str(book), "--hosts", str(hosts)]
        + ["--results", "results", "--known-hosts", str(tmp_path / "known_hosts")]
        + ["--no-report", "--json"],
        cwd=tmp_path,
        env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    folder = tmp_path / doc["results_dir"]
    refused = f"gpu-1: connection refused by 127.0.0.1:{port}"
    assert (doc["verdict"], doc["counts"]) == ("could_not_measure", {"could_not_measure": 7})
    (case,) = doc["cases"]
    assert (case["status"], case["note"]) == ("failed", refused)
    assert {m["reason"] for m in case["metrics"]} == {f"every measurement failed: {refused}"}
    assert json.loads((folder / "nightly.json").read_text())["verdict"] == "could_not_measure"
    assert summary.read_text() == (folder / "nightly.md").read_text() + "\n"
    rows = History(tmp_path / "results", "nightly").rows()
    assert [(r.night, r.status, r.verdict, r.n) for r in rows] == [
        (folder.name, "failed", "could_not_measure", 0)
    ] * 7
    listed = orch_in_process("history", "nightly", "--results", "results", "--json", cwd=tmp_path)
    assert [(n["night"], n["verdict"]) for n in json.loads(listed.stdout)["nights"]] == [
        (folder.name, "could_not_measure")
    ]


# -- orch nightly: an exit of 1 or 2 is a verdict, never anything else -----------------------

STEADY = (100.0, 101.0, 99.0)
STEP = (90.0, 91.0, 89.0)  # -10%: past the 5% threshold and significant
BUG_HINT = "this is a bug in orch: please report it; ORCH_DEBUG=1 shows the traceback"


def five_repeats(tmp_path: Path) -> Path:
    """A playbook whose repeats get no note on stderr."""
    path = tmp_path / "five.yaml"
    path.write_text(
        "name: nightly\nruns:\n  - {name: a, engine: vllm, model: m, workload: {repeat: 5}}\n"
    )
    return path


def error_box_line(stderr: str) -> str:
    """The message inside typer's error box."""
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("│")]
    return line.strip("│ ")


@pytest.mark.parametrize(
    ("args", "usage", "message"),
    [
        (
            ("nightly",),
            "Usage: orch nightly [OPTIONS] {playbook_file}",
            "Missing argument 'playbook_file'.",
        ),
        (
            ("nightly", "pb.yaml", "--bogus"),
            "Usage: orch nightly [OPTIONS] {playbook_file}",
            "No such option: --bogus",
        ),
        (  # another command keeps click's 2
            ("history",),
            "Usage: orch history [OPTIONS] {playbook} [history_file]",
            "Missing argument 'playbook'.",
        ),
    ],
    ids=["nightly without a playbook", "nightly with an unknown option", "history"],
)
def test_a_usage_error_of_orch_nightly_exits_3_with_the_usage(
    tmp_path: Path, args: tuple[str, ...], usage: str, message: str
) -> None:
    done = orch_in_process(*args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (3 if args[0] == "nightly" else 2, "")
    command = args[0]
    assert done.stderr.splitlines()[:2] == [usage, f"Try 'orch {command} -h' for help."]
    assert error_box_line(done.stderr) == message


def crash(*args: object, **kwargs: object) -> None:
    raise RuntimeError("boom")


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "ORCH_DEBUG"])
def test_an_unexpected_error_is_one_message_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, debug: bool
) -> None:
    monkeypatch.setattr("orchestrator.commands.run.plan_run", crash)
    hosts = hosts_file(tmp_path / "hosts.yaml", free_port())
    done = orch_in_process(
        *("nightly", str(five_repeats(tmp_path)), "--hosts", str(hosts), "--results", "results"),
        cwd=tmp_path,
        env={"ORCH_DEBUG": "1"} if debug else {},
    )
    assert (done.returncode, done.stdout) == (3, "")
    message = (
        f"error: orch failed: RuntimeError: boom\n  hint: {BUG_HINT}\n"
        "nightly: could not measure (exit 3)\n"
    )
    if debug:
        trace, _, rest = done.stderr.partition("RuntimeError: boom\n")
        assert trace.startswith("Traceback (most recent call last):\n")
        assert 'in crash\n    raise RuntimeError("boom")\n' in trace
        assert rest == message
    else:
        assert done.stderr == message
    assert not (tmp_path / "results").exists()  # nothing ran: no night to write


def night_results(out: tuple[float, ...]) -> list[RunResult]:
    """A repeat per value of ``out`` (tok/s), with every figure a night judges."""
    results = []
    for k, value in enumerate(out):
        base = measurement(value=8, repeat=k + 1, repeats=len(out), out=value)
        assert base.requests is not None
        decode = Stats(n=10, median=value * 1.5)
        requests = base.requests.model_copy(update={"decode_tok_s": decode})
        results.append(base.model_copy(update={"requests": requests}))
    return results


def night_run(root: Path, out: tuple[float, ...], *, recorded: bool) -> Path:
    """Nights 0-4 steady, judged and appended; night 5's folder with ``out``, its rows already
    in the history when ``recorded`` (so that appending them fails)."""
    for i in range(5):
        judge_results(write_sweep(root / night_id(i), night_results(STEADY)), find=no_change_point)
    folder = write_sweep(root / night_id(5), night_results(out))
    if recorded:
        judge_results(folder, find=no_change_point)
    return folder


def no_change_point(values: object) -> None:
    return None


def launched(folder: Path) -> Callable[..., PlaybookOutcome]:
    """`launch` as if the playbook had just run into ``folder``."""

    def launch(*args: object, **kwargs: object) -> PlaybookOutcome:
        return PlaybookOutcome(folder, [], folder / "results.csv", None)

    return launch


def orch_nightly_json(tmp_path: Path, root: Path) -> CliResult:
    hosts = hosts_file(tmp_path / "hosts.yaml", free_port())
    return orch_in_process(
        *("nightly", str(five_repeats(tmp_path)), "--hosts", str(hosts)),
        *("--results", str(root), "--no-report", "--json"),
        cwd=tmp_path,
    )


def test_an_error_judging_a_night_that_ran_leaves_could_not_measure_in_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "results"
    folder = night_run(root, STEADY, recorded=False)
    monkeypatch.setattr("orchestrator.cli.nightly.launch", launched(folder))
    monkeypatch.setattr("orchestrator.commands.nightly.judge_and_record", crash)
    done = orch_nightly_json(tmp_path, root)
    assert done.returncode == 3
    assert done.stderr == f"error: orch failed: RuntimeError: boom\n  hint: {BUG_HINT}\n"
    reason = f"orch failed: RuntimeError: boom ({BUG_HINT})"
    doc = json.loads(done.stdout)
    written = json.loads((folder / "nightly.json").read_text())
    for found in (doc, written):
        assert (found["verdict"], found["exit_code"], found["notes"], found["cases"]) == (
            "could_not_measure",
            3,
            [reason],
            [],
        )
    assert (folder / "nightly.md").read_text().startswith("# Nightly: COULD NOT MEASURE (exit 3)\n")


def test_a_report_that_fails_in_any_way_is_a_warning_not_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def plotting_fails(*args: object, **kwargs: object) -> None:
        raise ValueError("matplotlib says no")

    monkeypatch.setattr("orchestrator.commands.report.report", plotting_fails)
    verdict = could_not_measure("nightly", night_id(0), "hosts down")
    folder = tmp_path / night_id(0)
    folder.mkdir()
    night = nightly.write_outcome(verdict, folder, report=True)
    assert (night.files, night.report, night.report_problem) == (
        (folder / "nightly.md", folder / "nightly.json"),
        None,
        "ValueError: matplotlib says no",
    )


@pytest.mark.parametrize(
    ("out", "verdict", "exit_code"),
    [(STEP, "suspicious", 2), (STEADY, "ok", 3)],
    ids=["a suspicious night keeps its exit", "an ok night not recorded is 3"],
)
def test_a_history_that_cannot_be_appended_to_hides_no_verdict(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    out: tuple[float, ...],
    verdict: str,
    exit_code: int,
) -> None:
    root = tmp_path / "results"
    folder = night_run(root, out, recorded=True)
    rows = History(root, "nightly").path.read_bytes()
    monkeypatch.setattr("orchestrator.cli.nightly.launch", launched(folder))
    done = orch_nightly_json(tmp_path, root)
    assert (done.returncode, done.stderr) == (exit_code, "")
    note = (
        f"measured, but not recorded in the history: night {folder.name} is already in "
        f"{root}/history/nightly.jsonl (each night is recorded once; `orch history` lists the "
        "nights)"
    )
    doc = json.loads(done.stdout)
    written = json.loads((folder / "nightly.json").read_text())
    for found in (doc, written):
        assert (found["verdict"], found["exit_code"], found["notes"]) == (
            verdict,
            exit_code,
            [note],
        )
        assert len(found["cases"]) == 1
    md = (folder / "nightly.md").read_text().splitlines()
    assert md[0] == f"# Nightly: {verdict.upper()} (exit {exit_code})"
    assert md[3] == f"> {md_block(note)}"  # as text: a note may quote an error message
    assert History(root, "nightly").path.read_bytes() == rows  # nothing appended twice
