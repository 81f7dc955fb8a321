"""Prefix-cache reset between load points: what each engine offers, how the load generator reads
the engines' answers, and the reset it makes before any request (a scripted server on
127.0.0.1 answering as vLLM and SGLang do)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from orchestrator.config import HostConfig, RunSpec, WorkloadSpec
from orchestrator.engines import get_engine
from orchestrator.engines.base import CacheReset
from orchestrator.loadgen.prompts import build_loadgen_spec, load_prompts
from orchestrator.remote import loadgen, loadrunner
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import CacheResetSpec

VLLM_NOTE = (
    "prefix cache not reset between load points: vLLM exposes /reset_prefix_cache only with "
    "VLLM_SERVER_DEV_MODE=1 (add it to the run's env to reset it)"
)


def run(engine: str, env: dict[str, str] | None = None) -> RunSpec:
    return RunSpec.model_validate(
        {"name": "r", "engine": engine, "model": "Qwen/Qwen3-8B", "env": env or {}}
    )


@pytest.mark.parametrize(
    ("engine", "env", "reset", "note"),
    [
        ("vllm", {}, None, VLLM_NOTE),
        ("vllm", {"VLLM_SERVER_DEV_MODE": "1"}, CacheReset("POST", "/reset_prefix_cache"), None),
        ("vllm", {"VLLM_SERVER_DEV_MODE": "2"}, CacheReset("POST", "/reset_prefix_cache"), None),
        ("vllm", {"VLLM_SERVER_DEV_MODE": "0"}, None, VLLM_NOTE),
        ("vllm", {"VLLM_SERVER_DEV_MODE": "true"}, None, VLLM_NOTE),  # vLLM reads int(value)
        ("sglang", {}, CacheReset("POST", "/flush_cache"), None),
    ],
)
def test_each_engine_says_how_to_reset_or_why_not(
    engine: str, env: dict[str, str], reset: CacheReset | None, note: str | None
) -> None:
    spec = run(engine, env)
    assert get_engine(engine).cache_reset(spec) == reset
    assert get_engine(engine).cache_reset_note(spec) == note


def test_the_servers_environment_counts_host_settings_too() -> None:
    vllm = get_engine("vllm")
    host = HostConfig(name="h", address="127.0.0.1", env={"VLLM_SERVER_DEV_MODE": "1"})
    spec = run("vllm")
    assert vllm.cache_reset(spec) is None  # the run alone does not turn it on
    assert vllm.cache_reset(spec, vllm.env(spec, host)) == CacheReset("POST", "/reset_prefix_cache")
    off = run("vllm", {"VLLM_SERVER_DEV_MODE": "0"})  # the run's env wins over the host's
    assert vllm.cache_reset(off, vllm.env(off, host)) is None


def test_the_loadgen_spec_carries_the_reset() -> None:
    workload = WorkloadSpec(prompts="builtin:math", num_prompts=2)
    prompts = load_prompts(workload, base_dir=".")
    plain = build_loadgen_spec(workload, prompts, port=9, served_name="m")
    assert plain.cache_reset is None
    spec = build_loadgen_spec(
        workload, prompts, port=9, served_name="m", cache_reset=CacheReset("POST", "/flush_cache")
    )
    assert spec.cache_reset == CacheResetSpec(path="/flush_cache", method="POST")
    assert loadgen.LoadSpec.parse(spec.to_json()).cache_reset == spec.cache_reset


@pytest.mark.parametrize(
    ("status", "body", "answer"),
    [
        (200, "", ("ok", "")),  # vLLM before {"success": ...}
        (200, '{"success": true}', ("ok", "")),
        (200, "Cache flushed.\nPlease check backend logs.", ("ok", "")),  # SGLang
        (
            200,
            '{"success": false}',
            ("retry", "the engine answered success: false (cache blocks still in use)"),
        ),
        (
            400,
            "Cache flushed.\nPlease check\n backend logs.",
            ("retry", "HTTP 400: Cache flushed. Please check backend logs."),
        ),  # fmt: skip
        (400, "", ("retry", "HTTP 400")),
        (404, '{"detail":"Not Found"}', ("failed", 'HTTP 404: {"detail":"Not Found"}')),
        (401, "", ("failed", "HTTP 401")),
        (500, "x" * 300, ("failed", "HTTP 500: " + "x" * 200)),
    ],
)
def test_reset_answers(status: int, body: str, answer: tuple[str, str]) -> None:
    assert loadgen.reset_answer(status, body) == answer


@pytest.mark.parametrize(
    ("reset", "message"),
    [
        ({"path": "flush_cache"}, "'cache_reset.path' must start with '/', got 'flush_cache'"),
        ({"path": "/f", "method": "PUT"}, "'cache_reset.method' must be GET or POST, got 'PUT'"),
        ({"path": "/f", "timeout_s": 0}, "'cache_reset.timeout_s' must be > 0, got 0.0"),
        ({"path": "/f", "retry_interval_s": -1}, "'cache_reset.retry_interval_s' must be > 0"),
        ({"method": "POST"}, "LoadgenSpec.cache_reset (CacheResetSpec): missing field 'path'"),
    ],
)
def test_bad_reset_specs_fail_with_bad_spec(reset: dict[str, Any], message: str) -> None:
    base = {"port": 1, "model": "m", "prompts": {"kind": "list", "items": ["hi"]}}
    with pytest.raises(AgentFailure) as info:
        loadgen.LoadSpec.parse({**base, "num_prompts": 1, "cache_reset": reset})
    assert info.value.kind == "bad_spec"
    assert message in info.value.message


# -- the load generator against a scripted engine -----------------------------------------------


class _Engine(BaseHTTPRequestHandler):
    """Answers the reset path from a script of (status, body); completions with one token."""

    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        server: Any = self.server
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if self.path == server.reset_path:
            status, text = server.script.pop(0) if server.script else server.last
            self._answer(status, text.encode(), "text/plain")
            return
        chunk = {
            "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }
        payload = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
        self._answer(200, payload, "text/event-stream")

    do_POST = do_GET = _handle  # noqa: N815 - http.server's naming

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.seen, server.script, server.last, server.reset_path = [], [], (200, ""), "/reset"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _run(server: Any, **reset: Any) -> Any:
    spec = {
        "port": server.server_address[1],
        "model": "m",
        "prompts": {"kind": "list", "items": ["hi"]},
        "num_prompts": 2,
        "warmup": 1,
        "api_key": "sk-1",
        "cache_reset": {"path": "/reset", "retry_interval_s": 0.05, **reset},
    }
    return loadrunner.run(spec, lambda event: None)


def test_the_reset_comes_before_any_request_and_retries_while_refused(engine: Any) -> None:
    engine.script = [(400, "Cache flushed."), (200, '{"success": false}'), (200, "")]
    result = _run(engine, method="GET")
    assert result.cache_reset == "ok" and (result.completed, result.warmup) == (2, 1)
    assert (
        engine.seen
        == [("GET", "/reset", "Bearer sk-1")] * 3
        + [("POST", "/v1/chat/completions", "Bearer sk-1")] * 3
    )


def test_a_reset_the_engine_lacks_fails_at_once_and_the_run_goes_on(engine: Any) -> None:
    engine.script = [(404, '{"detail":"Not Found"}')]
    result = _run(engine)
    assert result.cache_reset == 'failed: POST /reset: HTTP 404: {"detail":"Not Found"}'
    assert [path for _, path, _ in engine.seen].count("/reset") == 1
    assert result.completed == 2


def test_a_reset_refused_until_the_timeout_fails_naming_the_last_answer(engine: Any) -> None:
    engine.last = (400, "busy")
    result = _run(engine, timeout_s=1.0)
    assert result.cache_reset == "failed: POST /reset still refused after 1 s: HTTP 400: busy"
    assert [path for _, path, _ in engine.seen].count("/reset") > 1  # asked again meanwhile
    assert result.completed == 2


def test_no_reset_asked_none_made(engine: Any) -> None:
    spec = {
        "port": engine.server_address[1],
        "model": "m",
        "prompts": {"kind": "list", "items": ["hi"]},
        "num_prompts": 1,
    }
    assert loadrunner.run(spec, lambda event: None).cache_reset is None
    assert [path for _, path, _ in engine.seen] == ["/v1/chat/completions"]
