"""The simulator's vLLM mode held to real vLLM 0.32 output (tests/fixtures/vllm_cpu/).

One simulated server, started as orch starts vLLM, serves streamed load with n-gram
speculation, two refused requests, a /metrics scrape and a stream cut by SIGTERM; its log,
scrape, streams and error bodies must match the real engine's except for the differences
named in ``vllm_fidelity.ALLOWED``. The last tests feed the comparisons altered input and show
that each one reports the change.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import FAST, SimProc, call, free_port
from vllm_fidelity import (
    ALLOWED,
    FIXTURES,
    KINDS,
    Absent,
    Renamed,
    as_real,
    error_differences,
    line_shape,
    metric_differences,
    shape_differences,
    shapes_by_kind,
    sse_differences,
    sse_events,
    unused_allowances,
    vllm_families,
)

from orchestrator.sim.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
MODEL = "Qwen/Qwen3-8B"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
PROMPT = "the cat sat on the mat and the cat sat on the mat and the cat sat"
# a fixed 4 ms decode step: the long stream is still running when SIGTERM comes
ENV = {**FAST, "ORCH_SIM_STEP_MS": "4"}
REAL_LOGS = sorted(FIXTURES.glob("*.log"))
ERRORS: dict[str, Any] = json.loads((FIXTURES / "errors.json").read_text())


@dataclass
class Observed:
    """What a client and a log reader saw of one simulated vLLM server."""

    log: list[str] = field(default_factory=list)
    metrics: str = ""
    stream: list[Any] = field(default_factory=list)  # max_tokens 16, include_usage
    aborted: list[Any] = field(default_factory=list)  # cut by SIGTERM
    errors: dict[str, tuple[int, Any]] = field(default_factory=dict)
    exit_code: int | None = None


def _open_stream(port: int, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = json.dumps({"model": MODEL, "prompt": PROMPT, "stream": True, **body})
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    return conn, resp


def _stream(port: int, body: dict[str, Any]) -> list[Any]:
    conn, resp = _open_stream(port, body)
    try:
        return sse_events(resp.read().decode())
    finally:
        conn.close()


def _wait_for(sim: SimProc, *marks: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(mark in sim.text() for mark in marks):
        assert time.monotonic() < deadline, f"no {marks} in the log:\n{sim.text()}"
        time.sleep(0.05)


def _load_and_scrape(sim: SimProc, seen: Observed) -> None:
    """Streamed load with usage, the recorded errors, the stat lines, one /metrics scrape."""
    assert sim.port is not None
    body = {"max_tokens": 64, "ignore_eos": True, "stream_options": {"include_usage": True}}
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda _: _stream(sim.port, body), range(8)))
    assert all(events[-1] == "[DONE]" for events in done)
    seen.stream = _stream(sim.port, {**body, "max_tokens": 16})
    for name, case in ERRORS.items():
        status, raw = call("POST", sim.url + "/v1/completions", {"model": MODEL, **case["request"]})
        seen.errors[name] = (status, json.loads(raw))
    _wait_for(sim, "Engine 000:", "SpecDecoding metrics:")
    status, raw = call("GET", sim.url + "/metrics")
    assert status == 200
    seen.metrics = raw.decode()


def _abort_by_sigterm(sim: SimProc, seen: Observed) -> None:
    assert sim.port is not None
    conn, resp = _open_stream(sim.port, {"max_tokens": 480, "ignore_eos": True})
    first = resp.readline()
    assert first.startswith(b"data: {"), first
    sim.proc.send_signal(signal.SIGTERM)
    seen.aborted = sse_events((first + resp.read()).decode())
    conn.close()
    seen.exit_code = sim.wait_exit()


@pytest.fixture(scope="module")
def observed(sim_box: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    port = free_port()
    argv = ["vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "512", "--speculative-config", NGRAM, "--enable-log-requests"]  # fmt: skip
    sim = SimProc(sim_box, argv, ENV, tmp_path_factory.mktemp("fidelity") / "server.log")
    try:
        sim.wait_ready()
        seen = Observed()
        _load_and_scrape(sim, seen)
        _abort_by_sigterm(sim, seen)
        seen.log = sim.text().splitlines()
        yield seen
    finally:
        if sim.proc.poll() is None:
            sim.proc.kill()
            sim.proc.wait()


def _real_shapes() -> dict[str, set[str]]:
    lines: list[str] = []
    for path in REAL_LOGS:
        lines += path.read_text(encoding="utf-8").splitlines()
    return shapes_by_kind(lines)


def _real_families() -> dict:
    texts = [(FIXTURES / name).read_text() for name in ("metrics_plain.txt", "metrics_ngram.txt")]
    return vllm_families(*texts)


def names_orch_reads() -> set[str]:
    """Every ``vllm:*`` name written in orch's own code (the simulator's aside)."""
    found: set[str] = set()
    for path in (ROOT / "orchestrator").rglob("*.py"):
        if path.relative_to(ROOT / "orchestrator").parts[0] != "sim":
            found |= set(re.findall(r"[\"'](vllm:[a-z_]+)[\"']", path.read_text()))
    return found


# -- the simulator against the real engine -----------------------------------------------------


def test_the_simulators_log_lines_have_the_real_shapes(observed: Observed) -> None:
    assert shape_differences(_real_shapes(), shapes_by_kind(observed.log)) == []
    assert observed.exit_code == 0


def test_the_simulators_metrics_are_the_real_families(observed: Observed) -> None:
    read = names_orch_reads()
    assert {"vllm:generation_tokens_total", "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"} <= read  # fmt: skip
    sim = vllm_families(observed.metrics)
    assert metric_differences(_real_families(), sim, read_by_orch=read) == []


def test_the_simulators_streams_have_the_real_chunks(observed: Observed) -> None:
    real = sse_events((FIXTURES / "normal_length16.sse").read_text())
    assert sse_differences(real, observed.stream) == []
    assert observed.stream[-2]["usage"]["completion_tokens"] == 16
    aborted = sse_events((FIXTURES / "sigterm_abort.sse").read_text())
    assert sse_differences(aborted, observed.aborted) == []
    assert observed.aborted[-2]["choices"][0]["finish_reason"] == "abort"


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_the_simulators_error_bodies_are_the_real_ones(observed: Observed, name: str) -> None:
    status, body = observed.errors[name]
    assert error_differences(ERRORS[name], status, body) == []


def test_every_allowed_difference_is_still_needed(observed: Observed) -> None:
    sim_shapes = shapes_by_kind(observed.log)
    sim = vllm_families(observed.metrics)
    assert unused_allowances(sim_shapes, _real_families(), sim) == []
    assert all(entry.reason for entry in ALLOWED.values())


# -- the fixtures and the comparisons themselves -----------------------------------------------


SPEC_SHAPE = (
    "(APIServer) INFO SpecDecoding metrics: Mean acceptance length: #, Accepted throughput: "
    "# tokens/s, Drafted throughput: # tokens/s, Accepted: # tokens, Drafted: # tokens, "
    "Per-position acceptance rate: #, …, Avg Draft acceptance rate: #%"
)


def test_the_real_logs_hold_every_kind_of_line() -> None:
    shapes = _real_shapes()
    assert [kind for kind in KINDS if not shapes[kind]] == []
    assert shapes["spec_decode"] == {SPEC_SHAPE}


def test_the_check_bites_on_the_simulators_own_output(observed: Observed) -> None:
    """The simulator's real output, one word of a stat line and one metric name changed."""
    renamed = [line.replace("Avg generation throughput", "Avg decode throughput")
               for line in observed.log]  # fmt: skip
    problems = shape_differences(_real_shapes(), shapes_by_kind(renamed))
    assert problems and all(p.startswith("engine_stats: vLLM 0.32 never prints") for p in problems)
    scrape = observed.metrics.replace("vllm:spec_decode_num_drafts", "vllm:spec_decode_drafts")
    problems = metric_differences(
        _real_families(), vllm_families(scrape), read_by_orch=names_orch_reads()
    )
    assert "vllm:spec_decode_drafts: the simulator exposes it, vLLM 0.32 does not" in problems
    assert (
        "vllm:spec_decode_num_drafts_total: orch reads it, the simulator does not expose it"
        in problems
    )


@pytest.mark.parametrize(
    ("line", "shape"),
    [
        ("(APIServer pid=1675) INFO 12-04 14:25:51 [loggers.py:335] Engine 000: Avg prompt "
         "throughput: 6.0 tokens/s, Running: 4 reqs, CPU KV cache usage: 80.0%",
         "(APIServer) INFO Engine #: Avg prompt throughput: # tokens/s, Running: # reqs, "
         "CPU KV cache usage: #%"),
        ('INFO:     127.0.0.1:41912 - "POST /v1/completions HTTP/1.1" 404 Not Found',
         'INFO:     #:# - "POST <path> HTTP/#" # Not Found'),
        ("(APIServer pid=29420) INFO 12-04 13:58:11 [async_llm.py:578] Added request "
         "cmpl-bcc7357cb5143e32-0-b55b7d0d.",
         "(APIServer) INFO Added request cmpl-<id>-#-<id>."),
        ("(EngineCore pid=1941) INFO 12-04 14:25:40 [kv_cache_utils.py:2327] CPU KV cache size: "
         "2,048 tokens, Maximum concurrency for 512 tokens per request: 4.00x",
         "(EngineCore) INFO CPU KV cache size: # tokens, Maximum concurrency for # tokens per "
         "request: #x"),
        ("(APIServer pid=7) INFO 12-04 13:53:41 [api_utils.py:286] non-default args: {'port': 1}",
         "(APIServer) INFO non-default args: {…}"),
    ],
)  # fmt: skip
def test_a_line_shape_keeps_the_words_and_drops_what_varies(line: str, shape: str) -> None:
    assert line_shape(line) == shape


def _one(kind: str, shape: str) -> dict[str, set[str]]:
    return {k: ({shape} if k == kind else set()) for k in KINDS}


STATS = ("(APIServer) INFO Engine #: Avg prompt throughput: # tokens/s, Avg generation throughput: "
         "# tokens/s, Running: # reqs, Waiting: # reqs, CPU KV cache usage: #%, Prefix cache hit "
         "rate: #%")  # fmt: skip


@pytest.mark.parametrize(
    ("sim_shape", "reported"),
    [
        (STATS.replace("CPU", "GPU"), False),  # the allowed rename
        (STATS.replace("CPU", "TPU"), True),
        (STATS.replace("Avg generation throughput", "Avg gen throughput"), True),
        (STATS.replace(", Prefix cache hit rate: #%", ""), True),
        ("(APIServer) INFO Engine #: Avg prompt throughput: # tokens/s", True),
    ],
)
def test_a_changed_line_shape_is_reported(sim_shape: str, reported: bool) -> None:
    problems = shape_differences(_one("engine_stats", STATS), _one("engine_stats", sim_shape),
                                 required=("engine_stats",))  # fmt: skip
    assert bool(problems) is reported, problems
    if reported:
        assert problems[0].startswith(f"engine_stats: vLLM 0.32 never prints {sim_shape!r}")


def test_a_prefixed_uvicorn_line_and_a_missing_kind_are_reported() -> None:
    real = _one("uvicorn", "INFO:     Application startup complete.")
    sim = _one("uvicorn", "(APIServer pid=#) INFO:     Application startup complete.")
    assert shape_differences(real, sim, required=("uvicorn", "spec_decode")) == [
        "spec_decode: the simulator printed no such line",
        "uvicorn: vLLM 0.32 never prints '(APIServer pid=#) INFO:     Application startup "
        "complete.'; closest real line: 'INFO:     Application startup complete.'",
    ]


def test_an_allowance_is_a_rename_of_the_simulators_words_only() -> None:
    assert as_real("(EngineCore_DP#) INFO GPU KV cache size: # tokens") == (
        "(EngineCore) INFO CPU KV cache size: # tokens"
    )
    table = {"x": Renamed("GPU", "CPU", "why"), "vllm:nope": Absent("why")}
    assert unused_allowances({"startup": {"GPU"}}, {}, {}, table) == [
        "vllm:nope: not a family vLLM 0.32 has and the simulator lacks"
    ]


def _renamed(text: str, old: str, new: str) -> dict:
    return vllm_families(text.replace(old, new))


def test_a_renamed_or_relabelled_metric_is_reported() -> None:
    real_text = (FIXTURES / "metrics_ngram.txt").read_text()
    real = vllm_families(real_text)
    assert metric_differences(real, real, read_by_orch=["vllm:generation_tokens_total"]) == []
    renamed = _renamed(real_text, "vllm:generation_tokens_", "vllm:generated_tokens_")
    problems = metric_differences(real, renamed, read_by_orch=["vllm:generation_tokens_total"])
    assert "vllm:generated_tokens: the simulator exposes it, vLLM 0.32 does not" in problems
    assert "vllm:generation_tokens: vLLM 0.32 exposes it, the simulator does not" in problems
    assert (
        "vllm:generation_tokens_total: orch reads it, the simulator does not expose it" in problems
    )
    relabelled = _renamed(
        real_text, 'engine="0",finished_reason=', 'engine_id="0",finished_reason='
    )
    assert (
        "vllm:request_success_total: labels ['engine_id', 'finished_reason', 'model_name'], "
        "vLLM 0.32 has ['engine', 'finished_reason', 'model_name']"
    ) in metric_differences(real, relabelled)


def test_changed_buckets_help_and_label_values_are_reported() -> None:
    real_text = (FIXTURES / "metrics_plain.txt").read_text()
    real = vllm_families(real_text)
    fewer = _renamed(real_text, 'finished_reason="repetition"', 'finished_reason="stop"')
    assert (
        "vllm:request_success: finished_reason values ['abort', 'error', 'length', 'stop'], "
        "vLLM 0.32 has ['abort', 'error', 'length', 'repetition', 'stop']"
    ) in metric_differences(real, fewer)
    assert any(
        "buckets" in p
        for p in metric_differences(real, _renamed(real_text, 'le="500.0"', 'le="1000.0"'))
    )
    assert any("help" in p for p in metric_differences(real, _renamed(real_text, "Number of prefill tokens processed.", "Prompt tokens.")))  # fmt: skip


def test_a_chunk_without_a_real_key_and_a_stream_without_its_end_are_reported() -> None:
    real = sse_events((FIXTURES / "normal_length16.sse").read_text())
    assert sse_differences(real, real) == []
    lacking = [{**e, "choices": [{k: v for k, v in e["choices"][0].items() if k != "token_ids"}]}
               if isinstance(e, dict) and e["choices"] else e for e in real]  # fmt: skip
    problems = sse_differences(real, lacking)
    assert len(problems) == 2 and all("token_ids" in p for p in problems)
    aborted = sse_events((FIXTURES / "sigterm_abort.sse").read_text())
    hung = sse_events((FIXTURES / "sigterm_hung.sse").read_text())
    problems = sse_differences(aborted, hung)
    assert problems[-1] == (
        "the stream ends [('token', None), ('token', None), ('token', None)], vLLM 0.32's ends "
        "[('token', None), ('finish', 'abort'), ('done', None)]"
    )


def test_a_changed_error_body_is_reported() -> None:
    case = ERRORS["unknown_model"]
    body = {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError",
                      "param": "model", "code": 404}}  # fmt: skip
    assert error_differences(case, 404, body) == []
    assert error_differences(case, 400, body) == ["status 400, vLLM 0.32 answers 404"]
    flat = {"object": "error", **body["error"]}
    assert error_differences(case, 404, flat) == [
        f"body {flat!r} is not vLLM's {{'error': {{...}}}} object"
    ]
    other = {"error": {**body["error"], "type": "NotFound", "message": "no such model"}}
    assert error_differences(case, 404, other) == [
        "type 'NotFound', vLLM 0.32 has 'NotFoundError'",
        "message 'no such model' does not start with 'The model `nope` does not exist.'",
    ]
