"""The agent's wire contract against golden JSON, from both sides of the SSH boundary.

``tests/golden/wire/<verb>.spec.json``, ``<verb>.result.json`` and, for the streaming verbs,
``<verb>.events.json`` (whole lines, envelope included) pin what goes over the wire. The
dataclasses must round-trip each file exactly (the controller's side); the real agent, run
in-process and as the shipped zipapp, must produce lines that decode under the same contract
(the host's side); and anything else (an unknown or missing field, another contract version)
is refused with a message that names it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.agent.bundle import build_bundle
from orchestrator.agent.client import Agent
from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import AgentError, RemoteCommandError
from orchestrator.remote.dispatch import VERBS
from orchestrator.remote.main import run_verb
from orchestrator.remote.wire import (
    CONTRACT,
    CONTRACT_VERSION,
    ContractMismatch,
    EchoResult,
    EchoSpec,
    ErrorEvent,
    ErrorKind,
    LaunchResult,
    ProbeResult,
    ProbeSpec,
    StopResult,
    TailLines,
    TailResult,
    WireError,
    decode_line,
    spec_file,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"
V = CONTRACT_VERSION


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def test_every_verb_has_its_fixtures() -> None:
    assert set(CONTRACT) == set(VERBS)  # the agent serves exactly the verbs of the contract
    for verb, contract in CONTRACT.items():
        assert (GOLDEN / f"{verb}.spec.json").is_file()
        assert (GOLDEN / f"{verb}.result.json").is_file()
        assert (GOLDEN / f"{verb}.events.json").is_file() == bool(contract.events)


# -- the controller's side: the dataclasses round-trip the fixtures exactly ---------------------


@pytest.mark.parametrize("verb", sorted(CONTRACT))
def test_spec_and_result_round_trip_exactly(verb: str) -> None:
    contract = CONTRACT[verb]
    for cls, name in (
        (contract.spec, f"{verb}.spec.json"),
        (contract.result, f"{verb}.result.json"),
    ):
        raw = golden(name)
        value = cls.from_json(raw)
        assert value.to_json() == raw
        assert json.dumps(value.to_json(), sort_keys=True) == json.dumps(raw, sort_keys=True)
        assert cls.from_json(json.loads(json.dumps(value.to_json()))) == value


@pytest.mark.parametrize("verb", sorted(v for v, c in CONTRACT.items() if c.events))
def test_streamed_lines_decode_and_re_encode_exactly(verb: str) -> None:
    lines = golden(f"{verb}.events.json")
    decoded = [decode_line(verb, line) for line in lines]
    assert decoded[-1][0] == "result"
    assert decoded[-1][1] == CONTRACT[verb].result.from_json(golden(f"{verb}.result.json"))
    names = {getattr(cls, "EVENT") for cls in CONTRACT[verb].events}  # noqa: B009 - not on Wire
    assert {name for name, _ in decoded[:-1]} == names  # every event type is pinned
    for line, (name, value) in zip(lines, decoded, strict=True):
        body = value.to_json()
        assert line == (
            {"v": V, "event": "result", "data": body}
            if name == "result"
            else {"v": V, "event": name, **body}
        )


def test_error_line_round_trips() -> None:
    line = golden("error.json")
    name, value = decode_line("launch", line)
    assert name == "error" and isinstance(value, ErrorEvent)
    assert value.kind is ErrorKind.PORT_IN_USE
    assert {"v": V, "event": "error", **value.to_json()} == line


# -- refusals with a message that names the type and the field ---------------------------------


def test_unknown_field_is_refused_by_name() -> None:
    raw = {**golden("probe.spec.json"), "portz": [1]}
    with pytest.raises(WireError, match=r"^ProbeSpec: unknown field 'portz'$"):
        ProbeSpec.from_json(raw)
    nested = golden("probe.result.json")
    nested["gpus"][1]["temperature_c"] = 40
    with pytest.raises(
        WireError, match=r"^ProbeResult\.gpus\[1\] \(GpuInfo\): unknown field 'temperature_c'$"
    ):
        ProbeResult.from_json(nested)


def test_missing_field_is_refused_by_name() -> None:
    raw = golden("launch.result.json")
    del raw["log_offset"]
    with pytest.raises(WireError, match=r"^LaunchResult: missing field 'log_offset'$"):
        LaunchResult.from_json(raw)
    raw = golden("stop.result.json")
    del raw["stopped"][0]["exit"]["returncode"]
    with pytest.raises(
        WireError,
        match=r"^StopResult\.stopped\[0\]\.exit \(ExitRecord\): missing field 'returncode'$",
    ):
        StopResult.from_json(raw)


def test_a_field_with_a_default_may_be_absent() -> None:
    assert ProbeSpec.from_json({}) == ProbeSpec()
    assert EchoSpec.from_json({"payload": 1}).env_keys == []


def test_a_mistyped_field_is_refused_by_name() -> None:
    raw = golden("tail.result.json")
    raw["offset"] = "100"
    with pytest.raises(
        WireError, match=r"^TailResult\.offset: expected an integer, got the string '100'$"
    ):
        TailResult.from_json(raw)
    with pytest.raises(WireError, match=r"^ErrorEvent\.kind: expected one of .*'port_in_use'"):
        ErrorEvent.from_json({"kind": "on_fire", "message": "m"})


def test_another_contract_version_is_refused() -> None:
    line = {**golden("error.json"), "v": V + 1}
    with pytest.raises(ContractMismatch, match=f"speaks contract v{V + 1}, this side speaks v{V}"):
        decode_line("launch", line)
    unversioned = {k: v for k, v in golden("tail.events.json")[0].items() if k != "v"}
    with pytest.raises(ContractMismatch, match="speaks no contract version"):
        decode_line("tail", unversioned)


class _Done:
    def __init__(self, stdout: str) -> None:
        self.returncode, self.stdout, self.stderr = 0, stdout, ""


class _Connection:
    """An AgentConnection whose agent answers with ``stdout`` whatever it is asked."""

    host = "gpu-9"

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.files: dict[str, bytes] = {}

    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False
    ) -> _Done:
        return _Done(self.stdout)

    def open_stream(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True
    ) -> Any:
        raise NotImplementedError

    async def put_bytes(self, data: bytes, remote_path: str, *, mode: int = 0o600) -> int:
        self.files[remote_path] = data
        return len(data)

    async def exists(self, remote_path: str) -> bool:
        return True

    async def remove(self, remote_path: str) -> bool:
        return self.files.pop(remote_path, None) is not None

    async def makedirs(self, remote_path: str, *, mode: int | None = None) -> None:
        pass

    async def lstat(self, remote_path: str, *, follow: bool = False) -> SimpleNamespace:
        """A safe host: every directory and file is the login user's, 0700 / 0600."""
        kind = 0o100600 if remote_path in self.files or remote_path.endswith(".pyz") else 0o40700
        return SimpleNamespace(uid=1000, permissions=kind)

    async def read_bytes(self, remote_path: str) -> bytes:
        return self.files.get(remote_path, b"")

    async def home(self) -> str:
        return "/home/bench"


def _agent(stdout: str) -> tuple[Agent, _Connection]:
    conn = _Connection(stdout)
    return Agent(conn, HostConfig(name="gpu-9", workdir="/w")), conn


def test_the_client_says_plainly_when_the_agent_speaks_another_version() -> None:
    line = json.dumps({**golden("echo.result.json"), "v": V + 1})
    agent, _ = _agent(json.dumps({"v": V + 1, "event": "result", "data": json.loads(line)}) + "\n")
    with pytest.raises(RemoteCommandError) as info:
        asyncio.run(agent.echo(EchoSpec()))
    assert str(info.value).startswith(
        f"gpu-9: the agent on host gpu-9 speaks contract v{V + 1}, this orch speaks v{V}: "
        "its echo answer (event 'result') was not read"
    )
    assert info.value.hint and "agent-*.pyz" in info.value.hint


def test_the_client_types_results_and_errors() -> None:
    result = golden("echo.result.json")
    agent, conn = _agent(json.dumps({"v": V, "event": "result", "data": result}) + "\n")
    assert asyncio.run(agent.echo(EchoSpec(payload=[1]))) == EchoResult.from_json(result)
    [written] = [json.loads(data) for path, data in conn.files.items() if "/specs/echo-" in path]
    assert (
        written == spec_file(EchoSpec(payload=[1])) == {"v": V, **EchoSpec(payload=[1]).to_json()}
    )
    agent, _ = _agent(json.dumps(golden("error.json")) + "\n")
    with pytest.raises(AgentError) as info:
        asyncio.run(agent.echo(EchoSpec()))
    assert info.value.kind is ErrorKind.PORT_IN_USE and info.value.details["port"] == 8000
    agent, _ = _agent(json.dumps({"v": V, "event": "result", "data": {"payload": 1}}) + "\n")
    with pytest.raises(
        RemoteCommandError,
        match="echo: the agent's answer does not fit the "
        "contract: EchoResult: missing field 'argv'",
    ):
        asyncio.run(agent.echo(EchoSpec()))


# -- the host's side: the real agent's output decodes under the contract ------------------------


def run_in_process(tmp_path: Path, verb: str, spec: dict[str, Any]) -> list[tuple[str, Any]]:
    path = tmp_path / f"{verb}.json"
    path.write_text(json.dumps({"v": V, **spec}))
    out = io.StringIO()
    run_verb([verb, str(path)], out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert all(line["v"] == V for line in lines)
    return [decode_line(verb, line) for line in lines]


def test_the_real_agent_answers_every_verb_within_the_contract(tmp_path: Path) -> None:
    workdir = str(tmp_path / "work")
    log_dir = tmp_path / "work" / "runs" / "old"
    log_dir.mkdir(parents=True)
    (log_dir / "server.log").write_bytes("first\nsecond ünï\nlast, unterminated".encode())

    def final(verb: str, spec: dict[str, Any]) -> Any:
        decoded = run_in_process(tmp_path, verb, spec)
        name, value = decoded[-1]
        assert name == "result", value
        assert isinstance(value, CONTRACT[verb].result)
        return value, [v for _, v in decoded[:-1]]

    echo, _ = final("echo", {"payload": {"a": [1, None]}, "env_keys": ["NOPE_X"]})
    assert echo.payload == {"a": [1, None]} and echo.env == {"NOPE_X": None}
    probe, _ = final("probe", {"workdir": workdir, "ports": [1]})
    assert probe.ports.checked == [1]
    tail, batches = final("tail", {"workdir": workdir, "run_id": "old"})
    assert batches == [  # one read of the log, then its unterminated last line once it ended
        TailLines(offset=0, next=19, lines=["first", "second ünï"]),
        TailLines(offset=19, next=37, lines=["last, unterminated"]),
    ]
    assert tail.reason == "exited" and tail.offset == 37
    launched, _ = final(
        "launch",
        {
            "workdir": workdir,
            "run_id": "new",
            "port": _free_port(),
            "argv": [sys.executable, "-c", "print('up')"],
        },
    )
    status, _ = final("status", {"workdir": workdir, "run_id": "new"})
    assert status.servers[0].pid == launched.pid
    stopped, _ = final(
        "stop", {"workdir": workdir, "run_id": "new", "timeout_s": 5, "gpu_timeout_s": 1}
    )
    assert stopped.stopped[0].pid == launched.pid
    http, _ = final("http", {"port": _free_port(), "path": "/health"})
    assert http.error == "connection refused"
    models, _ = final("read_model_configs", {"models": [{"id": str(tmp_path / "none")}]})
    assert models.models[str(tmp_path / "none")].found is False
    loadgen, events = final(
        "loadgen",
        {
            "port": _free_port(),
            "model": "m",
            "num_prompts": 1,
            "prompts": {"kind": "list", "items": ["hi"]},
            "cache_reset": {"path": "/flush_cache", "timeout_s": 5},
        },
    )
    assert loadgen.failed == 1 and [type(e).__name__ for e in events] == [
        "PhaseEvent",
        "RequestRecord",
    ]
    assert loadgen.cache_reset.startswith("failed: POST /flush_cache: ConnectionRefusedError")
    _, error = run_in_process(tmp_path, "tail", {"workdir": workdir, "run_id": "none"})[-1]
    assert isinstance(error, ErrorEvent) and error.kind is ErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    ("verb", "spec"), [("echo", {"payload": {"ü": "✓"}}), ("probe", {"ports": [1]})]
)
def test_the_shipped_zipapp_answers_within_the_contract(
    tmp_path: Path, verb: str, spec: dict[str, Any]
) -> None:
    bundle = build_bundle()
    pyz = tmp_path / bundle.filename
    pyz.write_bytes(bundle.data)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec_file(CONTRACT[verb].spec.from_json(spec))))
    proc = subprocess.run(
        [sys.executable, str(pyz), verb, str(path)],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    [line] = [json.loads(text) for text in proc.stdout.decode().splitlines()]
    name, value = decode_line(verb, line)
    assert name == "result" and isinstance(value, CONTRACT[verb].result)
    assert value.to_json() == line["data"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
