"""The agent's entry point, run the way hosts run it: ``python agent.pyz <verb> <spec.json>``."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.bundle import build_bundle
from orchestrator.agent.client import decode_output
from orchestrator.remote import dispatch as agent_dispatch
from orchestrator.remote import main as agent_main
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import (
    CONTRACT_VERSION,
    EchoResult,
    ErrorKind,
    ProgressEvent,
    StatusResult,
)

V = CONTRACT_VERSION

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = build_bundle()
    path = tmp_path_factory.mktemp("agent") / bundle.filename
    path.write_bytes(bundle.data)
    return path


def run_agent(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(argv, capture_output=True, env=env, cwd=cwd, timeout=60, check=False)
    lines = proc.stdout.decode("utf-8").splitlines()
    return proc.returncode, [json.loads(line) for line in lines], proc.stderr.decode()


def write_spec(path: Path, spec: Any) -> Path:
    """A spec as the controller writes it: an object carries the contract version ("v")
    unless the test gives its own (a spec without one is refused: see below)."""
    path.write_text(json.dumps({"v": V, **spec} if isinstance(spec, dict) else spec))
    return path


def test_echo_returns_spec_argv_and_requested_env(pyz: Path, tmp_path: Path) -> None:
    payload = {"model": "a'b\"c $(rm -rf /) `id`; ünï\n--x", "n": [1, 2.5, None, True]}
    spec = {"payload": payload, "env_keys": ["ORCH_T", "ABSENT"]}
    spec_path = write_spec(tmp_path / "echo.json", spec)
    env = {**os.environ, "ORCH_T": "v a l"}
    code, events, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)], env=env)
    assert code == 0
    assert events == [
        {
            "v": V,
            "event": "result",
            "data": {
                "payload": payload,
                "argv": [str(pyz), "echo", str(spec_path)],
                "env": {"ORCH_T": "v a l", "ABSENT": None},
                "child": None,
            },
        }
    ]
    assert not spec_path.exists()  # deleted once read: specs may hold secrets


def test_echo_child_gets_args_and_env_uninterpreted(pyz: Path, tmp_path: Path) -> None:
    child = {
        "args": ["--model", "$(id)", "a b", "-", "`x`;y"],
        "env": {"HF_TOKEN": "s3cr$t\n'\"", "E": ""},
    }
    spec_path = write_spec(tmp_path / "child.json", {"child": child})
    code, events, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)])
    assert code == 0
    assert events[-1]["data"]["child"] == {"argv": child["args"], "env": child["env"]}


def test_keep_spec_leaves_the_file(pyz: Path, tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "keep.json", {"keep_spec": True})
    code, _, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)])
    assert code == 0
    assert json.loads(spec_path.read_text()) == {"v": V, "keep_spec": True}


@pytest.mark.parametrize(
    ("content", "kind", "message_part", "deleted"),
    [
        (None, "bad_spec", "cannot read spec file", True),
        ("{not json", "bad_spec", "is not valid JSON", True),
        ("[1, 2]", "bad_spec", "holds a list, not an object", True),
        (b"\xff\xfe", "bad_spec", "is not valid JSON", True),
    ],
)
def test_bad_spec_is_one_error_event(
    pyz: Path, tmp_path: Path, content: Any, kind: str, message_part: str, deleted: bool
) -> None:
    spec_path = tmp_path / "bad.json"
    if isinstance(content, bytes):
        spec_path.write_bytes(content)
    elif content is not None:
        spec_path.write_text(content)
    code, events, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)])
    assert code == 1
    assert len(events) == 1
    assert events[0]["event"] == "error"
    assert events[0]["kind"] == kind
    assert message_part in events[0]["message"]
    assert events[0]["details"] == {"path": str(spec_path)}
    assert spec_path.exists() is not deleted


def test_unknown_verb(pyz: Path, tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "s.json", {})
    code, events, _ = run_agent([sys.executable, str(pyz), "frobnicate", str(spec_path)])
    assert code == 1
    assert events == [
        {
            "v": V,
            "event": "error",
            "kind": "unknown_verb",
            "message": "unknown verb 'frobnicate'",
            "details": {"verb": "frobnicate", "known": sorted(agent_dispatch.VERBS)},
        }
    ]
    assert not spec_path.exists()  # deleted even though no verb read it


def test_wrong_argument_count(pyz: Path) -> None:
    code, events, _ = run_agent([sys.executable, str(pyz), "echo"])
    assert code == 1
    assert events[0]["kind"] == "bad_usage"
    assert events[0]["message"] == agent_main.USAGE


def test_agent_failure_from_a_verb_keeps_its_kind(pyz: Path, tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "s.json", {"ports": [0]})
    code, events, _ = run_agent([sys.executable, str(pyz), "probe", str(spec_path)])
    assert code == 1
    assert events == [
        {
            "v": V,
            "event": "error",
            "kind": "bad_spec",
            "message": "probe: 'ports' must be a list of port numbers (1-65535)",
            "details": {},
        }
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"ports": ["http"]},
            "bad spec: ProbeSpec.ports[0]: expected an integer, got the string 'http'",
        ),
        ({"portz": [1]}, "bad spec: ProbeSpec: unknown field 'portz'"),
    ],
)
def test_a_spec_outside_the_contract_is_bad_spec(
    pyz: Path, tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    spec_path = write_spec(tmp_path / "s.json", spec)
    code, events, _ = run_agent([sys.executable, str(pyz), "probe", str(spec_path)])
    assert code == 1
    assert [(e["kind"], e["message"]) for e in events] == [("bad_spec", message)]


def test_a_spec_of_another_contract_version_is_refused(pyz: Path, tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "s.json", {"v": V + 1, "payload": 1})
    code, events, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)])
    assert code == 1
    assert [(e["v"], e["kind"], e["message"]) for e in events] == [
        (V, "contract_mismatch", f"the spec is of contract v{V + 1}, this agent speaks v{V}")
    ]


def test_a_spec_without_a_contract_version_is_refused(pyz: Path, tmp_path: Path) -> None:
    """An unversioned spec is not assumed to be of this agent's contract: it may be a
    controller's from before versions, whose fields mean something else."""
    spec_path = tmp_path / "s.json"
    spec_path.write_text(json.dumps({"payload": 1}))
    code, events, _ = run_agent([sys.executable, str(pyz), "echo", str(spec_path)])
    assert code == 1
    assert [(e["v"], e["kind"], e["message"]) for e in events] == [
        (
            V,
            "contract_mismatch",
            f'the spec carries no contract version ("v"); this agent speaks v{V}',
        )
    ]


def test_python_m_runs_the_same_code(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "s.json", {"payload": {"x": "y"}})
    code, events, _ = run_agent(
        [sys.executable, "-m", "orchestrator.remote.main", "echo", str(spec_path)], cwd=REPO
    )
    assert code == 0
    assert events[-1]["data"]["payload"] == {"x": "y"}


def test_stray_prints_and_child_output_go_to_stderr(tmp_path: Path) -> None:
    """A handler (or a process it starts) writing to stdout must not corrupt the protocol."""
    spec_path = write_spec(tmp_path / "s.json", {})
    script = (
        "import os, subprocess, sys\n"
        "import orchestrator.remote.dispatch as d\n"
        "import orchestrator.remote.main as m\n"
        "from orchestrator.remote.wire import StatusResult, TailLines\n"
        "def noisy(spec, emit):\n"
        "    print('hello from print')\n"
        "    subprocess.run(['echo', 'hello from a child'], check=True)\n"
        "    emit(TailLines(offset=0, next=7, lines=['ünï']))\n"
        "    return StatusResult(servers=[])\n"
        "d.VERBS['noisy'] = noisy\n"
        "sys.exit(m.main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "noisy", str(spec_path)],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"},
    )
    assert proc.returncode == 0
    assert proc.stdout.decode("utf-8").splitlines() == [
        f'{{"v":{V},"event":"lines","offset":0,"next":7,"lines":["ünï"]}}',
        f'{{"v":{V},"event":"result","data":{{"servers":[],"machine_id":null,"workdir":null}}}}',
    ]
    assert "hello from print" in proc.stderr.decode()
    assert "hello from a child" in proc.stderr.decode()


# In-process dispatch: handlers registered as callables, output captured in a buffer.


def dispatch(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    handler: Any,
    spec: dict[str, Any] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    monkeypatch.setitem(agent_dispatch.VERBS, "t", handler)
    spec_path = write_spec(tmp_path / "t.json", spec or {})
    out = io.StringIO()
    code = agent_main.run_verb(["t", str(spec_path)], out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_streamed_events_precede_the_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def handler(spec: dict[str, Any], emit: Any) -> EchoResult:
        for i in range(3):
            emit(
                ProgressEvent(
                    phase="measure", done=i, failed=0, in_flight=1, tok_s=1.5, elapsed_s=i
                )
            )
        return EchoResult(payload=spec["payload"], argv=[], env={})

    code, events = dispatch(monkeypatch, tmp_path, handler, {"payload": "x"})
    assert code == 0
    progress = {
        "v": V,
        "event": "progress",
        "phase": "measure",
        "failed": 0,
        "in_flight": 1,
        "tok_s": 1.5,
        "gpu_power_w": None,  # no GPU sampled
        "gpu_sm_mhz": None,
    }
    assert events == [
        {**progress, "done": 0, "elapsed_s": 0.0},
        {**progress, "done": 1, "elapsed_s": 1.0},
        {**progress, "done": 2, "elapsed_s": 2.0},
        {"v": V, "event": "result", "data": {"payload": "x", "argv": [], "env": {}, "child": None}},
    ]


def test_agent_failure_details_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def handler(spec: dict[str, Any], emit: Any) -> StatusResult:
        raise AgentFailure(ErrorKind.PORT_IN_USE, "port 8000 is taken", {"port": 8000, "pid": 42})

    code, events = dispatch(monkeypatch, tmp_path, handler)
    assert code == 1
    assert events == [
        {
            "v": V,
            "event": "error",
            "kind": "port_in_use",
            "message": "port 8000 is taken",
            "details": {"port": 8000, "pid": 42},
        }
    ]


def test_agent_failure_with_unserialisable_details(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def handler(spec: dict[str, Any], emit: Any) -> StatusResult:
        raise AgentFailure(ErrorKind.GPU_BUSY, "GPU 0 is busy", {"pids": {4321}})

    code, events = dispatch(monkeypatch, tmp_path, handler)
    assert code == 1
    assert events == [
        {
            "v": V,
            "event": "error",
            "kind": "gpu_busy",
            "message": "GPU 0 is busy",
            "details": {"repr": "{'pids': {4321}}"},
        }
    ]


def test_unexpected_exception_is_internal_with_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def handler(spec: dict[str, Any], emit: Any) -> StatusResult:
        return StatusResult(servers=[1 // spec["zero"]])  # type: ignore[list-item]

    code, events = dispatch(monkeypatch, tmp_path, handler, {"zero": 0})
    assert code == 1
    [event] = events
    assert event["kind"] == "internal"
    assert event["message"] == "agent failed: ZeroDivisionError: integer division or modulo by zero"
    assert event["details"]["type"] == "ZeroDivisionError"
    assert "in handler" in event["details"]["traceback"]
    assert "ZeroDivisionError" in event["details"]["traceback"]


def test_an_os_error_carries_its_errno_name_and_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ENOSPC by name (and the file, when known): the controller says "no space left on
    <host>:<path>" instead of reporting a bug."""

    def handler(spec: dict[str, Any], emit: Any) -> StatusResult:
        raise OSError(errno.ENOSPC, "No space left on device", "/w/runs/r1/server.log")

    code, events = dispatch(monkeypatch, tmp_path, handler)
    assert code == 1
    [event] = events
    assert event["kind"] == "internal"
    assert event["details"]["errno"] == "ENOSPC"
    assert event["details"]["path"] == "/w/runs/r1/server.log"


@pytest.mark.parametrize(
    ("obj", "returned"),
    [
        (StatusResult(servers=[]), StatusResult(servers=[])),  # a result is not an event
        ({"event": "line", "offset": 0, "next": 1, "text": "x"}, StatusResult(servers=[])),
        (ProgressEvent("x", 0, 0, 0, "fast", 0.0), StatusResult(servers=[])),  # type: ignore[arg-type]
        (None, None),  # returns None instead of a result
        (None, {"servers": []}),  # a dict, not the result type
    ],
)
def test_protocol_misuse_is_internal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, obj: Any, returned: Any
) -> None:
    def handler(spec: dict[str, Any], emit: Any) -> Any:
        if obj is not None:
            emit(obj)
        return returned

    code, events = dispatch(monkeypatch, tmp_path, handler)
    assert code == 1
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["kind"] == "internal"
    assert events[0]["v"] == V


def test_registered_verb_whose_module_is_absent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, events = dispatch(monkeypatch, tmp_path, "no_such_module:run")
    assert code == 1
    assert events[0]["kind"] == "unknown_verb"
    assert (
        events[0]["message"]
        == "verb 't' is registered but its module 'no_such_module' is not in this agent"
    )


def test_preregistered_verbs() -> None:
    assert agent_dispatch.VERBS == {
        "echo": "echo:run",
        "probe": "probe:run",
        "launch": "lifecycle:launch",
        "hold": "hold:run",
        "tail": "lifecycle:tail",
        "stop": "lifecycle:stop",
        "prune": "prune:run",
        "status": "lifecycle:status",
        "http": "http:run",
        "loadgen": "loadrunner:run",
        "read_model_configs": "modelfiles:run",
    }


# The controller's decoder of this output (orchestrator.agent.client).


@pytest.mark.parametrize(
    ("stdout", "events", "noise", "final"),
    [
        (
            '{"event":"result","data":{"a":1}}\n',
            [{"event": "result", "data": {"a": 1}}],
            [],
            "result",
        ),
        (  # a chatty login script before the agent: tolerated, kept for error messages
            'Welcome to gpu-1!\n{"event":"line","text":"x"}\n{"event":"result","data":{}}\n',
            [{"event": "line", "text": "x"}, {"event": "result", "data": {}}],
            ["Welcome to gpu-1!"],
            "result",
        ),
        (  # U+2028 / U+0085 are not escaped by json.dumps and must not split a line
            '{"event":"result","data":{"m":"a\u2028b\x85c"}}\n',
            [{"event": "result", "data": {"m": "a\u2028b\x85c"}}],
            [],
            "result",
        ),
        ('{"event":"line"}\n', [{"event": "line"}], [], None),  # cut off before the end
        ('{"no_event":1}\n[1]\n{broken\n', [], ['{"no_event":1}', "[1]", "{broken"], None),
        (
            '{"v":1,"event":"error","kind":"k","message":"m","details":{}}\r\n',
            [{"v": 1, "event": "error", "kind": "k", "message": "m", "details": {}}],
            [],
            "error",
        ),
        ("", [], [], None),
    ],
)
def test_decode_output(
    stdout: str, events: list[dict[str, Any]], noise: list[str], final: str | None
) -> None:
    decoded = decode_output(stdout)
    assert decoded.events == events
    assert decoded.noise == noise
    assert (decoded.final or {}).get("event") == final


CUT_WRITE = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from orchestrator.remote import main
signal.signal(signal.SIGUSR1, lambda *_: None)
out = main._protocol_stream()
sys.stderr.write("ready\\n"); sys.stderr.flush()
out.write("{" + "x" * 400000 + "}\\n")
"""


def test_a_signal_during_a_blocked_write_loses_no_protocol_bytes() -> None:
    """The controller reads slowly (a busy host): the agent's write of a long line blocks on
    the full pipe, and signals arrive meanwhile. Every byte of the line still arrives."""
    root = str(Path(agent_main.__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", CUT_WRITE, root], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stderr.readline() == b"ready\n"
    for _ in range(20):  # the pipe holds 64 kB: the write is blocked for most of these
        time.sleep(0.02)
        proc.send_signal(signal.SIGUSR1)
    data = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    assert len(data) == 400003 and data.endswith(b"}\n")
