"""One run on one host: launch, wait ready, measure each load point while following the log,
stop, summarize.

The run's folder and ``manifest.json`` are written the moment the run starts (so the manifest's
``started_at`` is that run's own start, not the playbook's); every step then writes into the
folder as it goes (server.log, events.jsonl, requests.jsonl grow while the run is live, readable
with ``tail -f``). Each measurement (a load point, one repeat of it; see ``sweep/points.py``)
gets its ``summary.json`` when the next one ends, the last one once the server has stopped, so
a stop that fails is recorded in it. A run that fails still leaves its manifest, the log it
produced and a ``summary.json`` carrying the ``error``; the load points it never reached are
recorded as not run, with the cause; and the caller moves on to the next run.

A sweep's server starts once and is warmed up once; between points the engine's prefix cache is
reset where the engine has an endpoint for it, so a point does not inherit the last one's hits.

A connection that drops while the load generator runs (the engine still the one this run
launched, checked after reconnecting) is measured again once from a fresh warm-up: the cut
attempt's records move to ``requests.attempt-1.jsonl``, the result carries a warning saying so,
and server.log goes on from its byte offset; a second drop fails the run.
A measurement failed only for a saturated client is measured once more on the warm server
(``measured_again``); its first attempt's records are set aside the same way.

Engines print their secrets (vLLM's ``non-default args: {... 'api_key': [...]}``, SGLang's
``server_args=ServerArgs(... api_key=...)``), and error messages may quote them: every line,
record and message is masked with the run's secrets before it is written or shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.agent.client import AgentClient
from orchestrator.config import RunSpec
from orchestrator.config.hostconfig import Secrets, mask, mask_json, mask_lines
from orchestrator.engines import engine_for
from orchestrator.engines.failures import REQUESTS_FAILED
from orchestrator.engines.logs import LogFollower
from orchestrator.errors import EngineError, HostError, HostUnreachable, OrchError
from orchestrator.loadgen.prompts import build_loadgen_spec
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.energy import TELEMETRY_FILE, telemetry_csv
from orchestrator.remote.wire import PhaseEvent, ProgressEvent, TelemetrySpec
from orchestrator.results.manifest import MANIFEST_FILE, Manifest
from orchestrator.results.model import NOT_RUN, RunError, RunResult, RunTimes, RunWarning
from orchestrator.results.store import (
    AppendLog,
    make_dir,
    safe_name,
    write_error,
    write_json,
    write_text,
)
from orchestrator.results.validity import FAILING_KINDS
from orchestrator.runner.assemble import MEASUREMENT_FAILED, build_result
from orchestrator.runner.progress import (
    LatestAcceptance,
    LiveThroughput,
    NullObserver,
    Observer,
    PhaseChanged,
    PointDone,
    PointStarted,
    RequestsDone,
    RunPhase,
)
from orchestrator.runner.server import Server, ServerRegistry
from orchestrator.runner.state import LiveState, RunJob
from orchestrator.runner.summarize import iso_time
from orchestrator.sweep.points import Measurement, measurement, searched
from orchestrator.sweep.search import SloSearch

TAIL_DRAIN_S = 15.0
LOADGEN_ATTEMPTS = 2  # a connection dropped while measuring: measured again once, from warm-up
HEAD_LINES = 5000  # start-up lines kept in memory: where engines announce what they chose


def begin_run(job: RunJob) -> float:
    """Create the run's folder with its manifest, stamped with this moment; return the time.

    Files are never rewritten, so the manifest can only hold what is known at the start: the
    end time and the phases' times go to ``summary.json``. A resumed run's folder exists: its
    new session gets a manifest of its own (``manifest-2.json``).
    """
    started = time.time()
    if job.session == 1:
        make_dir(job.run_dir)
    stamp = iso_time(started)
    stamped = {**job.manifest, "created_at": stamp, "started_at": stamp, "session": job.session}
    write_json(
        job.run_dir / job.server_file(MANIFEST_FILE), Manifest.model_validate(stamped).to_json()
    )
    return started


@dataclass
class _Pending:
    """A measurement's result not yet written: the last one waits for the server's stop, so
    that a stop that fails is recorded in it."""

    measurement: Measurement
    result: RunResult


@dataclass
class _Session:
    """One server session of a run: the server and the files that cover its whole life."""

    job: RunJob
    state: LiveState
    observer: Observer
    started: float
    agent: AgentClient | None = None
    server: Server | None = None
    ready_at: float | None = None
    warmed: bool = False
    done: int = 0
    results: list[RunResult] = field(default_factory=list)
    pending: _Pending | None = None
    search_note: str | None = None  # what the SLO search found
    fail_reason: str | None = None  # the first failed measurement's, masked

    def phase(self, new: RunPhase, reason: str | None = None) -> None:
        self.observer.on_event(PhaseChanged(self.job.key, new, reason=reason))


async def execute_run(
    job: RunJob,
    *,
    agent: AgentClient,
    reconnect: Callable[[], Awaitable[AgentClient]],
    registry: ServerRegistry,
    observer: Observer,
) -> list[RunResult]:
    """Run ``job``: start its server once, measure each of its load points in turn, stop it.

    Returns every measurement's result in the order measured (the ones an earlier session kept
    included), each also written, masked, as its ``summary.json``. A measurement that fails
    with the server still serving is recorded and the sweep goes on; once the server is gone
    (or the host), the measurements left are recorded as not run, with the cause.
    """
    run = job.plan.run
    started = begin_run(job)
    state = LiveState(follower=LogFollower(engine=_engine(run)), secrets=run_secrets(job))
    server_log = AppendLog(job.run_dir / job.server_file("server.log"))
    events = AppendLog(job.run_dir / job.server_file("events.jsonl"))
    session = _Session(job, state, observer, started, agent=agent)
    error: RunError | None = None
    tail_task: asyncio.Task[None] | None = None
    stop_error: OrchError | None = None
    left: list[Measurement] = []
    try:
        session.phase(RunPhase.LAUNCHING)
        session.server = server = await Server.start(
            agent,
            run,
            job.plan.host,
            run_id=job.run_id,
            port=job.plan.port,
            registry=registry,
            reconnect=reconnect,
            gpu_ids=job.gpu_ids,
        )
        tail_task = asyncio.create_task(_follow(server, state, server_log, events, observer, job))
        session.phase(RunPhase.LOADING)
        await server.wait_ready(
            timeout=run.ready_timeout_s,
            poll_interval=1.0,
            on_progress=lambda readiness, _s: session.phase(RunPhase.LOADING, readiness),
        )
        session.ready_at = time.time()
        left = await _sweep(session)
        session.phase(RunPhase.STOPPING)
    except OrchError as exc:
        error = run_error(exc)
        session.phase(RunPhase.FAILED, mask(exc.message, state.secrets))
    finally:
        if session.server is not None:
            try:
                await session.server.stop()
            except OrchError as exc:  # StopFailed: the server may still hold its port and GPUs
                stop_error = exc
        if tail_task is not None and stop_error is not None:
            tail_task.cancel()  # the server may run on: its log would never end
            with contextlib.suppress(asyncio.CancelledError, OrchError):
                await tail_task
        elif tail_task is not None:
            await _finish_tail(tail_task)
        for log in (server_log, events):
            log.close()
    return _finish(
        session, error=error, stop_error=stop_error, left=left, logs=(server_log, events)
    )


def _finish(
    session: _Session,
    *,
    error: RunError | None,
    stop_error: OrchError | None,
    left: list[Measurement],
    logs: tuple[AppendLog, ...],
) -> list[RunResult]:
    """Write what the run's end decides: the last measurement's result (with a failed stop in
    it), a failed start as the first measurement's result, the measurements never made; then
    tell how the run ended."""
    job, state = session.job, session.state
    failures: list[str] = []  # told once everything is written, in the order they happened
    if error is None and session.fail_reason is not None:  # a measurement failed
        failures.append(session.fail_reason)
    if stop_error is not None:  # never swallowed: the run fails, or says so beside its error
        failures.append(mask(stop_error.message, state.secrets))
    # a log that lost lines (a full results disk, even in the tail task) fails the run
    lost = next((log.error for log in logs if log.error), None)
    if lost is not None and not failures and error is None:
        failures.append(mask(lost.message, state.secrets))
    failure = stop_error if stop_error is not None else lost
    if session.pending is not None:
        _write_last(session, session.pending, failure, stop_error)
        session.pending = None
    elif failure is not None and error is None and session.results:
        # every measurement is written already: the run's folder says the stop failed
        write_json(
            job.run_dir / job.server_file("stop-error.json"),
            mask_json(run_error(failure).model_dump(mode="json"), state.secrets),
        )
    elif failure is not None and error is None:
        error = run_error(failure)
    unmeasured = [m for m in (left or _left_of(session)) if m.folder not in job.kept]
    if error is not None and unmeasured:
        first, *unmeasured = unmeasured
        result = build_result(
            job,
            state=state,
            loadgen=None,
            error=error,
            times=RunTimes.from_epoch(started_at=session.started, ended_at=time.time()),
            measurement=first,
        )
        _write_result(session, first, result.masked(state.secrets))
        _not_run(
            session, unmeasured, f"not run: the run failed before this point ({error.message})"
        )
    elif unmeasured:
        _not_run(session, unmeasured, _why_left(session))
    for reason in failures:
        session.phase(RunPhase.FAILED, reason)
    if error is None and not failures and session.results:
        collapse = any(r.collapse for r in session.results)
        session.phase(RunPhase.COLLAPSE if collapse else RunPhase.DONE)
    return _in_order(session)


def _write_last(
    session: _Session, pending: _Pending, failure: OrchError | None, stop_error: OrchError | None
) -> None:
    """The last measurement's result, written once the server stopped: a stop that failed (or
    a log that lost lines) is its error, or a warning beside the error it has."""
    update: dict[str, Any] = {}
    if failure is not None and pending.result.error is None:
        update["error"] = run_error(failure)
    elif stop_error is not None:
        update["warnings"] = [
            *pending.result.warnings,
            RunWarning(kind="stop_failed", message=f"{stop_error.message} ({stop_error.hint})"),
        ]
    result = pending.result.model_copy(update=update) if update else pending.result
    _write_result(session, pending.measurement, result.masked(session.state.secrets))


def _left_of(session: _Session) -> list[Measurement]:
    measured = {r.run.folder for r in session.results}
    base = safe_name(session.job.run_dir.name)
    return [m for m in session.job.measurements() if _rel(base, m) not in measured]


def _why_left(session: _Session) -> str:
    last = session.results[-1] if session.results else None
    if last is not None and last.error is not None:
        point = last.point.label if last.point else "an earlier point"
        return f"not run: the server was lost at {point} ({last.error.message})"
    return "not run: the run ended before this point"


def _not_run(session: _Session, measurements: list[Measurement], why: str) -> None:
    now = time.time()
    for m in measurements:
        result = build_result(
            session.job,
            state=LiveState(follower=LogFollower(engine=_engine(session.job.plan.run))),
            loadgen=None,
            error=RunError(type=NOT_RUN, message=why),
            times=RunTimes.from_epoch(started_at=now, ended_at=now),
            measurement=m,
        )
        _write_result(session, m, result.masked(session.state.secrets))


def _in_order(session: _Session) -> list[RunResult]:
    """Kept and new results, by (point index, repeat)."""
    everything = [*session.job.kept.values(), *session.results]

    def key(r: RunResult) -> tuple[int, int]:
        return (r.point.index, r.point.repeat) if r.point else (0, 0)

    return sorted(everything, key=key)


def _rel(base: str, m: Measurement) -> str:
    return f"{base}/{m.folder}" if m.folder else base


def _write_result(session: _Session, m: Measurement, result: RunResult) -> None:
    folder = session.job.run_dir / m.folder if m.folder else session.job.run_dir
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "summary.json", result.to_json())
    session.results.append(result)
    job = session.job
    label = result.point.label if result.point else "-"
    session.observer.on_event(PointDone(job.key, job.plan.host.name, label, result.verdict))


async def _sweep(session: _Session) -> list[Measurement]:
    """Measure every point in turn (then the SLO search's); returns the measurements left
    unmeasured because the server was lost."""
    job = session.job
    todo = job.measurements()
    search = searched(job.plan.run)
    for i, m in enumerate(todo):
        if m.folder in job.kept:
            continue
        # only the last measurement waits for the server's stop (to record a failed one in
        # it): every other is written as soon as it ends, so an interruption keeps it
        last = i == len(todo) - 1 and not search
        if not await _measure_one(session, m, hold=last):
            return todo[i + 1 :]
    if search:
        return await _search(session)
    return []


async def _search(session: _Session) -> list[Measurement]:
    run = session.job.plan.run
    w = run.workload
    assert w.slo is not None and w.slo.range is not None
    kind = w.slo.search or w.sweep_kind
    search = SloSearch(kind, w.slo.range[0], w.slo.range[1], w.slo.max_points)
    for written in dict.fromkeys(w.sweep_values):
        met = _met_at(_measured(session), written)
        if met is not None:
            search.record(written, met, _missed_at(_measured(session), written))
    index = len(w.sweep_values)
    while (value := search.next_value()) is not None:
        for repeat in range(1, w.repeat + 1):
            m = measurement(run, value, index=index, repeat=repeat, origin="slo_search")
            if m.folder in session.job.kept:
                continue
            if not await _measure_one(session, m):
                return []
        search.record(
            value, bool(_met_at(_measured(session), value)), _missed_at(_measured(session), value)
        )
        index += 1
    session.search_note = search.explain()
    write_json(  # written once every measurement it names is: a resume trusts it
        session.job.run_dir / session.job.server_file("slo-search.json"),
        {
            "kind": kind,
            "targets": w.slo.targets,
            "best": search.best,
            "explain": search.explain(),
            "points": [{"value": v, "met": met} for v, met in search.points],
        },
    )
    return []


def _measured(session: _Session) -> list[RunResult]:
    """Every result so far: kept by an earlier session, written, and the one not yet written."""
    pending = [session.pending.result] if session.pending else []
    return [*session.job.kept.values(), *session.results, *pending]


def _missed_at(results: list[RunResult], value: float) -> list[str]:
    """The targets some measurement at ``value`` missed."""
    at = [r for r in results if r.point is not None and r.point.value == value and r.slo]
    return list(dict.fromkeys(c.target for r in at if r.slo for c in r.slo.checks if not c.met))


def _met_at(results: list[RunResult], value: float) -> bool | None:
    """Whether every measurement at ``value`` met every target (None: none measured)."""
    at = [r for r in results if r.point is not None and r.point.value == value]
    if not at:
        return None
    return all(r.error is None and r.slo is not None and r.slo.met for r in at)


async def _measure_one(session: _Session, m: Measurement, *, hold: bool = False) -> bool:
    """Measure ``m``; False when the server is gone and the sweep must stop.

    A measurement failed only because the client was saturated is measured once more (the
    server is alive and warm; the prefix cache is reset first): a stall of the load
    generator's host is the instrument's fault, not the engine's, and a second saturated
    attempt fails the point. The set-aside attempt's records keep their own files."""
    job = session.job
    assert session.server is not None
    folder = job.run_dir / m.folder if m.folder else job.run_dir
    label = m.point.label + (f" #{m.point.repeat}" if m.point.repeats > 1 else "")
    session.observer.on_event(
        PointStarted(job.key, job.plan.host.name, label, session.done + len(job.kept), job.total)
    )
    if not session.warmed:
        session.phase(RunPhase.WARM_UP)
    carried: list[RunWarning] = []
    again = False
    while True:
        result, loadgen, alive = await _measure_attempt(session, m, folder, carried, again)
        if not (alive and not again and _saturated_only(result)):
            break
        assert result.error is not None
        aside = [_set_aside_file(folder / "requests.jsonl")]
        if m.folder:
            aside.append(_set_aside_file(folder / "events.jsonl"))
        again = True
        carried.append(_measured_again(result.error.message, aside))
        session.phase(RunPhase.MEASURING, "client saturated: measuring again")
    if loadgen is not None:
        _write_scrapes(folder, loadgen, session.state.secrets)
    if result.error is not None and result.error.type == MEASUREMENT_FAILED:
        result = await _judged_failed(session, result)
    result = result.masked(session.state.secrets)
    if hold:
        session.pending = _Pending(m, result)
    else:
        _write_result(session, m, result)
    session.done += 1
    return alive


def _saturated_only(result: RunResult) -> bool:
    """Failed by the verdict policy for the client's saturation and nothing else."""
    failing = {w.kind for w in result.warnings if w.kind in FAILING_KINDS}
    error = result.error
    return (
        error is not None and error.kind == "client_saturated" and failing == {"client_saturated"}
    )


def _measured_again(why: str, aside: list[Path]) -> RunWarning:
    names = ", ".join(p.name for p in aside)
    return RunWarning(
        kind="measured_again",
        message=f"measured again: the first attempt failed ({why}); its records are in {names}",
        details={"reason": "client_saturated", "first": why, "files": [p.name for p in aside]},
    )


async def _measure_attempt(
    session: _Session,
    m: Measurement,
    folder: Path,
    carried: list[RunWarning],
    again: bool,
) -> tuple[RunResult, LoadgenResult | None, bool]:
    """One attempt at ``m``: its result (not yet masked nor written), the load generator's
    result and whether the server is still alive."""
    job, state = session.job, session.state
    assert session.server is not None
    state.begin_measurement(AppendLog(folder / "events.jsonl") if m.folder else None)
    requests = AppendLog(folder / "requests.jsonl")
    started = time.time()
    loadgen: LoadgenResult | None = None
    error: RunError | None = None
    warnings: list[RunWarning] = list(carried)
    alive = True
    try:
        loadgen, requests = await _attempts(session, m, folder, requests, warnings, again)
        await session.server.check_serving(when="while measuring")
        if loadgen.cache_reset is not None and loadgen.cache_reset != "ok":
            why = f"prefix cache not reset before this point: {loadgen.cache_reset}"
            warnings.append(RunWarning(kind="cache_not_reset", message=why))
        elif loadgen.cache_reset is None and (session.done > 0 or again):
            note = session.server.engine.cache_reset_note(m.run, job.plan.env)
            if note:
                warnings.append(RunWarning(kind="cache_not_reset", message=note))
    except OrchError as exc:
        error = run_error(exc)
        if session.fail_reason is None:
            session.fail_reason = mask(exc.message, state.secrets)
        alive = await _serving(session.server)
        if not alive:
            error = _lost_error(error, await _why_gone(session.server, exc))
    finally:
        state.end_measurement()
        requests.close()
        point_events = [state.point_events] if state.point_events else []
        for log in point_events:
            log.close()
    lost = requests.error
    if lost is not None and error is None and loadgen is None:
        error = run_error(lost)
    times = RunTimes.from_epoch(
        started_at=session.started if not session.warmed else started,
        ended_at=time.time(),
        ready_at=session.ready_at if not session.warmed else None,
        measure_started_at=loadgen.started_at if loadgen else None,
        measure_ended_at=loadgen.ended_at if loadgen else None,
    )
    session.warmed = True
    result = build_result(
        job,
        state=state,
        loadgen=loadgen,
        error=error,
        times=times,
        measurement=m,
        lost=lost,
        warnings=warnings,
    )
    return result, loadgen, alive


def _write_scrapes(folder: Path, loadgen: LoadgenResult, secrets: Secrets) -> None:
    for name, text in (
        ("metrics_before.txt", loadgen.metrics_before),
        ("metrics_after.txt", loadgen.metrics_after),
    ):
        if text is not None:
            write_text(folder / name, mask(text, secrets))
    if loadgen.telemetry is not None and loadgen.telemetry.samples:
        write_text(folder / TELEMETRY_FILE, telemetry_csv(loadgen.telemetry.samples))


async def _attempts(
    session: _Session,
    m: Measurement,
    folder: Path,
    requests: AppendLog,
    warnings: list[RunWarning],
    again: bool = False,
) -> tuple[LoadgenResult, AppendLog]:
    """The load generator's run at ``m``; a dropped connection (the engine still the one this
    run launched) measures again once from a fresh warm-up, the cut attempt set aside.
    ``again``: an earlier attempt at ``m`` sent its prompts (the prefix cache is reset)."""
    server, state = session.server, session.state
    assert server is not None
    host = session.job.plan.host.name
    attempt = 1
    while True:
        try:
            loadgen = await _drive_load(session, m, server, requests, retry=again or attempt > 1)
            return loadgen, requests
        except HostUnreachable as exc:  # the connection dropped (an AgentError is not this)
            if attempt >= LOADGEN_ATTEMPTS:
                await _died_meanwhile(server, exc)
                raise
            # reconnected by the check; measured again only if the engine we launched
            # is still alive and still the one answering (else its death is the error)
            await _still_serving(server, exc)
            session.agent = server.agent
            requests, aside = _set_aside(requests, folder)
            state.restart_window()
            attempt += 1
            session.warmed = False  # a fresh warm-up
            warnings.append(
                RunWarning(
                    kind="connection_dropped",
                    message=f"the connection to {host} dropped while measuring; the server "
                    f"kept running; measured again from a fresh warm-up (attempt {attempt}; the "
                    f"first attempt's records are in {aside.name})",
                )
            )
            session.phase(
                RunPhase.WARM_UP, f"connection dropped: measuring again (attempt {attempt})"
            )
        except OrchError as exc:
            await _died_meanwhile(server, exc)  # the engine's death explains a lost loadgen
            raise


async def _serving(server: Server) -> bool:
    try:
        await server.check_serving(when="while measuring")
    except OrchError:
        return False
    return True


async def _why_gone(server: Server, exc: OrchError) -> OrchError:
    try:
        await server.check_serving(when="while measuring")
    except OrchError as gone:
        return gone
    return exc


def _lost_error(error: RunError, gone: OrchError) -> RunError:
    return error if gone.message == error.message else run_error(gone)


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
    job: RunJob,
) -> None:
    """Stream the server's log into server.log, parse it live into events.jsonl (and into the
    measurement's own events.jsonl while a sweep point is measured).

    Each line is masked on arrival, so no copy of it (file, memory, summary) holds a secret.
    The lines come a batch at a time (one read of the log on the host): each batch is masked,
    written and parsed as a whole, and its events written at once, since a log can burst with
    thousands of lines a second and a write per line was most of the controller's time.
    """
    async for batch in server.tail():
        texts = mask_lines(batch.lines, state.secrets)
        server_log.write_lines(texts)
        room = HEAD_LINES - len(state.head_lines)
        if room > 0:
            state.head_lines.extend(texts[:room])
        records = state.follower.feed_lines(texts)
        if state.window is not None and state.window_open:
            state.window.feed_lines(texts)
        if records:
            rows = [_json_line(record.to_dict()) for record in records]  # from the masked lines
            events.write_lines(rows)
            if state.point_events is not None and state.window_open:
                state.point_events.write_lines(rows)
            observer.on_event(LatestAcceptance(job.key, state.follower.latest_acceptance_length))


def _json_line(obj: dict[str, Any]) -> str:
    """One events.jsonl line, as ``AppendLog.write_json`` writes it."""
    return json.dumps(obj, ensure_ascii=False, default=str)


async def _finish_tail(task: asyncio.Task[None]) -> None:
    """Let the tail drain what the server wrote before it exited, but never hang on it."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=TAIL_DRAIN_S)
    except (asyncio.TimeoutError, OrchError):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OrchError):
            await task


async def _drive_load(
    session: _Session, m: Measurement, server: Server, requests: AppendLog, *, retry: bool = False
) -> LoadgenResult:
    job, state, observer = session.job, session.state, session.observer
    run = m.run
    workload = run.workload
    if session.warmed:  # the server is warm: only the first measurement warms it up
        workload = workload.model_copy(update={"warmup": 0})
    # every measurement but the server's first starts from an empty prefix cache: a retry
    # sends the prompts its cut attempt just sent
    fresh = session.done == 0 and not retry
    reset = None if fresh else server.engine.cache_reset(run, job.plan.env)
    spec = build_loadgen_spec(
        workload,
        job.prompts,
        port=server.port,
        served_name=server.served_name,
        tokenizer=run.model,
        api_key=server.engine.api_key(run),
        metrics_path=server.engine.metrics_path,
        cache_reset=reset,
        telemetry=_telemetry_spec(server),
    )
    result: LoadgenResult | None = None
    done = failed = 0
    assert session.agent is not None
    async with contextlib.aclosing(session.agent.loadgen(spec)) as events:
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
                state.window_open = True
                observer.on_event(PhaseChanged(job.key, RunPhase.MEASURING))
            elif isinstance(event, ProgressEvent):
                observer.on_event(
                    LiveThroughput(job.key, event.tok_s, event.gpu_power_w, event.gpu_sm_mhz)
                )
            elif isinstance(event, LoadgenResult):
                result = event
    if result is None:
        raise HostError(job.plan.host.name, "the load generator ended without a result")
    return result


def _telemetry_spec(server: Server) -> TelemetrySpec | None:
    """Sample the GPUs the engine was launched on (those its launch checked), and name any
    process outside the engine's process group computing on them; none on a host without
    GPUs."""
    check = server.record.gpu_check if server.record is not None else None
    if check is None or not check.checked or not check.gpus:
        return None
    pgid = server.record.pgid if server.record is not None else None
    return TelemetrySpec(gpus=list(check.gpus), engine_pgid=pgid)


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


def _set_aside(requests: AppendLog, run_dir: Path) -> tuple[AppendLog, Path]:
    """Close the interrupted attempt's ``requests.jsonl``, set it aside (``_set_aside_file``)
    and open a new one."""
    requests.close()
    if requests.error is not None:  # lines were lost: the run fails on it, not later
        raise requests.error
    path = run_dir / "requests.jsonl"
    aside = _set_aside_file(path)
    return AppendLog(path), aside


def _set_aside_file(path: Path) -> Path:
    """Move an attempt's ``path`` to ``<stem>.attempt-<n><suffix>``, the first ``n`` free: a
    point measured again keeps every attempt, and nothing is overwritten."""
    n = 1
    while True:
        aside = path.with_name(f"{path.stem}.attempt-{n}{path.suffix}")
        try:
            os.link(path, aside)  # fails if ``aside`` exists
            break
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise write_error(aside, exc) from exc
    try:
        os.unlink(path)
    except OSError as exc:
        raise write_error(path, exc) from exc
    return aside


async def _died_meanwhile(server: Server, exc: OrchError) -> None:
    """Raise the engine's death (or the foreign server) instead of ``exc`` when that is what
    happened; nothing when the engine is still the one serving (or cannot be asked)."""
    try:
        await server.check_serving(when="while measuring")
    except EngineError as died:
        raise died from exc
    except OrchError:
        return


async def _judged_failed(session: _Session, result: RunResult) -> RunResult:
    """A measurement the verdict policy failed: the run says so, and when no request completed
    the result carries the engine's last log lines (the engine answered, but not with figures)."""
    assert result.error is not None and session.server is not None
    if session.fail_reason is None:
        name = session.job.plan.run.name
        session.fail_reason = mask(f"run {name!r}: {result.error.message}", session.state.secrets)
    if result.error.cause != REQUESTS_FAILED:
        return result
    tail = await session.server.log_tail()
    return result.model_copy(update={"error": result.error.model_copy(update={"log_tail": tail})})


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


def failed_result(
    job: RunJob, error: OrchError, observer: Observer | None = None
) -> list[RunResult]:
    """The results of a run that never started (its host could not be reached): its first
    measurement failed with ``error``, the others not run; masked and written."""
    started = begin_run(job)
    state = LiveState(follower=LogFollower(engine=_engine(job.plan.run)), secrets=run_secrets(job))
    session = _Session(job, state, observer or NullObserver(), started)
    return _finish(session, error=run_error(error), stop_error=None, left=[], logs=())


def not_run_results(job: RunJob, why: str, observer: Observer | None = None) -> list[RunResult]:
    """Every measurement of ``job`` recorded as not run (its host failed earlier), with why."""
    started = begin_run(job)
    state = LiveState(follower=LogFollower(engine=_engine(job.plan.run)), secrets=run_secrets(job))
    session = _Session(job, state, observer or NullObserver(), started)
    _not_run(session, [m for m in job.measurements() if m.folder not in job.kept], why)
    return _in_order(session)
