"""Issue 9 faults over real OpenSSH sshd, through the real CLI: a dropped connection (5), a hung
host (6) and a failed stop (7). A full remote disk (10) is in test_faults_disk.py, Ctrl-C over
sshd (8) in test_run_interrupt.py.

Each test breaks a host the way the issue reproduced it and asserts the recorded outcome, the
exit status, the console's message and that no engine process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.agent.client import SESSION_ENV
from orchestrator.results.model import RunResult
from tests.fixtures.procs import alive, kill_tree
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

SIM_ENV = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4", "VLLM_LOG_STATS_INTERVAL": "1"}
CLI_TIMEOUT_S = 120
WAIT_S = 60.0  # hang guards only: nothing below asserts on time


def vllm_run(name: str, host: str, **workload: Any) -> dict[str, Any]:
    return {
        "name": name,
        "hosts": [host],
        "engine": "vllm",
        "model": "Qwen/Qwen3.6-27B",
        "tensor_parallel": 2,
        "port": free_port(),
        "workload": {
            "prompts": "builtin:chat",
            "concurrency": 2,
            "max_tokens": 32,
            "ignore_eos": True,
            "warmup": 0,
            **workload,
        },
    }


def write_files(
    tmp_path: Path,
    factory: SshdFactory,
    hosts: dict[str, dict[str, Any]],
    runs: list[dict[str, Any]],
) -> tuple[Path, Path]:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(factory.write_known_hosts()),
                "ssh_config": str(factory.ssh_config_path),
                "hosts": hosts,
            }
        )
    )
    playbook = tmp_path / "playbook.yaml"
    playbook.write_text(yaml.safe_dump({"name": "faults", "runs": runs}, sort_keys=False))
    return inventory, playbook


def entry(host: SshdHost, **extra: Any) -> dict[str, Any]:
    return {**host.inventory_entry(), "gpus": "2 x RTX A6000", "env": dict(SIM_ENV), **extra}


def orch_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def orch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        orch_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )


def start_orch(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    out = (tmp_path / "stdout.txt").open("w")
    err = (tmp_path / "stderr.txt").open("w")
    environ = None if env is None else {**os.environ, **env}
    return subprocess.Popen(
        orch_argv(*args), cwd=tmp_path, stdout=out, stderr=err, text=True, env=environ
    )


def wait_for(proc: subprocess.Popen[str], tmp_path: Path, text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if text in (tmp_path / "stderr.txt").read_text():
            return
        assert proc.poll() is None, (
            f"orch exited ({proc.returncode}) before {text!r}:\n"
            + (tmp_path / "stderr.txt").read_text()
        )
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never came:\n{(tmp_path / 'stderr.txt').read_text()}")


def finished(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[int, str]:
    code = proc.wait(timeout=CLI_TIMEOUT_S)
    text = (tmp_path / "stdout.txt").read_text() + (tmp_path / "stderr.txt").read_text()
    return code, text


def flat(text: str) -> str:
    """Console text with its wrapping undone (rich wraps at 80 columns off a terminal)."""
    return " ".join(text.split())


def summaries(results: Path) -> dict[str, dict[str, Any]]:
    [folder] = [p for p in results.iterdir() if p.is_dir()]
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(folder.glob("*/summary.json"))}


def engines(host: SshdHost, workdir: Path | None = None) -> list[dict[str, Any]]:
    runs = (workdir or host.workdir) / "runs"
    return [json.loads(p.read_text()) for p in runs.glob("*/server.json")]


def no_process_left(host: SshdHost) -> None:
    deadline = time.monotonic() + 10  # session processes exit as their connection closes
    while host.leftover_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.leftover_pids() == [], "a process started through the host is still running"


# -- 5: a dropped connection -------------------------------------------------------------


def test_a_dropped_connection_measures_again_and_the_next_run_goes_on(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """SIGKILL of the per-connection sshd while run 1 measures: orch reconnects, finds its
    server still serving, measures again from a fresh warm-up (the cut attempt's records set
    aside), follows the server's log on from its byte offset (no line lost or repeated), says
    so, and run 2 completes; nothing is left running."""
    host = sshd_factory.start("sshd-drop")
    inventory, playbook = write_files(
        tmp_path,
        sshd_factory,
        {"sshd-drop": entry(host)},
        [
            vllm_run("first", "sshd-drop", num_prompts=8),
            vllm_run("second", "sshd-drop", num_prompts=4),
        ],
    )
    proc = start_orch(
        tmp_path, "run", str(playbook), "--hosts", str(inventory), "--results", "results"
    )
    try:
        wait_for(proc, tmp_path, "sshd-drop first: measuring")
        sessions = host.session_pids()
        assert sessions, "no per-connection sshd to kill"
        for pid in sessions:  # only the sshd serving us: what it started must notice alone
            os.kill(pid, signal.SIGKILL)
        code, text = finished(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, text
    [folder] = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    first = RunResult.load(folder / "first_sshd-drop" / "summary.json")
    second = RunResult.load(folder / "second_sshd-drop" / "summary.json")
    assert first.error is None, text
    assert first.requests is not None and second.requests is not None
    assert first.requests.completed == 8 and first.requests.failed == 0
    warning = (
        "the connection to sshd-drop dropped while measuring; the server kept running; "
        "measured again from a fresh warm-up (attempt 2; the first attempt's records are in "
        "requests.attempt-1.jsonl)"
    )
    # (the GPU figures' own notes are not this: a simulator running 4x fast reads its memory
    # faster than an A6000 can, so no % of roofline is given)
    gpu_notes = ("telemetry_", "roofline_")
    assert [(w.kind, w.message) for w in first.warnings if not w.kind.startswith(gpu_notes)] == [
        ("connection_dropped", warning)
    ]
    run_dir = folder / "first_sshd-drop"
    cut = (run_dir / "requests.attempt-1.jsonl").read_text().splitlines()
    kept = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(cut) < 8, "the first attempt was not cut?"
    assert sorted(r["index"] for r in kept if not r["warmup"]) == list(range(8))
    # attempt 2 began once the cut load generator was gone: none of its requests still ran
    before = (run_dir / "metrics_before.txt").read_text().splitlines()
    running = [line for line in before if line.startswith("vllm:num_requests_running")]
    assert running and all(float(line.rsplit(" ", 1)[1]) == 0 for line in running), running
    assert second.error is None, text
    assert second.requests.completed == 4
    said = flat(text)
    assert f"warning: first on sshd-drop: {warning}" in said
    assert "Traceback" not in text
    started = engines(host)
    assert len(started) == 2
    assert not any(alive(s["pid"]) for s in started), "an engine is still running"
    # server.log followed across the drop from its byte offset: every line the engine wrote,
    # once each, in order (the engine's own log on the host is the reference)
    [first_engine] = [s for s in started if s["run_id"] == first.run.run_id]
    remote = Path(first_engine["log"]).read_text().splitlines()
    local = (run_dir / "server.log").read_text().splitlines()
    assert local == remote
    no_process_left(host)  # the cut load generator ended with its connection


# -- 6: a hung host ------------------------------------------------------------------------


def hung_python(tmp_path: Path) -> Path:
    """An interpreter that blocks forever, like one stuck on a stale NFS mount (a loop rather
    than `exec sleep`, so its command line keeps the agent's arguments, as a blocked python's
    does)."""
    script = tmp_path / "hung-python"
    script.write_text("#!/bin/sh\nwhile :; do sleep 1; done\n")
    script.chmod(0o755)
    return script


def blocked_by(script: Path) -> list[int]:
    """The processes running ``script`` (the blocked "python" and the agent arguments it got)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(script).encode() in (entry / "cmdline").read_bytes() and alive(
                    int(entry.name)
                ):
                    found.append(int(entry.name))
    return found


def test_a_hung_host_fails_its_own_row_and_the_others_go_on(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = sshd_factory.start("sshd-ok")
    hung = {
        **entry(host),
        "python": str(hung_python(tmp_path)),
        "workdir": str(host.home / "hung-workdir"),
        "agent_timeout_s": 2,
    }
    inventory, playbook = write_files(
        tmp_path,
        sshd_factory,
        {"sshd-ok": entry(host), "sshd-hung": hung},
        [vllm_run("healthy", "sshd-ok", num_prompts=4), vllm_run("stuck", "sshd-hung")],
    )

    script = hung_python(tmp_path)
    try:
        check = orch("hosts", "check", "--hosts", str(inventory), "--json", cwd=tmp_path)
        assert check.returncode == 1, check.stdout + check.stderr
        rows = {r["name"]: r for r in json.loads(check.stdout)["hosts"]}
        assert rows["sshd-ok"]["error"] is None and rows["sshd-ok"]["gpus"]
        assert rows["sshd-hung"]["reachable"] is True  # SSH answered; its python did not
        error = rows["sshd-hung"]["error"]
        assert error.startswith("probe: no answer within 2 s from the agent; its process may")
        assert "(pid " in error and "pid unknown" not in error
        assert str(script) in error and " probe " in error

        run = orch(
            "run", str(playbook), "--hosts", str(inventory), "--results", "results", cwd=tmp_path
        )
        text = run.stdout + run.stderr
        assert run.returncode == 1, text
        found = summaries(tmp_path / "results")
        assert found["healthy_sshd-ok"]["error"] is None, text
        assert found["healthy_sshd-ok"]["completed"] == 4
        stuck = found["stuck_sshd-hung"]["error"]
        assert stuck is not None and stuck["type"] == "HostTimeout"
        assert "probe: no answer within 2 s" in stuck["message"]
        assert "may still be blocked on the host" in flat(text)
        assert "Traceback" not in text
        started = engines(host)
        assert len(started) == 1  # the healthy host's engine: stopped after its run
        assert not any(alive(s["pid"]) for s in started), "an engine is still running"
        assert blocked_by(script), "the blocked processes the console names are gone?"
    finally:
        for pid in blocked_by(script):  # what this test left blocked on the host
            kill_tree(pid)
    no_process_left(host)  # nothing else: no engine, no load generator


# -- 7: a failed stop ----------------------------------------------------------------------


def test_a_stop_that_cannot_run_is_an_error_naming_ps_and_stop_all(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """While the run measures, `<workdir>/specs` becomes a file: no spec can be written, so
    the stop cannot run. The run must not say done: it fails, names `orch ps` and `orch stop
    --all`, exits non-zero; then `orch stop --all` (specs back) stops the engine. One-shot
    agent calls (ORCH_AGENT_SESSION=0): a session agent takes its specs on stdin, no file."""
    host = sshd_factory.start("sshd-stop")
    inventory, playbook = write_files(
        tmp_path,
        sshd_factory,
        {"sshd-stop": entry(host)},
        [vllm_run("kept", "sshd-stop", duration_s=1.5)],
    )
    specs = host.workdir / "specs"
    proc = start_orch(
        tmp_path,
        "run",
        str(playbook),
        "--hosts",
        str(inventory),
        "--results",
        "results",
        env={SESSION_ENV: "0"},
    )
    try:
        wait_for(proc, tmp_path, "sshd-stop kept: measuring")
        shutil.rmtree(specs)
        specs.write_text("not a directory\n")
        code, text = finished(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        assert code == 1, text
        said = flat(text)
        assert "may still be running on sshd-stop" in said
        assert "orch ps --only sshd-stop" in said
        assert "orch stop --all --only sshd-stop" in said
        assert "Traceback" not in text
        summary = summaries(tmp_path / "results")["kept_sshd-stop"]
        recorded = json.dumps(summary)
        assert "may still be running on sshd-stop" in recorded
        [server] = engines(host)
        assert alive(server["pid"]), "the engine was stopped after all?"
    finally:
        specs.unlink()
        specs.mkdir(mode=0o700)
    stopped = orch("stop", "--all", "--hosts", str(inventory), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not alive(server["pid"])
    no_process_left(host)


# -- 10: the remote disk is full -----------------------------------------------------------
