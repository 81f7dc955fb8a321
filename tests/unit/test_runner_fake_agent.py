"""The runner's failure, retry and resume paths, on the in-memory FakeAgent.

Everything but the agent is the real code (Server, its registry, execute_run); the agent's
answers are scripted, so each path runs in milliseconds. tests/integration/test_lifecycle_ssh.py
runs the same paths against the real agent over real SSH.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.client import AgentClient
from orchestrator.agent.fake import (
    FAKE_HOST,
    FakeAgent,
    FakeLog,
    Stream,
    agent_error,
    dropped,
    http_answer,
    launch_result,
    status_of,
)
from orchestrator.config import RunSpec
from orchestrator.engines.failures import KV_CACHE_MEMORY, OOM
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import AgentError, EngineError, HostError, HostUnreachable
from orchestrator.loadgen.prompts import load_prompts
from orchestrator.remote.wire import (
    Chunk,
    ErrorKind,
    LaunchResult,
    LaunchSpec,
    LoadgenResult,
    PhaseEvent,
    RequestFailure,
    RequestRecord,
    StatusResult,
    StopOutcome,
    StopResult,
    StopSpec,
    TailSpec,
    Wire,
)
from orchestrator.runner import server as server_mod
from orchestrator.runner.execute import execute_run
from orchestrator.runner.progress import PhaseChanged, RecordingObserver, RunPhase
from orchestrator.runner.server import LOG_TAIL_LINES, Server, ServerRegistry
from orchestrator.runner.state import RunJob

MODEL = "Qwen/Qwen3.6-27B"
LOG = [
    "INFO vLLM 0.33.0",
    "INFO loading weights ünï",
    "INFO graph capture",
    "INFO ready ✓",
    "INFO: Application startup complete.",
]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-off and poll intervals are the runner's business, not these tests'."""
    for name in ("STOP_RETRY_S", "RECONNECT_BACKOFF_S", "DIED_POLL_S"):
        monkeypatch.setattr(server_mod, name, 0.0)


def make_run(**fields: Any) -> RunSpec:
    data = {
        "name": "r1",
        "engine": "vllm",
        "model": MODEL,
        "tensor_parallel": 1,
        "workload": {"prompts": "builtin:math", "num_prompts": 2, "warmup": 0},
        **fields,
    }
    return RunSpec.model_validate(data)


def launched(spec: Wire) -> LaunchResult:
    assert isinstance(spec, LaunchSpec)
    return launch_result(spec)


def stopped(run_id: str = "r1-id") -> StopResult:
    return StopResult(
        stopped=[
            StopOutcome(
                run_id=run_id,
                pid=4242,
                was_running=True,
                signals=["SIGTERM"],
                killed_pids=[4242],
                remaining_pids=[],
                gpu_pids=[4242],
                gpu_released=True,
                exit=None,
                waited_s=0.1,
            )
        ]
    )


def started_agent() -> FakeAgent:
    return FakeAgent().on("launch", launched).always("stop", stopped())


async def start(agent: FakeAgent, registry: ServerRegistry, **kw: Any) -> Server:
    return await Server.start(
        agent,
        make_run(),
        FAKE_HOST,
        run_id="r1-id",
        port=8000,
        registry=registry,
        reconnect=agent.reconnect,
        **kw,
    )


def test_the_fake_is_an_agent_client() -> None:
    client: AgentClient = FakeAgent()  # mypy checks the Protocol; this checks it at run time too
    assert asyncio.run(client.workdir()) == FAKE_HOST.workdir


def test_tail_resumes_from_the_byte_offset_after_dropped_connections() -> None:
    log = FakeLog(LOG, exited=True, drops=[2, 1])  # cut after 2 lines, then after 1 more
    agent = started_agent().always("tail", log)

    async def scenario() -> tuple[list[Any], Server]:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            return [line async for line in server.tail()], server

    batches, server = asyncio.run(scenario())
    assert [text for batch in batches for text in batch.lines] == LOG  # each line once, in order
    assert batches == log.batches
    offsets = [spec.offset for spec in agent.specs("tail") if isinstance(spec, TailSpec)]
    assert offsets == [0, log.batches[2].offset, log.batches[3].offset]
    assert agent.reconnects == 2
    assert server.tail_offset == log.size


def test_tail_resumes_after_the_last_whole_batch_it_received() -> None:
    """Batches of 3 lines, the connection cut after the first batch, then after the next one:
    each call starts just past the last batch received, so no line comes twice or never."""
    texts = [f"line {i} é" for i in range(8)]
    log = FakeLog(texts, exited=True, drops=[1, 1], per_event=3)
    agent = started_agent().always("tail", log)

    async def scenario() -> list[Any]:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            return [batch async for batch in server.tail()]

    batches = asyncio.run(scenario())
    assert [batch.lines for batch in batches] == [texts[0:3], texts[3:6], texts[6:8]]
    offsets = [spec.offset for spec in agent.specs("tail") if isinstance(spec, TailSpec)]
    sizes = [len(text.encode()) + 1 for text in texts]
    assert offsets == [0, sum(sizes[:3]), sum(sizes[:6])] == [b.offset for b in batches]
    assert batches[-1].next == log.size == sum(sizes)


def test_tail_gives_up_after_max_reconnects() -> None:
    agent = started_agent().always("tail", FakeLog(LOG, drops=[0] * 10))

    async def scenario() -> None:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            server.max_reconnects = 2
            async for _ in server.tail():
                pass

    with pytest.raises(HostUnreachable, match="connection lost"):
        asyncio.run(scenario())
    assert len(agent.specs("tail")) == 3 and agent.reconnects == 2


def test_stop_retries_not_found_after_an_interrupted_launch() -> None:
    """The launch's connection dropped: the engine may be starting while server.json is not yet
    written, so the registry's stop asks again until the host knows the run."""
    not_found = agent_error(
        ErrorKind.NOT_FOUND, "no server was launched for run r1-id", verb="stop"
    )
    agent = FakeAgent().on("launch", dropped()).on("stop", not_found, not_found, stopped())

    async def scenario() -> ServerRegistry:
        async with ServerRegistry() as registry:
            with pytest.raises(HostError):
                await start(agent, registry)
            assert [s.launch_sent and not s.stopped for s in registry.running] == [True]
            return registry

    registry = asyncio.run(scenario())
    assert registry.running == []
    assert [c.verb for c in agent.calls] == ["launch", "stop", "stop", "stop"]
    assert all(isinstance(s, StopSpec) and s.run_id == "r1-id" for s in agent.specs("stop"))


def test_stop_after_a_known_launch_asks_once_and_other_kinds_are_raised() -> None:
    agent = started_agent().on("stop", agent_error(ErrorKind.NOT_FOUND, "gone", verb="stop"))

    async def scenario() -> StopResult:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            return await server.stop()

    assert asyncio.run(scenario()) == StopResult(stopped=[])  # already gone: nothing to stop
    assert len(agent.specs("stop")) == 1
    failing = started_agent().on(
        "stop", agent_error(ErrorKind.STOP_FAILED, "survived", verb="stop")
    )

    async def failing_stop() -> None:
        server = await start(failing, ServerRegistry())
        await server.stop()

    with pytest.raises(AgentError) as info:
        asyncio.run(failing_stop())
    assert info.value.kind is ErrorKind.STOP_FAILED


def test_a_launch_refused_with_port_in_use_starts_nothing() -> None:
    message = "port 8000 on 127.0.0.1 is already in use by pid 77 (python3 -m http.server)"
    agent = FakeAgent().on("launch", agent_error(ErrorKind.PORT_IN_USE, message))

    async def scenario() -> ServerRegistry:
        async with ServerRegistry() as registry:
            with pytest.raises(AgentError) as info:
                await start(agent, registry)
            assert info.value.kind is ErrorKind.PORT_IN_USE
            assert info.value.message == f"launch: {message}"
            return registry

    registry = asyncio.run(scenario())
    assert registry.running == []
    assert [c.verb for c in agent.calls] == ["launch"]  # refused: no stop was sent


def test_readiness_fails_at_once_when_the_engine_dies_with_cause_and_log_tail() -> None:
    death = [*LOG[:3], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    log = FakeLog(death, exited=True)
    agent = (
        started_agent()
        .on(
            "status",
            status_of("r1-id", alive=False),  # dead, exit code not written yet
            status_of("r1-id", alive=False, returncode=1),
        )
        .always("status", status_of("r1-id", alive=False, returncode=1, log_size=log.size))
        .always("tail", log)
    )

    async def scenario() -> EngineError:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            with pytest.raises(EngineError) as info:
                await server.wait_ready(timeout=600, poll_interval=0)
            return info.value

    error = asyncio.run(scenario())
    assert error.cause == OOM and error.exit_code == 1
    assert error.log_tail == death
    assert str(error).startswith(
        "fake-gpu: vllm server of run 'r1' died during start-up: CUDA out of memory"
    )
    assert str(error).endswith("(exit code 1)")
    assert "http" not in [c.verb for c in agent.calls]  # dead: no readiness request was made


def test_readiness_waits_for_health_then_the_model_list() -> None:
    models = json.dumps({"data": [{"id": MODEL}]})
    agent = (
        started_agent()
        .always("status", status_of("r1-id", alive=True))
        .on(
            "http",
            http_answer(None, error="connection refused"),
            http_answer(503),
            http_answer(200),
            http_answer(200, json.dumps({"data": []})),
            http_answer(200),
            http_answer(200, models),
        )
    )
    phases: list[str] = []

    async def scenario() -> None:
        server = await start(agent, ServerRegistry())
        await server.wait_ready(
            timeout=600, poll_interval=0, on_progress=lambda phase, _s: phases.append(phase)
        )

    asyncio.run(scenario())
    assert phases == ["starting", "loading (health 503)", "health ok, waiting for the model list"]


def test_readiness_polls_quickly_at_first_and_asks_once_per_poll_when_the_port_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine ready at once is seen at once; one already on its port is not asked again."""
    models = json.dumps({"data": [{"id": MODEL}]})
    on_port = status_of("r1-id", alive=True)
    on_port = StatusResult(servers=[dataclasses.replace(on_port.servers[0], port_owner="launched")])
    refused = http_answer(None, error="connection refused")
    agent = (
        started_agent()
        .always("status", on_port)
        .on("http", *[refused] * 5, http_answer(200), http_answer(200, models))
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(server_mod.asyncio, "sleep", sleep)

    async def scenario() -> None:
        server = await start(agent, ServerRegistry())
        agent.calls.clear()
        await server.wait_ready(timeout=600, poll_interval=1.0)

    asyncio.run(scenario())
    assert slept == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert [c.verb for c in agent.calls] == ["status", "http"] * 5 + ["status", "http", "http"]


class _Enough(Exception):
    pass


def test_readiness_polls_for_hours_at_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """2**polls must not overflow: a slow engine is polled at the interval however long."""
    agent = (
        started_agent()
        .always("status", status_of("r1-id", alive=True))
        .always("http", http_answer(None, error="connection refused"))
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 1100:
            raise _Enough

    monkeypatch.setattr(server_mod.asyncio, "sleep", sleep)

    async def scenario() -> None:
        server = await start(agent, ServerRegistry())
        await server.wait_ready(timeout=1e9, poll_interval=1.0)

    with pytest.raises(_Enough):
        asyncio.run(scenario())
    assert slept[:4] == [0.1, 0.2, 0.4, 0.8] and set(slept[4:]) == {1.0}


def job_for(tmp_path: Path, run: RunSpec) -> RunJob:
    plan = PlannedLaunch(
        run=run,
        host=FAKE_HOST,
        argv=["vllm", "serve", MODEL],
        env_masked=dict(run.env),
        port=8000,
        env=dict(run.env),
    )
    return RunJob(
        key="r1@fake",
        order=0,
        plan=plan,
        run_dir=tmp_path / "r1",
        run_id="r1-id",
        prompts=load_prompts(run.workload, base_dir="."),
    )


def test_execute_run_fails_the_run_when_the_load_generator_ends_without_a_result(
    tmp_path: Path,
) -> None:
    run = make_run()
    record = RequestRecord(index=0, warmup=False, start=0.0, start_wall=1.7e9, end=0.5, status=200)
    models = json.dumps({"data": [{"id": MODEL}]})
    agent = (
        started_agent()
        .always("status", status_of("r1-id", alive=True))
        .always("http", http_answer(200, models))
        .always("tail", FakeLog(LOG, exited=False))
        .on("loadgen", Stream([PhaseEvent(phase="measure"), record]))
    )
    observer = RecordingObserver()
    job = job_for(tmp_path, run)

    async def scenario() -> Any:
        async with ServerRegistry() as registry:
            return await execute_run(
                job, agent=agent, reconnect=agent.reconnect, registry=registry, observer=observer
            )

    [result] = asyncio.run(scenario())
    assert result.error is not None
    assert result.error.type == "HostError"
    assert result.error.message == "fake-gpu: the load generator ended without a result"
    phases = observer.phases(job.key)
    assert phases[:2] == [RunPhase.LAUNCHING, RunPhase.LOADING]
    assert phases[-4:] == [RunPhase.WARM_UP, RunPhase.MEASURING, RunPhase.STOPPING, RunPhase.FAILED]
    failed = observer.events[-1]
    assert failed == PhaseChanged(
        job.key, RunPhase.FAILED, reason="the load generator ended without a result"
    )
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert "the load generator ended without a result" in json.dumps(summary)
    assert [c.verb for c in agent.calls].count("stop") == 1  # the server was stopped anyway
    requests = (job.run_dir / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in requests] == [0]  # what arrived is kept


def measured(index: int) -> RequestRecord:
    return RequestRecord(
        index=index,
        warmup=False,
        start=0.0,
        start_wall=1.7e9,
        end=0.5,
        status=200,
        ttft=0.1,
        e2el=0.5,
        chunks=(Chunk(0.1, 1), Chunk(0.5, 1)),
        output_tokens=2,
    )


def drop_agent(*loadgens: Stream) -> FakeAgent:
    models = json.dumps({"data": [{"id": MODEL}]})
    return (
        started_agent()
        .always("status", status_of("r1-id", alive=True))
        .always("http", http_answer(200, models))
        .always("tail", FakeLog(LOG, exited=False))
        .on("loadgen", *loadgens)
    )


def run_job(
    tmp_path: Path, agent: FakeAgent, run: RunSpec | None = None
) -> tuple[Any, RunJob, RecordingObserver]:
    observer = RecordingObserver()
    job = job_for(tmp_path, run or make_run())

    async def scenario() -> Any:
        async with ServerRegistry() as registry:
            return await execute_run(
                job, agent=agent, reconnect=agent.reconnect, registry=registry, observer=observer
            )

    [result] = asyncio.run(scenario())
    return result, job, observer


def test_a_connection_dropped_while_measuring_measures_again_from_a_fresh_warm_up(
    tmp_path: Path,
) -> None:
    first = Stream([PhaseEvent(phase="measure"), measured(0), measured(1)], then=dropped())
    done = LoadgenResult(requests=2, completed=2, failed=0, duration_s=1.0, started_at=1.7e9)
    second = Stream([PhaseEvent(phase="measure"), measured(0), measured(1), done])
    agent = drop_agent(first, second)
    result, job, observer = run_job(tmp_path, agent)

    assert result.error is None, result.error
    assert result.requests.completed == 2
    assert len(agent.specs("loadgen")) == 2
    # the server was checked (after reconnecting) between the attempts, then measured again
    verbs = [c.verb for c in agent.calls]
    first_lg, second_lg = (i for i, v in enumerate(verbs) if v == "loadgen")
    assert "status" in verbs[first_lg:second_lg]
    assert agent.reconnects >= 1
    warning = (
        "the connection to fake-gpu dropped while measuring; the server kept running; measured "
        "again from a fresh warm-up (attempt 2; the first attempt's records are in "
        "requests.attempt-1.jsonl)"
    )
    assert [(w.kind, w.message) for w in result.warnings] == [("connection_dropped", warning)]
    aside = (job.run_dir / "requests.attempt-1.jsonl").read_text().splitlines()
    kept = (job.run_dir / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in aside] == [0, 1]
    assert [json.loads(line)["index"] for line in kept] == [0, 1]  # not 4 records: reset
    phases = observer.phases(job.key)
    assert phases[-6:] == [
        RunPhase.WARM_UP,
        RunPhase.MEASURING,
        RunPhase.WARM_UP,
        RunPhase.MEASURING,
        RunPhase.STOPPING,
        RunPhase.DONE,
    ]
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert [w["message"] for w in summary["warnings"]] == [warning]


def test_a_second_dropped_connection_fails_the_run(tmp_path: Path) -> None:
    cut = Stream([PhaseEvent(phase="measure"), measured(0)], then=dropped())
    agent = drop_agent(cut, cut)
    result, job, observer = run_job(tmp_path, agent)

    assert result.error is not None
    assert result.error.type == "HostUnreachable"
    assert "connection lost" in result.error.message
    assert len(agent.specs("loadgen")) == 2  # never a third attempt
    assert (job.run_dir / "requests.attempt-1.jsonl").exists()
    assert not (job.run_dir / "requests.attempt-2.jsonl").exists()
    assert observer.phases(job.key)[-1] == RunPhase.FAILED
    assert [c.verb for c in agent.calls].count("stop") == 1


def test_a_dropped_connection_with_the_engine_dead_fails_with_its_death(tmp_path: Path) -> None:
    cut = Stream([PhaseEvent(phase="measure"), measured(0)], then=dropped())
    agent = drop_agent(cut)
    # alive until the load generator ran; dead when asked after the drop
    agent.always(
        "status",
        lambda _spec: status_of(
            "r1-id",
            alive=not agent.specs("loadgen"),
            returncode=-9 if agent.specs("loadgen") else None,
        ),
    )
    result, job, _ = run_job(tmp_path, agent)

    assert result.error is not None
    assert result.error.type == "EngineError"
    assert "died while measuring" in result.error.message
    assert len(agent.specs("loadgen")) == 1  # not measured again against a dead server
    assert not (job.run_dir / "requests.attempt-1.jsonl").exists()


def read_together(index: int) -> RequestRecord:
    """A measured request whose chunks all came in one read: a saturated client's."""
    return dataclasses.replace(measured(index), chunks=(Chunk(0.5, 1), Chunk(0.5, 1)))


def loadgen_stream(*records: RequestRecord) -> Stream:
    done = LoadgenResult(
        requests=len(records), completed=len(records), failed=0, duration_s=1.0, started_at=1.7e9
    )
    return Stream([PhaseEvent(phase="measure"), *records, done])


def test_a_measurement_failed_only_for_a_saturated_client_is_measured_again(
    tmp_path: Path,
) -> None:
    agent = drop_agent(
        loadgen_stream(read_together(0), read_together(1)), loadgen_stream(measured(0), measured(1))
    )
    result, job, observer = run_job(tmp_path, agent)

    assert result.error is None, result.error
    assert result.verdict == "ok"
    first, second = agent.specs("loadgen")
    assert (first.cache_reset, second.cache_reset) == (None, None)
    # vLLM resets its prefix cache only in dev mode: the second attempt says it was not
    assert [w.kind for w in result.warnings] == ["measured_again", "cache_not_reset"]
    again = result.warnings[0]
    assert again.kind == "measured_again"
    assert again.message.startswith(
        "measured again: the first attempt failed (client saturated: 100.0% of token chunks"
    )
    assert again.message.endswith("its records are in requests.attempt-1.jsonl")
    assert again.details["reason"] == "client_saturated"
    aside = (job.run_dir / "requests.attempt-1.jsonl").read_text().splitlines()
    kept = (job.run_dir / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["chunks"] for line in aside] == [[[0.5, 1], [0.5, 1]]] * 2
    assert [json.loads(line)["chunks"] for line in kept] == [[[0.1, 1], [0.5, 1]]] * 2
    assert result.requests.client_lag is not None
    assert result.requests.client_lag.shared_read_pct == 0.0  # the figures are the second's
    assert observer.phases(job.key)[-1] == RunPhase.DONE
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert [w["kind"] for w in summary["warnings"]] == ["measured_again", "cache_not_reset"]


def test_the_second_attempt_starts_from_an_empty_prefix_cache(tmp_path: Path) -> None:
    agent = drop_agent(
        loadgen_stream(read_together(0), read_together(1)), loadgen_stream(measured(0), measured(1))
    )
    run = make_run(env={"VLLM_SERVER_DEV_MODE": "1"})
    result, _, _ = run_job(tmp_path, agent, run)

    first, second = agent.specs("loadgen")
    assert first.cache_reset is None  # the server's first measurement: nothing to reset
    assert second.cache_reset is not None and second.cache_reset.path == "/reset_prefix_cache"
    assert [w.kind for w in result.warnings] == ["measured_again"]


def test_a_second_saturated_attempt_fails_the_measurement(tmp_path: Path) -> None:
    saturated = loadgen_stream(read_together(0), read_together(1))
    agent = drop_agent(saturated, saturated, loadgen_stream(measured(0), measured(1)))
    result, job, observer = run_job(tmp_path, agent)

    assert result.error is not None
    assert result.error.kind == "client_saturated"
    assert len(agent.specs("loadgen")) == 2  # never a third attempt
    kinds = {w.kind for w in result.warnings}
    assert kinds == {"measured_again", "client_saturated", "cache_not_reset"}
    assert (job.run_dir / "requests.attempt-1.jsonl").exists()
    assert not (job.run_dir / "requests.attempt-2.jsonl").exists()
    assert observer.phases(job.key)[-1] == RunPhase.FAILED


def test_a_measurement_failed_for_its_requests_is_not_measured_again(tmp_path: Path) -> None:
    failed = dataclasses.replace(
        measured(1), status=500, error="boom", failure=RequestFailure.HTTP_STATUS
    )
    done = LoadgenResult(requests=2, completed=1, failed=1, duration_s=1.0, started_at=1.7e9)
    both = Stream([PhaseEvent(phase="measure"), read_together(0), failed, done])
    agent = drop_agent(both, loadgen_stream(measured(0)))
    result, job, _ = run_job(tmp_path, agent)

    assert result.error is not None  # a failed request and a saturated client
    assert {"requests_failed", "client_saturated"} <= {w.kind for w in result.warnings}
    assert len(agent.specs("loadgen")) == 1  # a failed request is the engine's: no retry
    assert not (job.run_dir / "requests.attempt-1.jsonl").exists()


def test_a_cause_above_a_long_traceback_is_still_named() -> None:
    """The real vLLM 0.32 prints its root cause, then a hundred lines of tracebacks from the
    EngineCore and the API server: the cause is read from far above the lines shown."""
    cause = (
        "ValueError: To serve at least one request with the model's max seq len (2048), "
        "(0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB)."
    )
    traceback = [f'  File "/venv/vllm/v1/engine/utils.py", line {n}, in launch' for n in range(90)]
    death = [*LOG[:3], cause, *traceback, "RuntimeError: Engine core initialization failed."]
    log = FakeLog(death, exited=True)
    agent = (
        started_agent()
        .always("status", status_of("r1-id", alive=False, returncode=1, log_size=log.size))
        .always("tail", log)
    )

    async def scenario() -> EngineError:
        async with ServerRegistry() as registry:
            server = await start(agent, registry)
            with pytest.raises(EngineError) as info:
                await server.wait_ready(timeout=600, poll_interval=0)
            return info.value

    error = asyncio.run(scenario())
    assert error.cause == KV_CACHE_MEMORY
    assert len(error.log_tail) == LOG_TAIL_LINES and cause not in error.log_tail
    assert "died during start-up: not enough memory for the KV cache" in str(error)
