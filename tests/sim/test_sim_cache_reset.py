"""The simulated engines' prefix-cache reset endpoints, under the real engines' conditions, and the
load generator resetting the cache before each load point of one server (counted in the
simulator's ground truth)."""

from __future__ import annotations

import http.client
import json
import time

import pytest
from sim_helpers import call, free_port

from orchestrator.config import RunSpec, WorkloadSpec
from orchestrator.engines import get_engine
from orchestrator.loadgen.prompts import build_loadgen_spec, load_prompts
from orchestrator.remote import loadgen, loadrunner
from orchestrator.sim.cache import DEV_MODE_WARNING, FLUSH_TEXT

MODEL = "Qwen/Qwen3-8B"
KEY = {"Authorization": "Bearer sk-test"}
DEV = {"VLLM_SERVER_DEV_MODE": "1"}
RESET = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"}


def argv(engine: str, port: int, *extra: str) -> list[str]:
    if engine == "vllm":
        return ["vllm", "serve", MODEL, "--port", str(port), "--max-model-len", "4096",
                "--served-model-name", "qwen", *extra]  # fmt: skip
    return ["python", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", str(port),
            "--context-length", "4096", "--served-model-name", "qwen", *extra]  # fmt: skip


def resets(sim) -> dict:
    return sim.json("/sim/ground_truth")["cache_resets"]


def open_stream(url: str, headers: dict) -> http.client.HTTPConnection:
    """A long streamed request, read up to its first token: it is running in the engine."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"model": "qwen", "prompt": "count", "max_tokens": 3000, "ignore_eos": True}
    conn.request(
        "POST",
        "/v1/completions",
        json.dumps({**body, "stream": True}),
        {"Content-Type": "application/json", **headers},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.readline().startswith(b"data: "):
        pass
    return conn


def reset_until_done(sim, engine: str, headers: dict) -> tuple[int, bytes]:
    """What the load generator does: ask again while the engine refuses."""
    deadline = time.monotonic() + 20
    while True:
        status, body = call("POST", sim.url + RESET[engine], headers=headers)
        verdict, _ = loadgen.reset_answer(status, body.decode())
        if verdict != "retry" or time.monotonic() > deadline:
            return status, body
        time.sleep(0.05)


def test_vllm_has_no_reset_endpoint_without_dev_mode(start_sim) -> None:
    sim = start_sim(argv("vllm", free_port()))
    sim.wait_ready()
    assert call("POST", sim.url + "/reset_prefix_cache")[0] == 404
    assert resets(sim) == {"count": 0, "times": [], "refused": 0}
    assert sim.stop() == 0
    assert "SECURITY WARNING" not in sim.text() and "Route: /reset_prefix_cache" not in sim.text()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_reset_is_refused_while_a_request_runs_and_counted_when_done(start_sim, engine) -> None:
    # real time (speed 1): the streamed request keeps running while the reset is asked
    sim = start_sim(
        argv(engine, free_port(), "--api-key", "sk-test"), {**DEV, "ORCH_SIM_SPEED": "1"}
    )
    sim.wait_ready()
    path = RESET[engine]
    before = time.time()
    status, body = call("POST", sim.url + path, headers=KEY)
    after = time.time()
    assert (status, body) == (
        (200, b'{"success": true}') if engine == "vllm" else (200, FLUSH_TEXT.encode())
    )
    truth = resets(sim)
    assert truth["count"] == 1 and before <= truth["times"][0] <= after and truth["refused"] == 0

    conn = open_stream(sim.url, KEY)
    status, body = call("POST", sim.url + path, headers=KEY)
    if engine == "vllm":
        assert (status, json.loads(body)) == (200, {"success": False})
    else:
        assert (status, body) == (400, FLUSH_TEXT.encode())
        assert call("GET", sim.url + path, headers=KEY)[0] == 400  # GET too
    assert resets(sim) == {**truth, "refused": 1 if engine == "vllm" else 2}
    conn.close()  # the client goes away: the engine aborts the request
    assert reset_until_done(sim, engine, KEY)[0] == 200
    assert resets(sim)["count"] == 2
    if engine == "sglang":
        assert call("POST", sim.url + path)[0] == 401  # its API key guards /flush_cache
    assert sim.stop() == 0
    log = sim.text()
    if engine == "vllm":
        assert DEV_MODE_WARNING in log and "Route: /reset_prefix_cache, Methods: POST" in log
        assert "Failed to reset prefix cache because some blocks (" in log
    else:
        assert "Cache flushed successfully!" in log
        assert (
            "Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1"
        ) in log


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_load_generator_resets_before_each_load_point(start_sim, engine) -> None:
    """Two load points on one server, as a sweep measures them: each starts with a reset."""
    sim = start_sim(argv(engine, free_port()), DEV)
    sim.wait_ready()
    reset = get_engine(engine).cache_reset(
        RunSpec.model_validate({"name": "r", "engine": engine, "model": MODEL, "env": DEV})
    )
    assert reset is not None and reset.path == RESET[engine]
    results, windows = [], []
    for concurrency in (1, 2):
        workload = WorkloadSpec(
            prompts="builtin:math", num_prompts=4, warmup=1, concurrency=concurrency, max_tokens=16
        )
        spec = build_loadgen_spec(
            workload,
            load_prompts(workload, base_dir="."),
            port=sim.port,
            served_name="qwen",
            cache_reset=reset,
        )
        records: list = []
        results.append(loadrunner.run(spec.to_json(), records.append))
        starts = [r.start_wall for r in records if hasattr(r, "start_wall")]
        windows.append((min(starts), max(starts)))
    assert [r.cache_reset for r in results] == ["ok", "ok"]
    assert [r.completed for r in results] == [4, 4]
    truth = resets(sim)
    assert truth["count"] == 2
    first, second = truth["times"]
    assert first <= windows[0][0] and windows[0][1] <= second <= windows[1][0]
