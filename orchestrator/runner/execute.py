"""One run on one host: launch, wait ready, drive load while following the log, stop, summarize.

The run's folder and ``manifest.json`` are written the moment the run starts (so the manifest's
``started_at`` is that run's own start, not the playbook's); every step then writes into the
folder as it goes (server.log, events.jsonl, requests.jsonl grow while the run is live, readable
with ``tail -f``); ``summary.json``, with the end time and every phase's time, is written last.
A run that fails still leaves its manifest, the log it produced and a ``summary.json`` carrying
the ``error``, and the caller moves on to the next run.

A connection that drops while the load generator runs (the engine still the one this run
launched, checked after reconnecting) is measured again once from a fresh warm-up: the cut
attempt's records move to ``requests.attempt-1.jsonl``, the result carries a warning saying so,
and server.log goes on from its byte offset; a second drop fails the run.

Engines print their secrets (vLLM's ``non-default args: {... 'api_key': [...]}``, SGLang's
``server_args=ServerArgs(... api_key=...)``), and error messages may quote them: every line,
record and message is masked with the run's secrets before it is written or shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.agent.client import AgentClient
from orchestrator.commands.progress import (
    LatestAcceptance,
    LiveThroughput,
    Observer,
    PhaseChanged,
    RequestsDone,
    RunPhase,
)
from orchestrator.config import RunSpec
from orchestrator.config.hostconfig import Secrets, mask, mask_json
from orchestrator.doctor import ModelConfig
from orchestrator.doctor.findings import Finding
from orchestrator.engines import engine_for
from orchestrator.engines.failures import REQUESTS_FAILED, describe
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import EngineError, HostError, HostUnreachable, OrchError
from orchestrator.loadgen.prompts import PromptSet, build_loadgen_spec
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.logparse import LogFollower
from orchestrator.remote.wire import PhaseEvent, ProgressEvent
from orchestrator.results.model import RunError, RunResult, RunTimes
from orchestrator.results.store import AppendLog, make_dir, write_error, write_json, write_text
from orchestrator.runner.server import Server, ServerRegistry
from orchestrator.runner.summarize import build_result, iso_time

TAIL_DRAIN_S = 15.0
LOADGEN_ATTEMPTS = 2  # a connection dropped while measuring: measured again once, from warm-up
HEAD_LINES = 5000  # start-up lines kept in memory: where engines announce what they chose


@dataclass
class RunJob:
    """Everything one run needs that the pipeline worked out before any server started."""

    key: str
    order: int
    plan: PlannedLaunch
    run_dir: Path
    prompts: PromptSet
    run_id: str
    doctor: list[Finding] = field(default_factory=list)
    drafter: ModelConfig | None = None  # for ranking collapse causes
    manifest: dict[str, Any] = field(default_factory=dict)  # written, stamped, when the run starts


def begin_run(job: RunJob) -> float:
    """Create the run's folder with its manifest, stamped with this moment; return the time.

    Files are never rewritten, so the manifest can only hold what is known at the start: the
    end time and the phases' times go to ``summary.json``.
    """
    started = time.time()
    make_dir(job.run_dir)
    stamp = iso_time(started)
    write_json(
        job.run_dir / "manifest.json", {**job.manifest, "created_at": stamp, "started_at": stamp}
    )
    return started


@dataclass
class LiveState:
    """What the tail and the load generator share while a run is live."""

    follower: LogFollower
    secrets: Secrets = field(default_factory=Secrets)  # hidden in everything written or shown
    window: LogFollower | None = None  # fed only once the measured window has begun
    window_first_line: int | None = None  # server.log line number of the window's first line
    records: list[RequestRecord] = field(default_factory=list)
    head_lines: list[str] = field(default_factory=list)


async def execute_run(
    job: RunJob,
    *,
    agent: AgentClient,
    reconnect: Callable[[], Awaitable[AgentClient]],
    registry: ServerRegistry,
    observer: Observer,
) -> RunResult:
    """Run ``job`` and return its result (also written, masked, as ``summary.json``); its
    phases, request counts and live figures are told to ``observer`` as they happen."""
    plan, run = job.plan, job.plan.run
    started = begin_run(job)
    ready_at: float | None = None
    state = LiveState(follower=LogFollower(engine=_engine(run)), secrets=run_secrets(job))
    server_log = AppendLog(job.run_dir / "server.log")
    events = AppendLog(job.run_dir / "events.jsonl")
    requests = AppendLog(job.run_dir / "requests.jsonl")
    loadgen: LoadgenResult | None = None
    error: RunError | None = None
    server: Server | None = None
    tail_task: asyncio.Task[None] | None = None
    stop_error: OrchError | None = None
    warnings: list[str] = []
    key = job.key

    def phase(new: RunPhase, reason: str | None = None) -> None:
        observer.on_event(PhaseChanged(key, new, reason=reason))

    try:
        phase(RunPhase.LAUNCHING)
        server = await Server.start(
            agent,
            run,
            plan.host,
            run_id=job.run_id,
            port=plan.port,
            registry=registry,
            reconnect=reconnect,
        )
        tail_task = asyncio.create_task(_follow(server, state, server_log, events, observer, key))
        phase(RunPhase.LOADING)
        await server.wait_ready(
            timeout=run.ready_timeout_s,
            poll_interval=1.0,
            on_progress=lambda readiness, _s: phase(RunPhase.LOADING, readiness),
        )
        ready_at = time.time()
        phase(RunPhase.WARM_UP)
        attempt = 1
        while loadgen is None:
            try:
                loadgen = await _drive_load(job, server, agent, state, requests, observer)
            except HostUnreachable as exc:  # the connection dropped (an AgentError is not this)
                if attempt >= LOADGEN_ATTEMPTS:
                    await _died_meanwhile(server, exc)
                    raise
                # reconnected by the check; measured again only if the engine we launched
                # is still alive and still the one answering (else its death is the error)
                await _still_serving(server, exc)
                agent = server.agent
                requests = _set_aside(requests, job.run_dir, attempt)
                _restart_window(state)
                attempt += 1
                warnings.append(
                    f"the connection to {plan.host.name} dropped while measuring; the server "
                    f"kept running; measured again from a fresh warm-up (attempt {attempt}; the "
                    f"first attempt's records are in requests.attempt-{attempt - 1}.jsonl)"
                )
                phase(RunPhase.WARM_UP, f"connection dropped: measuring again (attempt {attempt})")
            except OrchError as exc:
                await _died_meanwhile(server, exc)  # the engine's death explains a lost loadgen
                raise
        # the figures are the engine's only if it is still alive and still the one answering
        await server.check_serving(when="while measuring")
        await _check_requests(job, server, loadgen, state)
        phase(RunPhase.STOPPING)
    except OrchError as exc:
        error = run_error(exc)
        phase(RunPhase.FAILED, mask(exc.message, state.secrets))
    finally:
        if server is not None:
            try:
                await server.stop()
            except OrchError as exc:  # StopFailed: the server may still hold its port and GPUs
                stop_error = exc
        if tail_task is not None and stop_error is not None:
            tail_task.cancel()  # the server may run on: its log would never end
            with contextlib.suppress(asyncio.CancelledError, OrchError):
                await tail_task
        elif tail_task is not None:
            await _finish_tail(tail_task)
        for log in (server_log, events, requests):
            log.close()
    stop_warning: str | None = None
    if stop_error is not None:  # never swallowed: the run fails, or says so beside its error
        phase(RunPhase.FAILED, mask(stop_error.message, state.secrets))
        if error is None:
            error = run_error(stop_error)
        else:
            stop_warning = f"{stop_error.message} ({stop_error.hint})"
    # a log that lost lines (a full results disk, even in the tail task) fails the run
    lost = next((log.error for log in (server_log, events, requests) if log.error), None)
    if lost is not None and error is None:
        error = run_error(lost)
        phase(RunPhase.FAILED, mask(lost.message, state.secrets))
    if loadgen is not None:
        for name, text in (
            ("metrics_before.txt", loadgen.metrics_before),
            ("metrics_after.txt", loadgen.metrics_after),
        ):
            if text is not None:
                write_text(job.run_dir / name, mask(text, state.secrets))
    times = RunTimes.from_epoch(
        started_at=started,
        ended_at=time.time(),
        ready_at=ready_at,
        measure_started_at=loadgen.started_at if loadgen else None,
        measure_ended_at=loadgen.ended_at if loadgen else None,
    )
    result = build_result(job, state=state, loadgen=loadgen, error=error, times=times)
    if stop_warning is not None:
        warnings.append(stop_warning)
    if warnings:
        result = result.model_copy(update={"warnings": [*result.warnings, *warnings]})
    result = result.masked(state.secrets)
    write_json(job.run_dir / "summary.json", result.to_json())
    if error is None:  # a failure was told with its reason when it happened
        phase(RunPhase.COLLAPSE if result.collapse else RunPhase.DONE)
    return result


def _engine(run: RunSpec) -> str:
    return engine_for(run).name


def run_secrets(job: RunJob) -> Secrets:
    return engine_for(job.plan.run).secrets(job.plan.run, job.plan.host)


async def _follow(
    server: Server,
    state: LiveState,
    server_log: AppendLog,
    events: AppendLog,
    observer: Observer,
    key: str,
) -> None:
    """Stream the server's log into server.log, parse it live into events.jsonl.

    Each line is masked on arrival, so no copy of it (file, memory, summary) holds a secret.
    """
    async for line in server.tail():
        text = mask(line.text, state.secrets)
        server_log.write_line(text)
        if len(state.head_lines) < HEAD_LINES:
            state.head_lines.append(text)
        record = state.follower.feed_line(text)
        if state.window is not None:
            state.window.feed_line(text)
        if record is not None:
            events.write_json(record.to_dict())  # parsed from the masked line
            observer.on_event(LatestAcceptance(key, state.follower.latest_acceptance_length))


async def _finish_tail(task: asyncio.Task[None]) -> None:
    """Let the tail drain what the server wrote before it exited, but never hang on it."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=TAIL_DRAIN_S)
    except (asyncio.TimeoutError, OrchError):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OrchError):
            await task


async def _drive_load(
    job: RunJob,
    server: Server,
    agent: AgentClient,
    state: LiveState,
    requests: AppendLog,
    observer: Observer,
) -> LoadgenResult:
    run = job.plan.run
    spec = build_loadgen_spec(
        run.workload,
        job.prompts,
        port=server.port,
        served_name=server.served_name,
        tokenizer=run.model,
        api_key=server.engine.api_key(run),
        metrics_path=server.engine.metrics_path,
    )
    result: LoadgenResult | None = None
    done = failed = 0
    async with contextlib.aclosing(agent.loadgen(spec)) as events:
        async for event in events:
            if isinstance(event, RequestRecord):
                requests.write_json(mask_json(event.to_json(), state.secrets))
                state.records.append(event)
                if not event.warmup:
                    done, failed = done + event.ok, failed + (not event.ok)
                    observer.on_event(RequestsDone(job.key, done=done, failed=failed))
            elif isinstance(event, PhaseEvent) and event.phase == "measure":
                state.window_first_line = state.follower.line_no + 1
                state.window = LogFollower(engine=_engine(run))
                observer.on_event(PhaseChanged(job.key, RunPhase.MEASURING))
            elif isinstance(event, ProgressEvent):
                observer.on_event(LiveThroughput(job.key, event.tok_s))
            elif isinstance(event, LoadgenResult):
                result = event
    if result is None:
        raise HostError(job.plan.host.name, "the load generator ended without a result")
    return result


async def _still_serving(server: Server, dropped: HostUnreachable) -> None:
    """After a dropped connection: reconnect and check the server this run launched still
    serves. Its death (or a foreign server) is raised; a host still unreachable raises
    ``dropped``, the run's error."""
    try:
        await server.reattach()
        await server.check_serving(when="while measuring")
    except EngineError:
        raise
    except OrchError as again:
        raise dropped from again


def _set_aside(requests: AppendLog, run_dir: Path, attempt: int) -> AppendLog:
    """Close the interrupted attempt's ``requests.jsonl``, move it to
    ``requests.attempt-<n>.jsonl`` (never over an existing file) and open a new one."""
    requests.close()
    if requests.error is not None:  # lines were lost: the run fails on it, not later
        raise requests.error
    path = run_dir / "requests.jsonl"
    aside = run_dir / f"requests.attempt-{attempt}.jsonl"
    try:
        os.link(path, aside)  # fails if ``aside`` exists: nothing is overwritten
        os.unlink(path)
    except OSError as exc:
        raise write_error(aside, exc) from exc
    return AppendLog(path)


def _restart_window(state: LiveState) -> None:
    """Forget the interrupted attempt's records and measured window; the next "measure"
    phase event starts a new window (the server log and its parse go on unbroken)."""
    state.records.clear()
    state.window = None
    state.window_first_line = None


async def _died_meanwhile(server: Server, exc: OrchError) -> None:
    """Raise the engine's death (or the foreign server) instead of ``exc`` when that is what
    happened; nothing when the engine is still the one serving (or cannot be asked)."""
    try:
        await server.check_serving(when="while measuring")
    except EngineError as died:
        raise died from exc
    except OrchError:
        return


async def _check_requests(
    job: RunJob, server: Server, loadgen: LoadgenResult, state: LiveState
) -> None:
    """A window in which no measured request completed measured nothing: the run failed."""
    measured = [r for r in state.records if not r.warmup]
    if loadgen.completed > 0 or any(r.ok for r in measured):
        return
    errors = Counter(r.error or f"HTTP {r.status}" for r in measured if not r.ok)
    common = "; ".join(f"{n} x {text}" for text, n in errors.most_common(3))
    title, hint = describe(REQUESTS_FAILED)
    raise EngineError(
        job.plan.host.name,
        f"run {job.plan.run.name!r}: {title} ({loadgen.failed} of {loadgen.requests})"
        + (f": {common}" if common else ""),
        cause=REQUESTS_FAILED,
        log_tail=await server.log_tail(),
        hint=hint,
    )


def run_error(exc: OrchError) -> RunError:
    """The error as summary.json records it and the results table shows it. Its message, hint
    and the engine's last log lines may print the API key: the whole result is masked before
    it is written or returned."""
    kind = getattr(exc, "kind", None)
    engine = exc if isinstance(exc, EngineError) else None
    return RunError(
        type=type(exc).__name__,
        message=str(exc),
        hint=exc.hint,
        cause=engine.cause if engine else None,
        exit_code=engine.exit_code if engine else None,
        log_tail=list(engine.log_tail) if engine else [],
        kind=str(getattr(kind, "value", kind)) if kind else None,
    )


def failed_result(job: RunJob, error: OrchError) -> RunResult:
    """The result of a run that never started (its host could not be reached), masked and
    written as its summary.json."""
    started = begin_run(job)
    state = LiveState(follower=LogFollower(engine=_engine(job.plan.run)), secrets=run_secrets(job))
    result = build_result(
        job,
        state=state,
        loadgen=None,
        error=run_error(error),
        times=RunTimes.from_epoch(started_at=started, ended_at=time.time()),
    )
    result = result.masked(state.secrets)
    write_json(job.run_dir / "summary.json", result.to_json())
    return result
