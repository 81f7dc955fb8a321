"""Real simulated servers, started through the real engines' command lines in a sandbox.

Each test checks what a controller would see (HTTP, SSE, /metrics, logs, nvidia-smi, exit codes)
against the simulator's own ground truth.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_helpers import call, free_port

from orchestrator.sim.sandbox import Sandbox

DFLASH = '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}'
BROKEN = '{"method": "dflash", "model": "orch-demo/Qwen3.6-27B-DFlash-broken", "num_speculative_tokens": 15}'
KEY = {"Authorization": "Bearer sk-test"}

SGLANG_TP2 = [
    "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B", "--port", "{port}",
    "--tp-size", "2",
]  # fmt: skip


def vllm_argv(port: int, spec: str | None = None, *extra: str) -> list[str]:
    argv = ["vllm", "serve", "Qwen/Qwen3.6-27B", "--host", "127.0.0.1", "--port", str(port),
            "--tensor-parallel-size", "2", "--max-model-len", "8192", "--served-model-name", "qwen"]  # fmt: skip
    return argv + (["--speculative-config", spec] if spec else []) + list(extra)


def sglang_argv(port: int, *extra: str) -> list[str]:
    return ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B", "--host", "127.0.0.1",
            "--port", str(port), "--tp-size", "2", "--context-length", "8192", "--served-model-name", "qwen",
            *extra]  # fmt: skip


def stream(
    url: str, path: str, body: dict, headers: dict | None = None, *, stop_after: int | None = None
) -> list[dict | str]:
    """POST with stream=true; the decoded ``data:`` payloads in order ("[DONE]" as a string)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(
        "POST",
        path,
        json.dumps({**body, "stream": True}),
        {"Content-Type": "application/json", **(headers or {})},
    )
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    events: list[dict | str] = []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        assert line.startswith(b"data: "), line
        payload = line[6:].decode()
        events.append(payload if payload == "[DONE]" else json.loads(payload))
        if payload == "[DONE]" or (stop_after is not None and len(events) >= stop_after):
            break
    conn.close()
    return events


def metrics(url: str) -> dict[str, tuple[str, list]]:
    status, body = call("GET", url + "/metrics")
    assert status == 200
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(body.decode())}


def value(families: dict, sample_name: str, **labels: str) -> float:
    found = [
        s.value
        for _, samples in families.values()
        for s in samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (sample_name, labels)
    return found[0]


def content_chunks(events: list) -> list[str]:
    return [
        e["choices"][0]["delta"]["content"]
        for e in events
        if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
    ]


def test_vllm_dflash_serves_streams_and_counts_exactly(start_sim) -> None:
    sim = start_sim(
        vllm_argv(free_port(), DFLASH, "--api-key", "sk-test", "--seed", "3"),
        {"VLLM_USE_V2_MODEL_RUNNER": "1"},
    )
    sim.wait_ready()
    assert call("GET", sim.url + "/v1/models")[0] == 401  # --api-key guards /v1/* only
    assert call("GET", sim.url + "/health")[0] == 200
    assert json.loads(call("GET", sim.url + "/version")[1]) == {"version": "0.33.0"}
    models = json.loads(call("GET", sim.url + "/v1/models", headers=KEY)[1])
    assert [m["id"] for m in models["data"]] == ["qwen"] and models["data"][0][
        "max_model_len"
    ] == 8192

    body = {"model": "qwen", "messages": [{"role": "user", "content": "Prove that sqrt(2) is irrational."}],
            "max_tokens": 200, "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    events = stream(sim.url, "/v1/chat/completions", body, KEY)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": usage["usage"]["prompt_tokens"],
        "completion_tokens": 200,
        "total_tokens": usage["usage"]["prompt_tokens"] + 200,
    }
    finals = [e["choices"][0]["finish_reason"] for e in events[1:-2]]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    chunks = content_chunks(events)
    tokens_per_chunk = [len(text.split()) for text in chunks]  # one word per token
    assert (
        sum(tokens_per_chunk) == 200 and max(tokens_per_chunk) > 1
    )  # a step's chunk carries several tokens

    with ThreadPoolExecutor(4) as pool:  # concurrent, non-streaming, both APIs
        others = list(
            pool.map(
                lambda i: json.loads(
                    call(
                        "POST",
                        sim.url + "/v1/completions",
                        {
                            "model": "qwen",
                            "prompt": f"Write a sort in C, variant {i}.",
                            "max_tokens": 150,
                            "ignore_eos": True,
                        },
                        KEY,
                    )[1]
                ),
                range(4),
            )
        )
    assert [o["usage"]["completion_tokens"] for o in others] == [150] * 4
    assert all(len(o["choices"][0]["text"].split()) == 150 for o in others)
    assert (
        call("POST", sim.url + "/v1/completions", {"model": "other", "prompt": "x"}, KEY)[0] == 404
    )
    assert (
        call(
            "POST",
            sim.url + "/v1/completions",
            {"model": "qwen", "prompt": "x", "max_tokens": 9000},
            KEY,
        )[0]
        == 400
    )
    cut = stream(
        sim.url,
        "/v1/completions",
        {
            "model": "qwen",
            "prompt": "never read to the end",
            "max_tokens": 4000,
            "ignore_eos": True,
        },
        KEY,
        stop_after=2,
    )
    assert len(cut) == 2

    time.sleep(0.6)  # the client left: the engine drops the request; one more stats interval passes
    truth = sim.json("/sim/ground_truth")
    reqs = truth["requests"]
    assert [r["finish_reason"] for r in reqs] == ["length"] * 5 + ["abort"]
    first = reqs[0]
    assert first["chunk_tokens"] == tokens_per_chunk and first["output_tokens"] == 200
    assert (
        first["num_drafts"] == first["decode_steps"] == len(chunks) - 1
    )  # the first token comes from prefill
    totals = truth["totals"]
    assert totals["generation_tokens"] == sum(r["output_tokens"] for r in reqs)
    assert totals["num_draft_tokens"] == 15 * totals["num_drafts"]
    assert truth["drafter_fit"] == {"ok": True, "problems": []}
    assert totals["acceptance_length"] == pytest.approx(
        truth["profile"]["expected_acceptance_length"], abs=0.6
    )

    fams = metrics(sim.url)
    assert fams["vllm:spec_decode_num_drafts"][0] == "counter"
    assert [s.name for s in fams["vllm:generation_tokens"][1]] == ["vllm:generation_tokens_total"]
    assert fams["vllm:generation_tokens_created"][0] == "gauge"  # the parser's view of `_created`
    assert (
        value(fams, "vllm:generation_tokens_total", model_name="qwen", engine="0")
        == totals["generation_tokens"]
    )
    assert value(fams, "vllm:prompt_tokens_total") == totals["prompt_tokens"]
    assert value(fams, "vllm:spec_decode_num_drafts_total") == totals["num_drafts"]
    assert value(fams, "vllm:spec_decode_num_draft_tokens_total") == totals["num_draft_tokens"]
    assert (
        value(fams, "vllm:spec_decode_num_accepted_tokens_total") == totals["num_accepted_tokens"]
    )
    per_pos = [
        value(fams, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
        for i in range(15)
    ]
    assert per_pos == totals["accepted_per_position"]
    assert value(fams, "vllm:request_success_total", finished_reason="length") == 5
    assert value(fams, "vllm:request_success_total", finished_reason="abort") == 1
    assert fams["vllm:time_to_first_token_seconds"][0] == "histogram"
    assert value(fams, "vllm:e2e_request_latency_seconds_count") == 6
    assert (
        value(fams, "vllm:num_requests_running") == 0
        and fams["vllm:kv_cache_usage_perc"][0] == "gauge"
    )

    assert sim.stop() == 0
    log = sim.text()
    assert f"Starting vLLM server on http://127.0.0.1:{sim.port}" in log
    assert "(APIServer pid=" in log and "INFO:     Application startup complete." in log
    assert (
        "[shutdown] API server: shutting down FastAPI HTTP server\nINFO:     Shutting down" in log
    )
    assert "Finished server process" not in log  # vLLM 0.32 prints none (tests/fixtures/vllm_cpu)
    spec_lines = re.findall(
        r"SpecDecoding metrics: .*Accepted: (\d+) tokens, Drafted: (\d+) tokens, Per-position acceptance rate: ([\d., ]+), Avg Draft acceptance rate: ([\d.]+)%",
        log,
    )
    assert spec_lines, log
    assert sum(int(a) for a, _, _, _ in spec_lines) == totals["num_accepted_tokens"]
    assert sum(int(d) for _, d, _, _ in spec_lines) == totals["num_draft_tokens"]
    assert all(len(rates.split(", ")) == 15 for _, _, rates, _ in spec_lines)
    assert re.search(
        r"Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, GPU KV cache usage: [\d.]+%, Prefix cache hit rate: [\d.]+%",
        log,
    )


def test_sglang_mtp_warms_up_logs_batches_and_reports_acceptance(start_sim) -> None:
    argv = sglang_argv(free_port(), "--enable-metrics", "--decode-log-interval", "8", "--api-key", "sk-test",
                       "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
    sim = start_sim(argv)
    sim.wait_ready()
    assert call("GET", sim.url + "/v1/models")[0] == 401
    assert (
        call("GET", sim.url + "/server_info")[0] == 401
    )  # SGLang's key guards all but /health* and /metrics
    assert call("GET", sim.url + "/health_generate")[0] == 200
    before = sim.json("/sim/ground_truth")["totals"]
    assert before["requests"] == 1  # SGLang's own warm-up request

    bodies = [{"model": "qwen", "prompt": f"Solve x^2 = {i}", "max_tokens": 240, "ignore_eos": True,
               "stream_options": {"include_usage": True}} for i in range(3)]  # fmt: skip
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda b: stream(sim.url, "/v1/completions", b, KEY), bodies))
    for events in results:
        assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 240
        assert sum(len(e["choices"][0]["text"].split()) for e in events[:-2]) == 240
    native = json.loads(
        call(
            "POST",
            sim.url + "/generate",
            {"text": "Hi", "sampling_params": {"max_new_tokens": 32, "ignore_eos": True}},
            KEY,
        )[1]
    )
    meta = native["meta_info"]
    assert meta["completion_tokens"] == 32 and meta["spec_accept_length"] == pytest.approx(
        32 / meta["spec_verify_ct"]
    )

    truth = sim.json("/sim/ground_truth")
    totals = truth["totals"]
    info = json.loads(call("GET", sim.url + "/server_info", headers=KEY)[1])["internal_states"][0]
    assert info["spec_cumulative_num_forward_ct"] == totals["request_decode_steps"]
    assert (
        info["spec_cumulative_num_accept_tokens"]
        == totals["num_accepted_tokens"] + totals["request_decode_steps"]
    )
    assert info["avg_spec_accept_length"] == pytest.approx(totals["acceptance_length"])

    fams = metrics(sim.url)  # no API key needed
    assert not [name for name in fams if name.endswith("_created")]
    gen = value(fams, "sglang:generation_tokens_total")
    verify = value(fams, "sglang:spec_verify_calls_total")
    assert gen == totals["generation_tokens"] == 8 + 3 * 240 + 32
    assert verify == totals["request_decode_steps"]
    delta_length = (gen - before["generation_tokens"]) / (verify - before["request_decode_steps"])
    assert delta_length == pytest.approx(2.9, abs=0.35)
    assert value(fams, "sglang:num_requests_total") == 5
    assert fams["sglang:spec_accept_length"][0] == "gauge"

    assert sim.stop() == 0
    log = sim.text()
    assert "The server is fired up and ready to roll!" in log
    assert re.search(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: 0, ",
        log,
    )
    decode = re.findall(
        r"\[[\d\- :]+ TP0\] Decode batch, #running-req: \d+, #full token: \d+, full token usage: [\d.]+, mamba num: \d+, mamba usage: [\d.]+, accept len: ([\d.]+), accept rate: ([\d.]+), cuda graph: True, gen throughput \(token/s\): ([\d.]+), #queue-req: \d+",
        log,
    )
    assert len(decode) >= 10
    assert all(1.0 <= float(length) <= 4.0 for length, _, _ in decode)
    assert value(fams, "sglang:spec_accept_length") == pytest.approx(
        float(decode[-1][0]), abs=0.005
    )


def test_broken_drafter_collapses_silently_and_runs_are_deterministic(start_sim) -> None:
    def run(spec: str, seed: str, gpus: str) -> tuple[dict, str]:
        env = {"VLLM_USE_V2_MODEL_RUNNER": "1", "ORCH_SIM_GPUS": "6", "CUDA_VISIBLE_DEVICES": gpus}
        sim = start_sim(vllm_argv(free_port(), spec, "--seed", seed), env)
        sim.wait_ready()
        for i in range(2):
            call(
                "POST",
                sim.url + "/v1/completions",
                {"model": "qwen", "prompt": f"prompt {i}", "max_tokens": 120, "ignore_eos": True},
            )
        truth = sim.json("/sim/ground_truth")
        assert sim.stop() == 0
        return truth, sim.text()

    with ThreadPoolExecutor(3) as pool:
        (broken, log), (again, _), (healthy, _) = pool.map(
            run, [BROKEN, BROKEN, DFLASH], ["1", "1", "1"], ["0,1", "2,3", "4,5"]
        )
    totals = broken["totals"]
    assert totals["acceptance_length"] < 1.15
    assert totals["per_position_acceptance"][0] < 0.15
    assert broken["drafter_fit"]["ok"] is False
    speed = broken["speed"]
    decode = [r["decode_tok_s"] for r in broken["requests"]]
    assert all(15 * speed < d < 22 * speed for d in decode), decode  # ~18 tok/s in model time
    serving = log.split("[shutdown]")[0]  # vLLM 0.32 warns at every SIGTERM, not before
    assert "ERROR" not in serving and "WARNING" not in serving  # silently

    assert [r["chunk_tokens"] for r in again["requests"]] == [
        r["chunk_tokens"] for r in broken["requests"]
    ]
    assert healthy["totals"]["acceptance_length"] > 4
    assert min(r["decode_tok_s"] for r in healthy["requests"]) > 4 * max(decode)


STARTUP_FAILURES = [
    (
        ["vllm", "serve", "Qwen/Qwen3.6-27B", "--port", "{port}"],
        {},
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
    ),  # 27B bf16 does not fit one 48 GB GPU
    (
        ["vllm", "serve", "Qwen/Qwen3.6-27B", "--port", "{port}", "-tp", "2"],
        {"ORCH_SIM_FAIL": "oom"},
        "torch.OutOfMemoryError: CUDA out of memory.",
    ),
    (
        [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Qwen/Qwen3.6-27B",
            "--port",
            "{port}",
        ],
        {},
        "torch.OutOfMemoryError: CUDA out of memory.",
    ),
    (
        ["vllm", "serve", "Qwen/Qwen3.6-27B", "--port", "{port}", "-tp", "2"],
        {"ORCH_SIM_FAIL": "nccl"},
        "NCCL error",
    ),
    (
        SGLANG_TP2,
        {"ORCH_SIM_FAIL": "memory"},
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    (
        ["vllm", "serve", "Qwen/Qwen3.6-27B", "--port", "{port}", "-tp", "4"],
        {},
        "please set tensor_parallel_size (4) to less than max local gpu count (2)",
    ),
    (
        ["vllm", "serve", "Qwen/Qwen9-1T", "--port", "{port}"],
        {},
        "huggingface_hub.errors.RepositoryNotFoundError",
    ),
    (
        [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Qwen/Qwen9-1T",
            "--port",
            "{port}",
        ],
        {},
        "OSError: Qwen/Qwen9-1T is not a local folder and is not a valid model identifier",
    ),
    (
        [
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--port",
            "{port}",
            "-sc",
            '{"method": "mtp", "num_speculative_tokens": 3}',
        ],
        {},
        "Speculative method 'mtp' needs MTP layers",
    ),
    (
        [
            "vllm",
            "serve",
            "Qwen/Qwen3.6-27B",
            "--port",
            "{port}",
            "-tp",
            "2",
            "-sc",
            '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 16}',
        ],
        {},
        "num_speculative_tokens (16) must be at most block_size - 1 (15)",
    ),
    (
        [
            "vllm",
            "serve",
            "Qwen/Qwen3.6-27B",
            "--port",
            "{port}",
            "-tp",
            "2",
            "-sc",
            '{"method": "mtp", "num_speculative_tokens": 0}',
        ],
        {},
        "Expected num_speculative_tokens to be greater than zero (0).",
    ),
    (
        [
            *SGLANG_TP2,
            "--speculative-algorithm",
            "DFLASH",
        ],
        {},
        "requires --speculative-draft-model-path",
    ),
]


def test_startup_failures_exit_1_with_the_engines_error(start_sim, sim_box: Sandbox) -> None:
    """All cases at once (each is a separate process): what each engine prints, and exit 1."""
    sims = []
    for argv, env, expected in STARTUP_FAILURES:
        port = str(free_port())
        sims.append((start_sim([a.replace("{port}", port) for a in argv], env), expected))
    for sim, expected in sims:
        assert sim.wait_exit() == 1, sim.text()
        assert expected in sim.text()
        assert not (sim_box.state_dir / f"gpu-{sim.proc.pid}.json").exists()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_port_in_use(start_sim, engine: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sim = start_sim(vllm_argv(port) if engine == "vllm" else sglang_argv(port))
        assert sim.wait_exit() == 1
    expected = (
        "OSError: [Errno 98] Address already in use"
        if engine == "vllm"
        else f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): [errno 98] address already in use"
    )
    assert expected in sim.text()


def _smi_used(box: Sandbox) -> list[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        env=box.env(),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [int(x) for x in out.split()]


def test_gpu_memory_is_held_while_running_and_released_on_stop(start_sim, sim_box: Sandbox) -> None:
    sim = start_sim(
        vllm_argv(free_port(), None, "--gpu-memory-utilization", "0.9"), {"ORCH_SIM_LOAD_S": "1.0"}
    )
    deadline = time.monotonic() + 10
    while _smi_used(sim_box) == [1, 1] and time.monotonic() < deadline:
        time.sleep(0.05)
    loading = _smi_used(sim_box)
    assert 25_000 < loading[0] == loading[1] < 30_000  # weights of a 27B model over two GPUs
    with pytest.raises(OSError):
        call("GET", sim.url + "/health")  # vLLM listens only once it is ready
    sim.wait_ready()
    assert _smi_used(sim_box) == [int(0.9 * 49140 * 1024) // 1024 + 1] * 2
    apps = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        env=sim_box.env(),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert apps.splitlines() == [f"{sim.proc.pid}, {int(0.9 * 49140 * 1024) // 1024}"] * 2
    # a second engine on the same GPUs cannot get its memory
    other = start_sim(vllm_argv(free_port()))
    assert other.wait_exit() == 1
    assert (
        "Free memory on device cuda:0" in other.text()
        and "is less than desired GPU memory utilization (0.9" in other.text()
    )
    assert sim.stop() == 0
    assert _smi_used(sim_box) == [1, 1]
    # killed without a chance to clean up: its state file is stale and no longer counts
    killed = start_sim(vllm_argv(free_port()))
    killed.wait_ready()
    killed.proc.kill()
    killed.wait_exit()
    assert _smi_used(sim_box) == [1, 1]


def test_crash_after_ready(start_sim) -> None:
    sim = start_sim(vllm_argv(free_port()), {"ORCH_SIM_FAIL": "crash_after:0.3"})
    sim.wait_ready()
    assert sim.wait_exit() == 1
    assert "EngineDeadError" in sim.text()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_sigterm_aborts_open_streams_and_exits_at_once(start_sim, engine: str) -> None:
    """SIGTERM mid-stream, as vLLM's default shutdown (mode=abort) does it: the open stream
    ends with finish_reason "abort" and [DONE], and the process exits 0 long before orch's
    stop grace (30 s) or aiohttp's 60 s wait for request handlers."""
    from orchestrator.remote.wire import StopSpec
    from orchestrator.sim.server import SHUTDOWN_S

    port = free_port()
    sim = start_sim(
        vllm_argv(port) if engine == "vllm" else sglang_argv(port), {"ORCH_SIM_SPEED": "1"}
    )
    sim.wait_ready()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {
        "model": "qwen",
        "prompt": "hello",
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
    }
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.readline()
    assert first.startswith(b"data: {"), first  # tokens are flowing
    sent = time.monotonic()
    sim.proc.send_signal(signal.SIGTERM)
    rest = [line.strip()[6:].decode() for line in resp.read().splitlines() if line.strip()]
    code = sim.wait_exit(timeout=StopSpec.timeout_s)
    took = time.monotonic() - sent
    conn.close()
    assert code == 0 and took < SHUTDOWN_S + 3, f"exited {code} after {took:.1f} s"
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["choices"][0]["finish_reason"] == "abort"
    if engine == "vllm":  # vLLM 0.32's words, and no "Finished server process" after them
        assert "EngineCore: aborting in-flight requests count=1" in sim.text()
        assert sim.text().endswith("INFO:     Application shutdown complete.\n")
    else:
        assert f"Finished server process [{sim.proc.pid}]" in sim.text()
