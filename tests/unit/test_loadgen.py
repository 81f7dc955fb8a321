"""The ``loadgen`` verb: spec checks, request bodies and their seeds, random prompts, the arrival
process, and runs over real HTTP (a closed port, a server that records bodies, the engine
simulator)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.playbook import WorkloadSpec
from orchestrator.loadgen.prompts import build_loadgen_spec, load_prompts
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.energy import window_energy
from orchestrator.metrics.summary import request_stats
from orchestrator.remote import loadgen, loadrunner, tokens
from orchestrator.remote.protocol import AgentFailure
from orchestrator.remote.wire import (
    CONTRACT_VERSION,
    LoadgenSpec,
    PhaseEvent,
    ProgressEvent,
    PromptSource,
    TelemetrySpec,
    Wire,
    WireError,
    decode_line,
)
from orchestrator.sim.sandbox import prepare_sandbox
from tests.fixtures.nvml import build_fake_nvml

BASE = {"port": 8000, "model": "m", "prompts": {"kind": "list", "items": ["hi"]}, "num_prompts": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"port": None}, "give 'base_url' or 'port'"),
        ({"model": ""}, "'model'"),
        ({"api": "responses"}, "'api' must be chat or completions"),
        ({"num_prompts": None}, "give 'num_prompts' or 'duration_s'"),
        ({"num_prompts": 0}, "'num_prompts' must be >= 1"),
        ({"concurrency": 0}, "'concurrency' must be >= 1"),
        ({"prompts": {"kind": "file"}}, "'prompts' must be"),
        # outside the contract's types: refused by LoadgenSpec itself, naming the field
        ({"concurrency": 2.5}, "LoadgenSpec.concurrency: expected an integer, got the number 2.5"),
        ({"request_rate": "fast"}, "LoadgenSpec.request_rate: expected a number"),
        ({"prompts": ["hi"]}, "LoadgenSpec.prompts (PromptSource): expected an object"),
        ({"num_prompt": 3}, "LoadgenSpec: unknown field 'num_prompt'"),
    ],
)
def test_bad_specs_fail_with_bad_spec(change, message):
    with pytest.raises(AgentFailure) as info:
        loadgen.LoadSpec.parse({**BASE, **change})
    assert info.value.kind == "bad_spec"
    assert message in info.value.message


def test_spec_defaults():
    cfg = loadgen.LoadSpec.parse(BASE)
    assert cfg.base_url == "http://127.0.0.1:8000" and cfg.api == "chat"
    assert (cfg.concurrency, cfg.request_rate, cfg.open_loop, cfg.warmup) == (1, None, False, 0)
    cfg = loadgen.LoadSpec.parse(
        {**BASE, "base_url": "http://h:1/", "request_rate": 2, "port": None}
    )
    assert cfg.base_url == "http://h:1" and cfg.open_loop and cfg.concurrency is None


def test_a_workloads_ramp_reaches_the_load_generator():
    for ramp in (None, 0.0, 1.5):
        workload = WorkloadSpec(prompts="builtin:math", num_prompts=4, concurrency=8, ramp_s=ramp)
        spec = build_loadgen_spec(
            workload, load_prompts(workload, base_dir="."), port=9, served_name="m"
        )
        assert spec.ramp_s == ramp
        cfg = loadgen.LoadSpec.parse(json.loads(json.dumps(spec.to_json())))
        expected = [0.0] * 8 if ramp == 0.0 else [i * (ramp or 8 / 500) / 8 for i in range(8)]
        assert loadgen.ramp_offsets(8, cfg.ramp_s) == pytest.approx(expected)


def test_the_controllers_spec_fits_the_contract():
    workload = WorkloadSpec(
        prompts="builtin:math", num_prompts=4, request_rate=2.0, seed=3, warmup=0
    )
    built = build_loadgen_spec(
        workload, load_prompts(workload, base_dir="."), port=9, served_name="m", api_key="sk-1"
    )
    raw = json.loads(json.dumps(built.to_json()))
    spec = LoadgenSpec.from_json(raw)
    assert spec == built
    assert (spec.port, spec.base_url, spec.num_prompts, spec.request_rate, spec.api_key) == (
        None,
        "http://127.0.0.1:9",
        4,
        2.0,
        "sk-1",
    )
    assert spec.prompts.kind == "list" and len(spec.prompts.items) == 4
    assert loadgen.LoadSpec.parse(raw).base_url == "http://127.0.0.1:9"  # the agent reads it
    with pytest.raises(WireError, match="LoadgenSpec: unknown field 'extra'"):
        LoadgenSpec.from_json({**raw, "extra": 1})


def test_request_bodies():
    cfg = loadgen.LoadSpec.parse(
        {
            **BASE,
            "max_tokens": 64,
            "temperature": 0,
            "ignore_eos": True,
            "chat_template_kwargs": {"enable_thinking": False},
        }
    )
    body = loadgen.request_body("What?", cfg)
    assert body == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [{"role": "user", "content": "What?"}],
        "chat_template_kwargs": {"enable_thinking": False},
        "max_tokens": 64,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    msgs = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why?"},
        ]
    }
    assert loadgen.request_body(msgs, cfg)["messages"] == msgs["messages"]
    cfg = loadgen.LoadSpec.parse({**BASE, "api": "completions", "continuous_usage_stats": False})
    body = loadgen.request_body(msgs, cfg)
    assert body == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt": "Be brief.\n\nWhy?",
    }


def test_request_seed_is_a_stable_hash_of_the_workload_seed_and_the_index():
    seeds = [loadgen.request_seed(7, k) for k in range(2000)]
    # pinned derivation: the same workload seed must give the same requests in any orch version
    assert seeds == [
        int.from_bytes(hashlib.sha256(f"7:request:{k}".encode()).digest()[:4], "big") & (2**31 - 1)
        for k in range(2000)
    ]
    assert len(set(seeds)) == 2000  # every request samples on its own
    assert min(seeds) >= 0 and 2**30 < max(seeds) < 2**31  # 31 bits, all of them used
    others = [loadgen.request_seed(8, k) for k in range(2000)]
    assert not set(seeds) & set(others)


@pytest.mark.parametrize(
    ("temperature", "seeded"), [(None, True), (0, False), (0.0, False), (0.7, True), (1, True)]
)
def test_requests_are_seeded_unless_greedy(temperature, seeded):
    """Greedy needs no seed; unset, the server's default temperature may sample."""
    spec = {**BASE, "seed": 3} if temperature is None else {**BASE, "temperature": temperature}
    cfg = loadgen.LoadSpec.parse(spec)
    assert cfg.request_seeds is seeded
    assert "seed" not in loadgen.request_body("x", cfg)
    assert loadgen.request_body("x", cfg, seed=12)["seed"] == 12


@pytest.mark.parametrize(
    ("source", "count", "exact", "fields"),
    [
        ("list", 3, 0, {"prompt_source": "list", "input_len_exact": None}),
        (
            "random:words",
            4,
            0,
            {
                "prompt_source": "random:words",
                "input_len_exact": False,
                "random_prompts": 4,
                "random_prompts_exact": 0,
            },
        ),
        (
            "random:tokens",
            4,
            4,
            {
                "prompt_source": "random:tokens",
                "input_len_exact": True,
                "random_prompts": 4,
                "random_prompts_exact": 4,
            },
        ),
        (
            "random:tokens",
            4,
            3,
            {
                "prompt_source": "random:tokens",
                "input_len_exact": False,
                "random_prompts": 4,
                "random_prompts_exact": 3,
            },
        ),
    ],
)
def test_prompt_fields_say_whether_random_lengths_are_exact(source, count, exact, fields):
    assert loadrunner.prompt_fields(source, count, exact) == fields
    result = LoadgenResult.from_json(
        {"requests": 0, "completed": 0, "failed": 0, "duration_s": 0.0, **fields}
    )
    assert result.input_len_exact is fields["input_len_exact"]


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (4.0, 0.5), (0.25, 2.0)])
def test_open_loop_arrivals_are_gamma(burstiness, cv):
    rate, n = 50.0, 40000
    offsets = loadgen.arrival_offsets(rate, burstiness, random.Random(f"1:arrivals:{burstiness}"))
    times = [next(offsets) for _ in range(n + 1)]
    assert times[0] == 0.0
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / rate, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.05)
    again = loadgen.arrival_offsets(rate, burstiness, random.Random(f"1:arrivals:{burstiness}"))
    assert [next(again) for _ in range(100)] == times[:100]


def test_ramp_offsets_spread_the_first_wave_evenly():
    assert loadgen.ramp_offsets(4, 0.5) == [0.0, 0.125, 0.25, 0.375]
    assert loadgen.ramp_offsets(3, 0.0) == [0.0, 0.0, 0.0]
    assert loadgen.ramp_offsets(1, 2.0) == [0.0]
    assert (loadgen.default_ramp_s(256), loadgen.default_ramp_s(1)) == (0.512, 0.0)


@pytest.mark.parametrize(
    ("change", "ramp_s"),
    [
        ({}, 0.0),
        ({"concurrency": 64}, 0.128),
        ({"concurrency": 64, "ramp_s": 0}, 0.0),
        ({"concurrency": 8, "ramp_s": 2.5}, 2.5),
    ],
)
def test_the_ramp_a_closed_loop_runs(change, ramp_s):
    assert loadgen.LoadSpec.parse({**BASE, **change}).ramp_s == ramp_s


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ramp_s": -1}, "loadgen: 'ramp_s' must be >= 0, got -1"),
        ({"base_url": "ftp://h/", "port": None}, "'base_url' must be http://host[:port]"),
        ({"base_url": "127.0.0.1:8000", "port": None}, "'base_url' must be http://host[:port]"),
    ],
)
def test_more_bad_specs(change, message):
    with pytest.raises(AgentFailure) as info:
        loadgen.LoadSpec.parse({**BASE, **change})
    assert info.value.kind == "bad_spec" and message in info.value.message


def test_the_file_limit_is_raised_for_one_socket_per_stream():
    """Run in a child whose soft limit is 512: 1,000 streams need 1,256 files, under the hard
    limit; a soft limit already high enough is left alone."""
    code = (
        "import resource; from orchestrator.remote.loadrunner import raise_file_limit; "
        "raise_file_limit(1000); a = resource.getrlimit(resource.RLIMIT_NOFILE)[0]; "
        "raise_file_limit(10); print(a, resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1256:
        pytest.skip(f"the hard limit here is {hard}")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))

    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=low,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    ).stdout
    assert out.split() == ["1256", "1256"]


def test_within_runs_the_awaitable_in_the_callers_task():
    from orchestrator.remote.loadrunner import within

    async def whose() -> object:
        return asyncio.current_task()

    async def main() -> None:
        me = asyncio.current_task()
        assert await within(5.0, whose()) is me  # no task of its own: no iteration's delay
        with pytest.raises(asyncio.TimeoutError):
            await within(0.01, asyncio.sleep(30))
        assert await within(5.0, whose()) is me  # the task is usable after a timeout

        async def cancelled_from_outside() -> None:
            await within(30.0, asyncio.sleep(30))

        other = asyncio.ensure_future(cancelled_from_outside())
        await asyncio.sleep(0.01)
        other.cancel()
        with pytest.raises(asyncio.CancelledError):  # not mistaken for a timeout
            await other

    asyncio.run(main())


def test_lag_stats():
    stats = loadgen.lag_stats_ms([0.001, 0.002, 0.003, 0.010])
    assert stats.n == 4 and stats.max == 10.0
    assert stats.p50 == pytest.approx(2.5) and stats.p99 == pytest.approx(9.79)
    assert loadgen.lag_stats_ms([]).p99 is None


class GreedyTokenizer:
    """A real (tiny) longest-match tokenizer: decode/encode round trips merge tokens, like BPE."""

    def __init__(self) -> None:
        self.vocab = ["<s>", "a", "b", "c", "ab", "bc", "abc", " "]
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.special_ids = {0}

    def encode(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for width in (3, 2, 1):
                if text[i : i + width] in self.ids and text[i : i + width] != "<s>":
                    out.append(self.ids[text[i : i + width]])
                    i += width
                    break
            else:
                raise ValueError(text[i])
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


def test_random_prompts_exact_tokens_with_a_tokenizer():
    tok = GreedyTokenizer()
    spec = PromptSource(kind="random", num=30, input_len=40, range_ratio=0.5)
    items, source, exact = tokens.random_prompts(spec, tok, seed=5)
    assert source == "random:tokens" and exact == 30
    lengths = [len(tok.encode(t)) for t in items]
    assert min(lengths) >= 20 and max(lengths) <= 60 and len(set(lengths)) > 5
    assert all("<s>" not in t for t in items)
    assert tokens.random_prompts(spec, tok, seed=5)[0] == items


def test_random_prompts_in_words_without_a_tokenizer():
    items, source, exact = tokens.random_prompts(
        PromptSource(kind="random", num=4, input_len=100), None, seed=1
    )
    assert source == "random:words" and exact == 0
    assert [len(t.split()) for t in items] == [100] * 4
    assert len(set(items)) == 4
    with pytest.raises(AgentFailure, match="input_len"):
        tokens.random_prompts(PromptSource(kind="random", num=4), None, seed=1)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_recorded_not_raised():
    events: list[Wire] = []
    spec = {
        "port": closed_port(),
        "model": "m",
        "prompts": {"kind": "list", "items": ["a", "b"]},
        "num_prompts": 3,
        "warmup": 1,
        "concurrency": 2,
        "timeout_s": 5,
    }
    res = loadrunner.run(spec, events.append)
    records = [e for e in events if isinstance(e, RequestRecord)]
    assert [(r.index, r.warmup) for r in sorted(records, key=lambda r: r.index)] == [
        (0, True),
        (1, False),
        (2, False),
        (3, False),
    ]
    assert all(not r.ok and r.status is None and "Connect" in r.error for r in records)
    assert all(r.start == r.begun for r in records)  # never sent: start is when it was taken up
    assert (res.requests, res.completed, res.failed, res.warmup) == (3, 0, 3, 1)
    assert res.prompt_source == "list" and res.token_count_method is None
    assert (res.input_len_exact, res.random_prompts, res.request_seeds) == (None, None, True)
    assert [e.phase for e in events if isinstance(e, PhaseEvent)] == ["warmup", "measure"]
    assert res.client_lag is not None and res.client_lag.send_lag_ms.n == 3
    assert math.isfinite(res.duration_s) and res.duration_s >= 0


class _Recorder(BaseHTTPRequestHandler):
    """Records each request body; answers with a one-token stream, usage and [DONE]."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append((self.path, body))  # type: ignore[attr-defined]
        chunk = {
            "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }
        payload = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def sent_bodies(server: ThreadingHTTPServer, spec: dict) -> list[dict]:
    server.bodies.clear()  # type: ignore[attr-defined]
    result = loadrunner.run({**spec, "port": server.server_address[1]}, lambda event: None)
    assert (result.completed, result.failed) == (spec["num_prompts"], 0)
    paths = {path for path, _ in server.bodies}  # type: ignore[attr-defined]
    assert paths == {"/v1/chat/completions"}
    return [json.loads(body) for _, body in server.bodies]  # type: ignore[attr-defined]


def test_each_request_carries_its_own_reproducible_seed(recorder):
    """Closed loop, one worker: request k (warm-up first) is the k-th body the server sees."""
    items = ["first", {"messages": [{"role": "user", "content": "second"}]}, "third"]
    spec = {
        "model": "m",
        "prompts": {"kind": "list", "items": items},
        "num_prompts": 4,
        "warmup": 2,
        "concurrency": 1,
        "temperature": 0.8,
        "max_tokens": 8,
        "seed": 5,
    }
    bodies = sent_bodies(recorder, spec)
    cfg = loadgen.LoadSpec.parse({**spec, "port": 1})
    assert [b["seed"] for b in bodies] == [loadgen.request_seed(5, k) for k in range(6)]
    assert bodies == [
        loadgen.request_body(items[k % 3], cfg, seed=loadgen.request_seed(5, k)) for k in range(6)
    ]
    assert sent_bodies(recorder, spec) == bodies  # the same seed: the very same requests
    other = sent_bodies(recorder, {**spec, "seed": 6})
    assert [b["seed"] for b in other] == [loadgen.request_seed(6, k) for k in range(6)]
    assert [b["messages"] for b in other] == [b["messages"] for b in bodies]
    greedy = sent_bodies(recorder, {**spec, "temperature": 0})
    assert [b["messages"] for b in greedy] == [b["messages"] for b in bodies]
    assert not any("seed" in b for b in greedy)


class _Gathering(_Recorder):
    """Answers nothing until ``WAVE`` requests are in: each worker of a wave gets exactly one."""

    WAVE = 4
    barrier = threading.Barrier(WAVE)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.barrier.wait(timeout=30)
        super().do_POST()


def test_a_closed_loop_ramps_its_first_wave():
    """Worker i's first request is due i * ramp_s / concurrency after the phase starts, and the
    request's times are in order: due <= begun <= start (sent) <= end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gathering)
    server.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    events: list[Wire] = []
    spec = {
        "port": server.server_address[1],
        "model": "m",
        "prompts": {"kind": "list", "items": ["a"]},
        "num_prompts": 4,
        "concurrency": 4,
        "ramp_s": 0.4,
        "temperature": 0,
    }
    try:
        result = loadrunner.run(spec, events.append)
    finally:
        server.shutdown()
        server.server_close()
    assert (result.completed, result.ramp_s) == (4, 0.4)
    records = records_of(events)
    dues = [r.due - records[0].due for r in records]
    assert dues == pytest.approx([0.0, 0.1, 0.2, 0.3], abs=2e-6)
    assert all(r.begun >= r.due - 1e-6 and r.start >= r.begun and r.end >= r.start for r in records)
    assert all(r.ttft == r.chunks[0].t and r.ttft >= 0 for r in records)
    walls = [r.start_wall - r.start for r in records]  # one clock: the same offset for all
    assert max(walls) - min(walls) < 3e-6


# ---------------------------------------------------------------- against the engine simulator

DFLASH = {"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}
SPEED = "20"  # simulated time runs 20x faster: a 27B DFlash stream decodes at ~1900 tok/s


def start_sim(root: Path, port: int) -> subprocess.Popen:
    box = prepare_sandbox(root)
    env = {
        **os.environ,
        **box.env(),
        "ORCH_SIM_SPEED": SPEED,
        "ORCH_SIM_LOAD_S": "0",
        "VLLM_USE_V2_MODEL_RUNNER": "1",
    }
    argv = [
        "vllm",
        "serve",
        "Qwen/Qwen3.6-27B",
        "--port",
        str(port),
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "8192",
        "--speculative-config",
        json.dumps(DFLASH),
        "--attention-backend",
        "flash_attn",
    ]
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=(root / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((root / "server.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("simulator not ready after 30 s")


def stop_sim(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    port = closed_port()
    proc = start_sim(tmp_path_factory.mktemp("sim"), port)
    yield port
    stop_sim(proc)


def ground_truth(port: int, since: float) -> list[dict]:
    """The simulator's own per-request records that arrived after ``since``, in arrival order."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/ground_truth", timeout=5) as resp:
        truth = json.load(resp)
    reqs = [r for r in truth["requests"] if not r["warmup"] and r["arrival_time"] >= since]
    return sorted(reqs, key=lambda r: r["arrival_time"])


def records_of(events: list[Wire]) -> list[RequestRecord]:
    return sorted((e for e in events if isinstance(e, RequestRecord)), key=lambda r: r.index)


def test_closed_loop_matches_the_simulators_ground_truth(sim):
    since = time.time()
    events: list[Wire] = []
    workload = WorkloadSpec(
        prompts="builtin:math",
        num_prompts=16,
        warmup=2,
        concurrency=4,
        max_tokens=160,
        ignore_eos=True,
        temperature=0.0,
        seed=3,
        chat_template_kwargs={"enable_thinking": False},
    )
    prompts = load_prompts(workload, base_dir=".")
    spec = build_loadgen_spec(workload, prompts, port=sim, served_name="Qwen/Qwen3.6-27B")
    result = loadrunner.run(spec.to_json(), events.append)
    records = records_of(events)
    truth = ground_truth(sim, since)

    assert (result.requests, result.completed, result.failed, result.warmup) == (16, 16, 0, 2)
    assert [r.warmup for r in records] == [True] * 2 + [False] * 16
    # a closed loop's request is due when its worker's previous response ended, so a client
    # slow to send again shows as send lag; only each phase's first wave is due on the ramp
    ends = {r.end for r in records}
    assert sum(r.due not in ends for r in records) == 2 + 4
    assert all(r.ok and r.output_tokens == 160 for r in records)
    assert result.token_count_method == "usage" and result.prompt_source == "list"
    assert result.metrics_before and "vllm:generation_tokens_total" in result.metrics_after
    # exact per-chunk token counts: the client sees every verify step the server made
    assert len(truth) == 18
    assert sorted(tuple(c.tokens for c in r.chunks) for r in records) == sorted(
        tuple(t["chunk_tokens"]) for t in truth
    )
    lag = result.client_lag
    assert lag is not None
    measured_truth = truth[2:]  # the warm-up requests all finished before the first measured one
    summary = request_stats(
        records, window_s=result.duration_s, loop_delay_ms=lag.loop_delay_ms.to_json()
    )
    true_steps = sum(t["decode_steps"] for t in measured_truth)
    true_tpc = sum(t["output_tokens"] - 1 for t in measured_truth) / true_steps
    assert summary.tokens_per_chunk > 2
    assert summary.tokens_per_chunk == pytest.approx(true_tpc, rel=0.03)
    true_decode = statistics.fmean(t["decode_tok_s"] for t in measured_truth)
    assert summary.decode_tok_s.mean == pytest.approx(true_decode, rel=0.03)
    window = max(t["finish_time"] for t in measured_truth) - min(
        t["arrival_time"] for t in measured_truth
    )
    assert summary.output_throughput == pytest.approx(16 * 160 / window, rel=0.03)
    assert summary.ttft_ms.median > 0 and summary.itl_token_ms.mean < summary.itl_chunk_ms.mean
    assert lag.loop_delay_ms.n > 0
    progress = [e for e in events if isinstance(e, ProgressEvent)]
    assert all(p.done + p.failed <= 18 and p.tok_s >= 0 and p.in_flight >= 0 for p in progress)


def test_open_loop_via_the_agent_entry_point(sim, tmp_path: Path):
    """Through ``python -m orchestrator.remote.main loadgen spec.json``, as on a host."""
    since = time.time()
    spec = {
        "v": CONTRACT_VERSION,
        "port": sim,
        "api": "completions",
        "model": "Qwen/Qwen3.6-27B",
        "num_prompts": 24,
        "prompts": {"kind": "random", "input_len": 64, "num": 24, "tokenizer": None},
        "request_rate": 60.0,
        "burstiness": 1.0,
        "max_tokens": 48,
        "ignore_eos": True,
        "seed": 11,
        "continuous_usage_stats": False,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.remote.main", "loadgen", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    decoded = [decode_line("loadgen", line)[1] for line in lines]  # as the controller reads them
    result = decoded[-1]
    assert isinstance(result, LoadgenResult)
    records = records_of(decoded[:-1])
    assert (result.completed, result.mode, result.prompt_source) == (24, "open", "random:words")
    # no tokenizer on this "host": the lengths are in words, and the result says so
    assert (result.input_len_exact, result.random_prompts, result.random_prompts_exact) == (
        False,
        24,
        0,
    )
    assert result.token_count_method == "chunk"  # no per-chunk usage asked for: 1 per chunk
    assert all(r.prompt_tokens == 64 for r in records)  # the simulator counts words too
    # the schedule is the seeded gamma process exactly
    offsets = loadgen.arrival_offsets(60.0, 1.0, random.Random("11:arrivals:measure"))
    expected = [next(offsets) for _ in range(24)]
    assert [r.due - records[0].due for r in records] == pytest.approx(expected, abs=2e-6)
    assert all(r.start >= r.due for r in records)
    assert result.client_lag is not None and result.client_lag.send_lag_ms.n == 24
    # tokens per chunk from the usage totals still match the server's steps
    truth = ground_truth(sim, since)
    summary = request_stats(records)
    true_tpc = sum(t["output_tokens"] - 1 for t in truth) / sum(t["decode_steps"] for t in truth)
    assert summary.tokens_per_chunk == pytest.approx(true_tpc, rel=1e-9)
    assert summary.itl_token_ms.n == 0


def test_server_killed_mid_run_is_recorded(tmp_path: Path):
    port = closed_port()
    proc = start_sim(tmp_path, port)
    events: list[Wire] = []

    def emit(event: Wire) -> None:  # the server dies the moment the first request completes
        events.append(event)
        if isinstance(event, RequestRecord) and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    spec = {
        "port": port,
        "model": "Qwen/Qwen3.6-27B",
        "prompts": {"kind": "list", "items": ["Why?"]},
        "num_prompts": 40,
        "concurrency": 4,
        "max_tokens": 400,
        "ignore_eos": True,
        "timeout_s": 10,
    }
    try:
        result = loadrunner.run(spec, emit)
    finally:
        stop_sim(proc)
    records = records_of(events)
    assert len(records) == result.requests == 40
    assert result.completed + result.failed == 40
    assert result.completed >= 1 and result.failed >= 36
    failed = [r for r in records if not r.ok]
    assert all(r.error for r in failed)
    assert any(
        r.chunks and r.status == 200 for r in failed
    )  # cut off mid-stream, partial chunks kept
    assert sum("Connect" in r.error for r in failed) >= 33  # later ones found nobody listening


def test_telemetry_spans_the_measured_window(sim, tmp_path: Path, monkeypatch):
    """With ``telemetry``, the GPUs are sampled from before the first request to after the
    last (here through the stand-in NVML library): the window's energy is whole and sound."""
    monkeypatch.setenv("FAKE_NVML_POWER_MW", "280000")
    workload = WorkloadSpec(
        prompts="builtin:chat", num_prompts=6, warmup=1, concurrency=2, max_tokens=48
    )
    spec = build_loadgen_spec(
        workload, load_prompts(workload, base_dir="."), port=sim, served_name="Qwen/Qwen3.6-27B"
    )
    spec = dataclasses.replace(
        spec,
        progress_interval_s=0.05,
        telemetry=TelemetrySpec(
            gpus=[0, 1], interval_s=0.05, library=str(build_fake_nvml(tmp_path))
        ),
    )
    events: list[Any] = []
    result = loadrunner.run(spec.to_json(), events.append)
    telemetry = result.telemetry
    assert telemetry is not None and telemetry.source == "nvml" and telemetry.error is None
    # the progress events carry the GPUs' newest read live: both boards' power together
    progress = [e for e in events if isinstance(e, ProgressEvent)]
    assert progress and {e.gpu_power_w for e in progress} == {560.0}
    assert {e.gpu_sm_mhz for e in progress} <= {1740, 1741}  # GPU 0 at 1740 MHz, GPU 1 at 1741
    assert telemetry.power_limit_w == {"0": 300.0, "1": 300.0}
    times = [s.t for s in telemetry.samples]
    assert result.started_at is not None and result.ended_at is not None
    assert min(times) < result.started_at and max(times) > result.ended_at
    assert {s.gpu for s in telemetry.samples} == {0, 1}
    energy = window_energy(
        telemetry.samples,
        result.started_at,
        result.ended_at,
        output_tokens=result.output_tokens,
        total_tokens=result.output_tokens,
    )
    assert energy.valid, energy.problems
    assert energy.energy_j == pytest.approx(2 * 280.0 * result.duration_s, rel=0.02)
    assert energy.j_per_output_token == pytest.approx(energy.energy_j / (6 * 48), rel=1e-6)


def test_a_host_without_nvml_or_nvidia_smi_measures_without_telemetry(
    sim, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("PATH", str(tmp_path))
    workload = WorkloadSpec(prompts="builtin:chat", num_prompts=2, concurrency=1, max_tokens=8)
    spec = build_loadgen_spec(
        workload, load_prompts(workload, base_dir="."), port=sim, served_name="Qwen/Qwen3.6-27B"
    )
    spec = dataclasses.replace(
        spec, telemetry=TelemetrySpec(gpus=[0], library=str(tmp_path / "libnvidia-ml.so.1"))
    )
    result = loadrunner.run(spec.to_json(), lambda event: None)
    assert result.completed == 2
    assert result.telemetry is not None and result.telemetry.source is None
    assert result.telemetry.samples == []
    assert "cannot load" in (result.telemetry.error or "")
    assert "nvidia-smi not found on PATH" in (result.telemetry.error or "")
