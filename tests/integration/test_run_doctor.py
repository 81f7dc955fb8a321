"""The doctor around `orch run` (issue 5), end to end on embedded hosts.

A DFlash drafter with another tokenizer's mask id and guessed layer ids (the shipped
``orch-demo/Qwen3.6-27B-DFlash-broken``) must be refused before any server starts; launched
anyway (``--force``, or ``doctor: warn``) its acceptance collapses, and the results say so with
the doctor's findings and the likely causes ranked.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.main import run as orch_inprocess
from orchestrator.results.model import RunResult
from tests.fixtures.procs import kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"
HOSTS = DATA / "hosts-embedded.yaml"
SECRET_VAR = "ORCH_E2E_SECRET"
BROKEN_ERRORS = {("mask_token_id", "error"), ("target_layer_ids", "error")}
CLI_TIMEOUT_S = 120


def with_ports(src: Path, dest: Path) -> Path:
    """Copy a playbook, giving every run a free port (other tests and demos share 127.0.0.1)."""
    book = yaml.safe_load(src.read_text())
    for run in book["runs"]:
        run["port"] = free_port()
    dest.write_text(yaml.safe_dump(book, sort_keys=False))
    return dest


def sandbox_homes(root: Path) -> list[Path]:
    return [root / name / "home" for name in ("emb-1", "emb-2")]


def engine_traces(root: Path) -> list[str]:
    """Anything an engine start leaves on the embedded hosts: run folders, simulator state."""
    found = []
    for name in ("emb-1", "emb-2"):
        runs = root / name / "home" / ".cache" / "orch" / "runs"
        if runs.exists():
            found += [str(p) for p in runs.iterdir()]
        state = root / name / "state"
        if state.exists():
            found += [str(p) for p in state.glob("gpu-*.json")]
            found += [str(p) for p in state.glob("ground-truth-*.json")]
    return found


def kill_leftovers(root: Path) -> None:
    for home in sandbox_homes(root):
        for pid in pids_with_env("HOME", str(home)):
            kill_tree(pid)


@pytest.fixture
def embedded_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The embedded hosts' root for an in-process CLI call; leftovers killed at teardown."""
    root = tmp_path / "embedded"
    monkeypatch.setenv("ORCH_EMBEDDED_ROOT", str(root))
    monkeypatch.setenv(SECRET_VAR, uuid.uuid4().hex)
    monkeypatch.chdir(tmp_path)
    yield root
    kill_leftovers(root)


def test_run_refused_before_any_server_starts(
    embedded_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    playbook = with_ports(DATA / "doctor.yaml", tmp_path / "doctor.yaml")
    results = tmp_path / "results"
    code = orch_inprocess(["run", str(playbook), "--hosts", str(HOSTS), "--results", str(results)])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    message = " ".join(captured.err.split())  # rich wraps long lines
    assert "the doctor refused to launch" in message
    assert "run 'dflash-broken' on emb-2: [mask_token_id]" in message
    assert "run 'dflash-broken' on emb-2: [target_layer_ids]" in message
    assert "dflash-healthy" not in message  # only the broken run is named
    assert "--force" in message and "doctor: warn" in message  # what to do
    assert "Traceback" not in captured.err
    assert not results.exists(), "a results folder was created for a refused playbook"
    # the hosts were reached (the doctor read the configs there) but no engine ever started
    assert (embedded_env / "emb-2" / "home" / ".cache" / "orch").is_dir()
    assert engine_traces(embedded_env) == []
    assert [
        p for home in sandbox_homes(embedded_env) for p in pids_with_env("HOME", str(home))
    ] == []


def test_doctor_json_findings(
    embedded_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    playbook = with_ports(DATA / "doctor.yaml", tmp_path / "doctor.yaml")
    code = orch_inprocess(["doctor", str(playbook), "--hosts", str(HOSTS), "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err  # an error in one run
    report = json.loads(captured.out)
    runs = {(r["run"], r["host"]): r for r in report["runs"]}
    assert set(runs) == {("dflash-healthy", "emb-1"), ("dflash-broken", "emb-2")}
    for entry in runs.values():
        assert entry["error"] is None
        assert entry["doctor"] == "error"
    errors = {
        name: {(f["check"], f["severity"]) for f in r["findings"] if f["severity"] == "error"}
        for (name, _), r in runs.items()
    }
    assert errors == {"dflash-healthy": set(), "dflash-broken": BROKEN_ERRORS}
    broken = {f["check"]: f for f in runs[("dflash-broken", "emb-2")]["findings"]}
    assert "151669" in broken["mask_token_id"]["message"]  # the Qwen3 id, named as such
    assert "[1, 16, 31, 46, 61]" in broken["target_layer_ids"]["message"]  # the expected ids
    # checks that pass are reported too, as ok
    healthy = {f["check"]: f["severity"] for f in runs[("dflash-healthy", "emb-1")]["findings"]}
    assert healthy["mask_token_id"] == healthy["target_layer_ids"] == "ok"
    assert engine_traces(embedded_env) == []


# -- launched anyway: --force, and `doctor: warn` without it ---------------------------------


@dataclass(frozen=True)
class Launched:
    proc: subprocess.CompletedProcess[str]
    results: Path

    def summary(self, run: str, host: str) -> RunResult:
        return RunResult.load(self.results / f"{run}_{host}" / "summary.json")

    def csv_rows(self) -> dict[str, dict[str, str]]:
        with (self.results / "summary.csv").open(newline="") as fh:
            return {row["run"]: row for row in csv.DictReader(fh)}


def launch(playbook: Path, extra: list[str], work: Path) -> Launched:
    root = work / "embedded"
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(root), SECRET_VAR: uuid.uuid4().hex}
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "run",
                str(playbook),
                "--hosts",
                str(HOSTS),
                "--results",
                str(work / "results"),
                *extra,
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )
    finally:
        kill_leftovers(root)
    found = list((work / "results").glob("*"))
    assert len(found) == 1, proc.stdout + proc.stderr
    return Launched(proc, found[0])


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Launched]:
    """`orch run --force doctor.yaml` and `orch run doctor-warn.yaml`, side by side (separate
    embedded roots and ports, so they share nothing)."""
    force_dir = tmp_path_factory.mktemp("doctor-force")
    warn_dir = tmp_path_factory.mktemp("doctor-warn")
    jobs = {
        "force": (
            with_ports(DATA / "doctor.yaml", force_dir / "doctor.yaml"),
            ["--force"],
            force_dir,
        ),
        "warn": (
            with_ports(DATA / "doctor-warn.yaml", warn_dir / "doctor-warn.yaml"),
            [],
            warn_dir,
        ),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(launch, *args) for k, args in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def check_collapse(summary: RunResult) -> None:
    assert summary.error is None
    assert summary.requests is not None and summary.requests.completed == 4
    assert summary.acceptance is not None and summary.acceptance.length is not None
    assert summary.acceptance.length < 1.5
    collapse = summary.collapse
    assert collapse is not None and summary.verdict == "collapse"
    assert {(f.check, f.severity) for f in summary.doctor if f.severity == "error"} == BROKEN_ERRORS
    ranked = [c.cause for c in sorted(collapse.likely_causes, key=lambda c: c.rank)]
    assert set(ranked[:2]) == {"mask_token", "layer_ids"}, ranked
    assert [c.rank for c in collapse.likely_causes][:2] == [1, 2]


def test_force_launches_and_flags_the_collapse(launched: dict[str, Launched]) -> None:
    run = launched["force"]
    assert run.proc.returncode == 3, run.proc.stdout + run.proc.stderr  # completed, collapsed
    check_collapse(run.summary("dflash-broken", "emb-2"))
    healthy = run.summary("dflash-healthy", "emb-1")
    assert healthy.error is None and healthy.collapse is None
    assert healthy.acceptance is not None and (healthy.acceptance.length or 0) > 3
    rows = run.csv_rows()
    assert rows["dflash-broken"]["collapse"] == "True"
    assert rows["dflash-healthy"]["collapse"] == "False"
    stdout = " ".join(run.proc.stdout.split())
    assert "COLLAPSE" in stdout
    assert "mask_token" in stdout and "layer_ids" in stdout  # the ranked causes are printed
    assert "launching anyway: --force" in " ".join(run.proc.stderr.split())


def test_doctor_warn_launches_without_force(launched: dict[str, Launched]) -> None:
    run = launched["warn"]
    assert run.proc.returncode == 3, run.proc.stdout + run.proc.stderr  # completed, collapsed
    check_collapse(run.summary("dflash-broken-warn", "emb-1"))
    assert run.csv_rows()["dflash-broken-warn"]["collapse"] == "True"
    assert "COLLAPSE" in run.proc.stdout
    assert "launching anyway: doctor: warn" in " ".join(run.proc.stderr.split())
