"""Issue 9, items 5-8 and 10, at the unit level: deadlines, a dropped connection, a failed stop,
the agent's controller watch and a full remote disk (the same paths over real sshd are in
tests/integration/test_faults_transport.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.client import STDIN_SPEC, Agent
from orchestrator.agent.fake import FAKE_BUNDLE, FAKE_HOST, FakeAgent, agent_error
from orchestrator.errors import HostTimeout, RemoteDiskFull
from orchestrator.remote.wire import (
    CONTRACT_VERSION,
    EchoSpec,
    ErrorKind,
    StatusSpec,
    StopOutcome,
    StopResult,
)
from orchestrator.runner import server as server_mod
from orchestrator.runner.execute import execute_run
from orchestrator.runner.progress import PhaseChanged, RecordingObserver, RunPhase
from orchestrator.runner.server import ServerRegistry, StopFailed
from orchestrator.transport.translate import no_space_error
from tests.unit.test_runner_fake_agent import (
    LOG,
    MODEL,
    FakeLog,
    Stream,
    http_answer,
    job_for,
    launched,
    make_run,
    start,
    status_of,
)

REPO = Path(__file__).resolve().parents[2]
V = CONTRACT_VERSION


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STOP_RETRY_S", "RECONNECT_BACKOFF_S", "DIED_POLL_S"):
        monkeypatch.setattr(server_mod, name, 0.0)


@dataclass
class _Done:
    stdout: str
    returncode: int = 0
    stderr: str = ""


@dataclass
class FakeConn:
    """An AgentConnection recording what it runs; ``hang`` verbs time out, ``full`` refuses
    every spec file as a full disk would."""

    host: str = "gpu-9"
    closed: bool = False
    full: bool = False
    hang: tuple[str, ...] = ()
    pids: str = ""
    runs: list[tuple[list[str], str | None, float | None]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = False,
        input: str | None = None,
    ) -> _Done:
        self.runs.append((list(argv), input, timeout))
        if argv[0] == "pgrep":
            return _Done(self.pids, returncode=0 if self.pids else 1)
        if argv[2] in self.hang:
            raise HostTimeout(self.host, f"running `{argv}` took longer than allowed")
        data = {"payload": "hi", "argv": [], "env": {}} if argv[2] == "echo" else {"servers": []}
        return _Done(json.dumps({"v": V, "event": "result", "data": data}) + "\n")

    def open_stream(self, argv: Sequence[str], **kw: Any) -> Any:
        raise NotImplementedError

    async def put_bytes(self, data: bytes, remote_path: str, *, mode: int = 0o600) -> int:
        if self.full and "/specs/" in remote_path:
            raise RemoteDiskFull(
                self.host, f"no space left on {self.host}:/w/specs", path="/w/specs"
            )
        self.files[remote_path] = data
        return len(data)

    async def exists(self, remote_path: str) -> bool:
        return True

    async def remove(self, remote_path: str) -> bool:
        return self.files.pop(remote_path, None) is not None

    async def makedirs(self, remote_path: str) -> None:
        pass

    async def home(self) -> str:
        return "/home/bench"


def ready(agent: Agent) -> Agent:
    """``agent`` as after ``ensure()`` (its checks are tests/unit/test_agent_verify.py's)."""
    agent._ready = True
    agent._workdir = "/w"
    return agent


def test_no_space_is_said_with_host_and_path() -> None:
    err = no_space_error("gpu-1", "/scratch/orch/specs", "writing /scratch/orch/specs/x.json")
    assert isinstance(err, RemoteDiskFull)
    assert str(err) == (
        "gpu-1: no space left on gpu-1:/scratch/orch/specs (writing /scratch/orch/specs/x.json)"
    )
    assert err.path == "/scratch/orch/specs"
    assert err.hint is not None and "df -h /scratch/orch/specs" in err.hint


def test_a_full_disk_sends_the_spec_on_stdin_never_on_the_command_line() -> None:
    conn = FakeConn(full=True)
    agent = ready(Agent(conn, FAKE_HOST, bundle=FAKE_BUNDLE))
    secret = "sk-never-in-argv"
    result = asyncio.run(agent.echo(EchoSpec(payload=secret)))
    assert result.payload == "hi"
    argv, stdin, _ = conn.runs[-1]
    assert argv[2:] == ["echo", STDIN_SPEC]
    assert not any(secret in item for item in argv)
    assert stdin is not None and stdin.endswith("\n") and stdin.count("\n") == 1
    assert json.loads(stdin)["payload"] == secret
    assert not [p for p in conn.files if "/specs/" in p]


def test_a_call_past_its_deadline_names_the_blocked_remote_process() -> None:
    conn = FakeConn(hang=("status",), pids="4242\n")
    host = FAKE_HOST.__class__(**{**FAKE_HOST.__dict__, "agent_timeout_s": 2.0})
    agent = ready(Agent(conn, host, bundle=FAKE_BUNDLE))
    with pytest.raises(HostTimeout) as info:
        asyncio.run(agent.status(StatusSpec(all=True, workdir="/w")))
    argv, _, timeout = conn.runs[0]
    assert timeout == 2.0  # the host's agent_timeout_s
    message = info.value.message
    assert message.startswith("status: no answer within 2 s from the agent; its process may")
    assert "(pid 4242)" in message and argv[-1] in message
    pgrep = conn.runs[1][0]
    assert pgrep[:3] == ["pgrep", "-f", "--"]
    assert info.value.hint is not None and "agent_timeout_s" in info.value.hint
    assert argv[-1] not in conn.files  # the spec the agent never read is deleted


def test_every_verb_has_a_default_deadline() -> None:
    conn = FakeConn()
    agent = ready(Agent(conn, FAKE_HOST, bundle=FAKE_BUNDLE))
    asyncio.run(agent.status(StatusSpec(all=True, workdir="/w")))
    asyncio.run(agent.echo(EchoSpec(payload=1)))
    assert [timeout for _, _, timeout in conn.runs] == [60.0, 60.0]


def test_an_agent_takes_a_fresh_connection_once_its_own_dropped() -> None:
    dead, fresh = FakeConn(closed=True), FakeConn()

    async def connect() -> FakeConn:
        return fresh

    agent = ready(Agent(dead, FAKE_HOST, bundle=FAKE_BUNDLE, connect=connect))
    asyncio.run(agent.status(StatusSpec(all=True, workdir="/w")))
    assert dead.runs == [] and len(fresh.runs) == 1
    assert agent.conn is fresh


def test_a_failed_stop_is_told_and_recorded_beside_the_runs_own_error(tmp_path: Path) -> None:
    """The load generator failed (the run's error) and then the stop failed too: the stop's
    failure is told on the console and kept in the result's warnings, never swallowed."""
    models = json.dumps({"data": [{"id": MODEL}]})
    agent = (
        FakeAgent()
        .on("launch", launched)
        .on("stop", agent_error(ErrorKind.STOP_FAILED, "pids [4242] survived", verb="stop"))
        .always("status", status_of("r1-id", alive=True))
        .always("http", http_answer(200, models))
        .always("tail", FakeLog(LOG, exited=False))
        .on("loadgen", Stream([]))
    )
    observer = RecordingObserver()
    job = job_for(tmp_path, make_run())

    async def scenario() -> Any:
        async with ServerRegistry() as registry:
            return await execute_run(
                job, agent=agent, reconnect=agent.reconnect, registry=registry, observer=observer
            )

    [result] = asyncio.run(scenario())
    assert result.error is not None and "without a result" in result.error.message
    [warning] = [w.message for w in result.warnings if w.kind == "stop_failed"]
    assert "run 'r1' (run id r1-id, port 8000) may still be running on fake-gpu" in warning
    assert "orch ps --only fake-gpu" in warning and "orch stop --all --only fake-gpu" in warning
    reasons = [
        e.reason
        for e in observer.events
        if isinstance(e, PhaseChanged) and e.phase is RunPhase.FAILED
    ]
    assert len(reasons) == 2 and reasons[1] is not None
    assert "may still be running on fake-gpu" in reasons[1]
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert {"kind": "stop_failed", "message": warning, "details": {}} in summary["warnings"]
    assert [c.verb for c in agent.calls].count("stop") == 1  # not retried blindly


def test_processes_left_after_stop_are_a_stop_failure() -> None:
    left = StopResult(
        stopped=[
            StopOutcome(
                run_id="r1-id",
                pid=4242,
                was_running=True,
                signals=["SIGTERM", "SIGKILL"],
                killed_pids=[4242],
                remaining_pids=[4242],
                gpu_pids=[4242],
                gpu_released=False,
                exit=None,
                waited_s=40.0,
            )
        ]
    )
    agent = FakeAgent().on("launch", launched).on("stop", left)

    async def scenario() -> None:
        server = await start(agent, ServerRegistry())
        await server.stop()

    with pytest.raises(StopFailed, match=r"survived SIGTERM and SIGKILL \(pid 4242\)") as info:
        asyncio.run(scenario())
    assert info.value.kind is ErrorKind.STOP_FAILED


# -- the agent's side: spec on stdin, controller watch ----------------------------------------

AGENT = "import sys\nimport orchestrator.remote.main as m\n"


def test_the_agent_reads_its_spec_from_stdin() -> None:
    spec = json.dumps({"v": V, "payload": {"k": "ünï"}}, ensure_ascii=True)
    proc = subprocess.run(
        [sys.executable, "-c", AGENT + "sys.exit(m.main(sys.argv[1:]))", "echo", "-"],
        input=(spec + "\n").encode(),
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    line = json.loads(proc.stdout.decode().splitlines()[-1])
    assert line["event"] == "result" and line["data"]["payload"] == {"k": "ünï"}


def test_a_watched_verb_ends_when_its_controller_goes_away(tmp_path: Path) -> None:
    """stdin at EOF (the SSH channel closed) interrupts a long-running verb at once."""
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"v": V}))
    script = AGENT + (
        "import time\n"
        "from orchestrator.remote.wire import TailHeartbeat\n"
        "def forever(spec, emit):\n"
        "    try:\n"
        "        emit(TailHeartbeat(offset=0))\n"
        "        while True:\n"
        "            time.sleep(0.05)\n"
        "    except KeyboardInterrupt:\n"
        "        print('verb interrupted', file=sys.stderr, flush=True)\n"
        "        raise\n"
        "import orchestrator.remote.dispatch as d\n"
        "d.VERBS['forever'] = forever\n"
        "m.WATCHED = ('forever',)\n"
        "sys.exit(m.main(sys.argv[1:]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "forever", str(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "heartbeat"
        proc.stdin.close()  # the controller went away
        assert proc.wait(timeout=30) == 130
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "verb interrupted" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_verb_not_watched_ignores_stdin(tmp_path: Path) -> None:
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"v": V, "payload": 1}))
    proc = subprocess.run(
        [sys.executable, "-c", AGENT + "sys.exit(m.main(sys.argv[1:]))", "echo", str(spec)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout.decode().splitlines()[-1])["data"]["payload"] == 1


def test_an_interrupted_call_removes_its_spec_file() -> None:
    """Ctrl-C while a verb runs: its spec (secrets, for a launch) must not stay on the host."""

    class Interrupted(FakeConn):
        async def run(self, argv: Sequence[str], **kw: Any) -> _Done:
            self.runs.append((list(argv), None, None))
            raise asyncio.CancelledError

    conn = Interrupted()
    agent = ready(Agent(conn, FAKE_HOST, bundle=FAKE_BUNDLE))
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(agent.echo(EchoSpec(payload="sk-secret")))
    ((argv, _, _),) = conn.runs
    assert argv[-1].startswith("/w/specs/echo-") and argv[-1].endswith(".json")
    assert conn.files == {}  # pushed, then removed


def test_an_sftp_no_space_status_is_a_full_disk_naming_the_path() -> None:
    """Servers that report ENOSPC precisely (not OpenSSH's bare "Failure") are said the same."""
    import asyncssh

    from orchestrator.transport.translate import session_error

    err = session_error(
        asyncssh.SFTPNoSpaceOnFilesystem("disk full"),
        "gpu-1",
        "creating directory /w/specs",
        path="/w",
    )
    assert isinstance(err, RemoteDiskFull)
    assert str(err) == "gpu-1: no space left on gpu-1:/w (creating directory /w/specs)"
