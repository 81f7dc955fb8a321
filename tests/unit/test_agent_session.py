"""The session agent in-process: frames in, id-tagged lines out, requests answered concurrently;
and the one verb table both sides are wired from."""

from __future__ import annotations

import inspect
import io
import json
import os
import threading
from collections.abc import Iterator
from typing import Any, get_type_hints

import pytest

from orchestrator.agent import client as agent_client
from orchestrator.agent.client import STREAM_SILENCE_S, VERB_TIMEOUT_S, Agent, AgentClient
from orchestrator.agent.fake import FakeAgent
from orchestrator.remote import dispatch, session
from orchestrator.remote import main as agent_main
from orchestrator.remote.wire import (
    CONTRACT,
    CONTRACT_VERSION,
    EchoResult,
    EchoSpec,
    StatusSpec,
    Wire,
    request_frame,
    spec_file,
)

V = CONTRACT_VERSION


class Pipe:
    """The session's stdin: frames written by the test, EOF when it closes."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.reader = os.fdopen(read, "rb")
        self._writer = os.fdopen(write, "wb")

    def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self._writer.write(data + b"\n")
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class Lines(io.StringIO):
    """The protocol stream: the lines written so far, as objects, and a way to wait for some."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            n = super().write(text)
            self.changed.notify_all()
        return n

    def objects(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.getvalue().splitlines()]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.getvalue().splitlines()) >= count, timeout)
        return self.objects()


@pytest.fixture
def served() -> Iterator[tuple[Pipe, Lines, threading.Thread]]:
    pipe, out = Pipe(), Lines()
    thread = threading.Thread(target=session.serve, args=(pipe.reader, out), daemon=True)
    thread.start()
    yield pipe, out, thread
    pipe.close()
    thread.join(5)


def test_each_answer_carries_its_request_id_and_the_one_shot_lines(
    served: tuple[Pipe, Lines, threading.Thread], tmp_path: Any
) -> None:
    pipe, out, _ = served
    spec = StatusSpec(workdir=str(tmp_path), all=True)
    pipe.send(request_frame(7, "status", spec))
    [line] = out.wait_for(1)
    path = tmp_path / "status.json"
    path.write_text(json.dumps(spec_file(spec)))
    one_shot = Lines()
    assert agent_main.run_verb(["status", str(path)], one_shot) == 0
    assert line == {"id": 7, **one_shot.objects()[0]}
    assert line["event"] == "result" and line["data"]["servers"] == []


def test_requests_run_concurrently(
    served: tuple[Pipe, Lines, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that blocks does not hold up one sent after it."""
    release = threading.Event()

    def slow(spec: dict[str, Any], emit: Any) -> Wire:
        assert release.wait(10)
        return EchoResult(payload="slow", argv=[], env={})

    def fast(spec: dict[str, Any], emit: Any) -> Wire:
        return EchoResult(payload="fast", argv=[], env={})

    monkeypatch.setitem(dispatch.VERBS, "slow", slow)
    monkeypatch.setitem(dispatch.VERBS, "fast", fast)
    pipe, out, _ = served
    pipe.send({"id": 1, "verb": "slow", "spec": {"v": V}})
    pipe.send({"id": 2, "verb": "fast", "spec": {"v": V}})
    first = out.wait_for(1)
    assert [(o["id"], o["data"]["payload"]) for o in first] == [(2, "fast")]
    release.set()
    assert [(o["id"], o["data"]["payload"]) for o in out.wait_for(2)] == [
        (2, "fast"),
        (1, "slow"),
    ]


def test_refusals_are_answered_per_request(served: tuple[Pipe, Lines, threading.Thread]) -> None:
    pipe, out, _ = served
    pipe.send(request_frame(1, "echo", EchoSpec()))  # first contact stays one-shot
    pipe.send({"id": 2, "verb": "status", "spec": {"v": V + 1, "all": True}})
    pipe.send({"id": 3, "verb": "frobnicate", "spec": {"v": V}})
    pipe.send(b"not json")
    by_id = {o.get("id"): o for o in out.wait_for(4)}
    assert by_id[1]["kind"] == "bad_usage"
    assert (
        by_id[1]["message"] == "verb 'echo' is not served in a session: run it as its own process"
    )
    assert by_id[2]["kind"] == "contract_mismatch"
    assert by_id[2]["message"] == f"the spec is of contract v{V + 1}, this agent speaks v{V}"
    assert (by_id[3]["kind"], by_id[3]["message"]) == ("unknown_verb", "unknown verb 'frobnicate'")
    assert by_id[None]["kind"] == "bad_spec"  # no id to answer to: said untagged
    assert by_id[None]["message"].startswith("a request frame is not JSON")


def test_the_session_ends_at_stdin_eof(served: tuple[Pipe, Lines, threading.Thread]) -> None:
    pipe, _, thread = served
    assert thread.is_alive()
    pipe.close()
    thread.join(5)
    assert not thread.is_alive()


# -- the one table ---------------------------------------------------------------------------


def test_the_agent_dispatches_exactly_the_table() -> None:
    assert {verb: c.handler for verb, c in CONTRACT.items()} == dispatch.VERBS
    assert all(c.handler.count(":") == 1 for c in CONTRACT.values())


def test_the_controllers_deadlines_are_the_tables() -> None:
    assert VERB_TIMEOUT_S == {
        "echo": 60.0,
        "probe": 120.0,
        "status": 60.0,
        "http": 60.0,
        "launch": 120.0,
        "read_model_configs": 120.0,
        "stop": 180.0,
    }
    assert STREAM_SILENCE_S == {"tail": 60.0, "loadgen": 600.0}
    assert {v for v, c in CONTRACT.items() if c.session} == {
        "launch",
        "status",
        "stop",
        "prune",
        "http",
        "read_model_configs",
    }
    assert not any(c.session and c.streaming for c in CONTRACT.values())


@pytest.mark.parametrize("cls", [Agent, FakeAgent, AgentClient])
def test_every_client_method_returns_its_verbs_contract_type(cls: type) -> None:
    """The typed methods are one line each over the table: their return types must be it."""
    names = [n for n in CONTRACT if hasattr(cls, n)]
    assert {"echo", "probe", "launch", "status", "tail", "stop", "http", "loadgen"} <= set(names)
    for verb in names:
        hints = get_type_hints(getattr(cls, verb), vars(agent_client))
        returned = hints["return"]
        contract = CONTRACT[verb]
        if contract.streaming:
            text = str(returned)
            assert contract.result.__name__ in text or "Event" in text, verb
        else:
            assert returned is contract.result, verb
        assert inspect.iscoroutinefunction(getattr(cls, verb)) or contract.streaming
