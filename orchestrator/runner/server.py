"""Controller side of one engine server: start it, wait until it serves, follow its log, stop it.

Everything goes through the host's agent (``launch``, ``status``, ``tail``, ``stop``, ``http``,
its typed methods); the engine itself only ever listens on the host's loopback. The engine
object (``orchestrator.engines``) says what to launch and how to read its failures; this module
is the I/O around it, which is why it lives with the runner and not in the pure engines package.

Dropped connections: ``tail`` remembers the byte offset just past the last batch of lines it
yielded and, when the SSH connection breaks, asks ``reconnect`` for a fresh agent and resumes
from that offset, so no line is lost or repeated (a batch arrives whole or not at all: it is
one line of the agent's output). Calls that only read (status, http) are retried the
same way; ``launch`` is never retried blindly (it is not idempotent).

Cleanup: every server is entered in the caller's :class:`ServerRegistry` *before* its launch is
sent, so a Ctrl-C that lands while ``launch`` is in flight still stops it. The registry's
``__aexit__`` stops whatever is still running, shielded from further cancellation so it always
completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.agent.client import Agent, AgentClient
from orchestrator.aio import shielded
from orchestrator.config.hostconfig import HostConfig
from orchestrator.config.playbook import RunSpec
from orchestrator.engines import engine_for, failures
from orchestrator.engines.base import Engine
from orchestrator.errors import (
    AgentError,
    EngineError,
    HostError,
    HostTimeout,
    HostUnreachable,
    OrchError,
)
from orchestrator.remote.wire import (
    ErrorKind,
    HttpResult,
    HttpSpec,
    LaunchResult,
    LaunchSpec,
    ServerState,
    StatusSpec,
    StopResult,
    StopSpec,
    TailLines,
    TailResult,
    TailSpec,
)
from orchestrator.runner.progress import Observer, ServerLeftRunning, StoppingServers

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

LOG_TAIL_LINES = 40
CLASSIFY_LINES = 400  # lines read to name a start-up death's cause (within TAIL_WINDOW_BYTES)
TAIL_WINDOW_BYTES = 256 * 1024
DEFAULT_GPU_BUSY_THRESHOLD_MIB = 1024
STOP_NOT_FOUND_RETRIES = 15  # a launch cut off in flight may still be writing server.json
STOP_RETRY_S = 0.2
RECONNECT_BACKOFF_S = 0.2  # doubled per failed attempt, at most RECONNECT_BACKOFF_MAX_S
RECONNECT_BACKOFF_MAX_S = 5.0
FIRST_POLL_S = 0.1  # readiness: then 0.2, 0.4 ... up to the poll interval
DIED_POLL_S = 0.1  # the supervisor records the exit code a moment after the death
Reconnect = Callable[[], Awaitable[AgentClient]]  # -> a fresh agent for the same host
Progress = Callable[[str, float], None]  # (phase, seconds waited)
LogLines = TailLines  # lines of server.log: offset, next (where a resumed tail starts), lines
T = TypeVar("T")


class Server:
    """One engine server on one host, started by this controller."""

    def __init__(
        self,
        agent: AgentClient,
        *,
        host: HostConfig,
        run: RunSpec,
        run_id: str,
        port: int,
        engine: Engine,
        reconnect: Reconnect | None = None,
        max_reconnects: int = 5,
    ) -> None:
        self.agent = agent
        self.host = host
        self.run = run
        self.run_id = run_id
        self.port = port
        self.engine = engine
        self.reconnect = reconnect
        self.max_reconnects = max_reconnects
        self.record: LaunchResult | None = None  # launch's answer (pid, pgid, log ...)
        self.log_offset = 0  # where this launch's output starts in server.log
        self.tail_offset: int | None = None  # just past the last lines tail() yielded
        self.stopped = False
        self.launch_sent = False
        self.stop_result: StopResult | None = None
        self.registry: ServerRegistry | None = None  # set by ServerRegistry.add
        self._workdir: str | None = None

    # -- start -------------------------------------------------------------------------------
    @classmethod
    async def start(
        cls,
        agent: AgentClient,
        run: RunSpec,
        host: HostConfig,
        *,
        run_id: str,
        registry: ServerRegistry,
        port: int | None = None,
        reconnect: Reconnect | None = None,
        environ: dict[str, str] | None = None,
        gpu_busy_threshold_mib: int = DEFAULT_GPU_BUSY_THRESHOLD_MIB,
        gpu_ids: Sequence[int] | None = None,
    ) -> Server:
        """Launch ``run`` on ``host``; returns at once (the engine loads in the background).

        ``gpu_ids``: the GPUs the run was given on a shared host (``share_gpus``); the agent
        sets ``CUDA_VISIBLE_DEVICES`` to them and checks only them. Refusals from the host
        (port in use, GPUs busy) arrive as AgentError with their kind.
        """
        engine = engine_for(run)
        chosen = engine.port(run) if port is None else port
        server = cls(
            agent,
            host=host,
            run=run,
            run_id=run_id,
            port=chosen,
            engine=engine,
            reconnect=reconnect,
        )
        registry.add(server)  # before launch: Ctrl-C mid-launch still stops it
        spec = LaunchSpec(
            run_id=run_id,
            workdir=await server.workdir(),
            argv=engine.argv(run, port=chosen),
            env=engine.env(run, host, environ=environ),
            port=chosen,
            gpus_needed=0 if host.cpu_only else engine.gpus_needed(run),  # CPU: none to check
            gpu_busy_threshold_mib=gpu_busy_threshold_mib,
            gpu_ids=None if gpu_ids is None else list(gpu_ids),
        )
        server.launch_sent = True
        try:
            server.record = await agent.launch(spec)
        except AgentError:
            server.stopped = True  # refused: nothing was started
            raise
        server.log_offset = server.record.log_offset
        return server

    async def workdir(self) -> str:
        if self._workdir is None:
            self._workdir = await self.agent.workdir()
        return self._workdir

    @property
    def served_name(self) -> str:
        return self.engine.served_name(self.run)

    # -- calls that survive a dropped connection ----------------------------------------------
    async def _retrying(self, call: Callable[[AgentClient], Awaitable[T]]) -> T:
        attempts = 0
        while True:
            try:
                return await call(self.agent)
            except AgentError:
                raise
            except HostUnreachable:  # the connection dropped: another error would come again
                attempts += 1
                if self.reconnect is None or attempts > self.max_reconnects:
                    raise
                await self._reconnect(attempts)

    async def reattach(self) -> AgentClient:
        """A fresh agent after a dropped connection (tried like the reads: with back-off, at
        most ``max_reconnects`` times); the same agent when there is no ``reconnect``."""
        attempts = 0
        while self.reconnect is not None:
            try:
                self.agent = await self.reconnect()
                break
            except HostUnreachable:
                attempts += 1
                if attempts > self.max_reconnects:
                    raise
                await asyncio.sleep(_backoff(attempts))
        return self.agent

    async def _reconnect(self, attempt: int) -> None:
        assert self.reconnect is not None
        await asyncio.sleep(_backoff(attempt))
        self.agent = await self.reconnect()

    async def http(
        self, method: str, path: str, *, body: Any = None, timeout_s: float = 10.0
    ) -> HttpResult:
        key = self.engine.api_key(self.run)
        # the key travels in the 0600 spec file, never in argv
        headers = {"Authorization": f"Bearer {key}"} if key and path.startswith("/v1/") else {}
        spec = HttpSpec(
            method=method,
            port=self.port,
            path=path,
            headers=headers,
            body=body,
            timeout_s=timeout_s,
        )
        return await self._retrying(lambda agent: agent.http(spec, timeout=timeout_s + 30))

    async def status(self) -> ServerState:
        spec = StatusSpec(run_id=self.run_id, workdir=await self.workdir())
        result = await self._retrying(lambda agent: agent.status(spec))
        return result.servers[0]

    # -- readiness ---------------------------------------------------------------------------
    async def wait_ready(
        self, *, timeout: float, poll_interval: float = 2.0, on_progress: Progress | None = None
    ) -> float:
        """Poll health, then /v1/models until the served name is listed; seconds it took.

        Each question is an agent call (a process on the host), so a poll asks no more than it
        must; the first polls come quickly, then every ``poll_interval``: an engine that is
        ready at once is seen at once, a slow one costs no more polls.

        A process that dies meanwhile fails at once with its exit code, the classified cause
        and the last log lines; a timeout fails with the log lines too.
        """
        started = time.monotonic()
        phase = "starting"
        polls = 0
        while True:
            elapsed = time.monotonic() - started
            state = await self.status()
            if not state.alive:
                raise await self._died(state)
            self.check_identity(state)
            phase = await self._probe_ready(phase)
            if phase == "ready":
                # who answered? only the engine this run launched counts as ready: when it held
                # the port before the answer, nobody else could; else look again
                if state.port_owner != "launched":
                    state = await self.status()
                    if not state.alive:
                        raise await self._died(state)
                    self.check_identity(state)
                if state.port_owner != "none":
                    return time.monotonic() - started
                phase = "answering, but nothing listens on the port yet"
            if on_progress is not None:
                on_progress(phase, elapsed)
            if elapsed >= timeout:
                raise EngineError(
                    self.host.name,
                    f"{self.engine.name} server of run {self.run.name!r} was not ready after "
                    f"{timeout:g} s (last state: {phase})",
                    log_tail=await self.log_tail(),
                    hint="large models take minutes to load: raise ready_timeout_s in the playbook",
                )
            await asyncio.sleep(min(poll_interval, FIRST_POLL_S * 2 ** min(polls, 16)))
            polls += 1

    async def _probe_ready(self, phase: str) -> str:
        health = await self.http("GET", self.engine.health_path, timeout_s=5.0)
        if health.status is None:
            return "starting" if phase == "starting" else "not answering"
        if health.status != 200:
            return f"loading (health {health.status})"
        models = await self.http("GET", self.engine.models_path, timeout_s=5.0)
        if models.status == 200 and self.served_name in model_ids(models.body):
            return "ready"
        return "health ok, waiting for the model list"

    async def _died(self, state: ServerState, *, when: str = "during start-up") -> EngineError:
        stopped = self.stopped_error(state, when=when)
        if stopped is not None:
            return stopped
        for _ in range(20):
            if state.returncode is not None:
                break
            await asyncio.sleep(DIED_POLL_S)
            state = await self.status()
        # the cause is sought well above the lines shown: vLLM's root cause comes before a
        # hundred lines of EngineCore and API-server tracebacks (the real 0.32 build)
        window = await self.log_tail(CLASSIFY_LINES)
        tail = window[-LOG_TAIL_LINES:]
        cause = self.engine.classify_failure(window)
        if cause is None and when != "during start-up":
            cause = failures.ENGINE_DIED
        title, hint = self.engine.describe_failure(cause)
        code = state.returncode
        message = f"{self.engine.name} server of run {self.run.name!r} died {when}"
        if cause is not None and cause != failures.ENGINE_DIED:
            message += f": {title}"
        if state.exit is not None and state.exit.signal:
            message += f" (killed by {state.exit.signal})"
        elif code is not None:
            message += f" (exit code {code})"
        if state.port_owner == "foreign":
            # it lost its port to another server (which answered meanwhile): say so first
            message += f"; {self._foreign(state)}"
            cause = failures.ANOTHER_SERVER
            hint = self.engine.describe_failure(cause)[1]
        return EngineError(
            self.host.name, message, cause=cause, log_tail=tail, exit_code=code, hint=hint
        )

    def stopped_error(self, state: ServerState, *, when: str) -> EngineError | None:
        """The error of a server someone stopped with `orch stop` (its ``stop.json``), or None.
        Its SIGKILL after the grace is then no mystery to blame on the OOM killer."""
        mark = state.stop
        if mark is None:
            return None
        at = time.strftime("%H:%M:%S", time.localtime(mark.at))
        message = (
            f"{self.engine.name} server of run {self.run.name!r} was stopped by `orch stop` "
            f"at {at} (from {mark.by}) {when}"
        )
        if state.exit is not None and state.exit.signal:
            message += f" (ended by {state.exit.signal})"
        return EngineError(
            self.host.name,
            message,
            cause=failures.STOPPED,
            exit_code=state.returncode,
            hint=self.engine.describe_failure(failures.STOPPED)[1],
        )

    # -- identity: what answers is the engine this run launched ----------------------------
    def check_identity(self, state: ServerState) -> None:
        """Raise when another process listens on the run's port: what answers there may not
        be this run's engine (a stale server, another run's, someone else's). ``unknown``
        (no /proc on the host) and ``None`` (not checked) pass: nothing to tell them apart."""
        if state.port_owner == "foreign":
            raise EngineError(
                self.host.name,
                f"{self.engine.name} server of run {self.run.name!r}: {self._foreign(state)}",
                cause=failures.ANOTHER_SERVER,
                hint=self.engine.describe_failure(failures.ANOTHER_SERVER)[1],
            )

    def _foreign(self, state: ServerState) -> str:
        others = [h for h in state.port_holders if not h.launched]
        who = (
            "; ".join(f"pid {h.pid} ({h.cmdline})" for h in others)
            or "a process this user cannot see"
        )
        return (
            f"another server answered on 127.0.0.1:{self.port}: {who} is not the engine this "
            f"run launched (pid {state.pid})"
        )

    async def check_serving(self, *, when: str = "while measuring") -> ServerState:
        """After measuring: the engine must still be alive and still the one answering, or the
        figures may be another server's (or no server's): raises EngineError otherwise."""
        state = await self.status()
        stopped = self.stopped_error(state, when=when)  # shutting down: its figures are cut
        if stopped is not None:
            raise stopped
        if not state.alive:
            raise await self._died(state, when=when)
        self.check_identity(state)
        return state

    # -- log ---------------------------------------------------------------------------------
    async def tail(
        self,
        *,
        offset: int | None = None,
        follow: bool = True,
        until_exit: bool = True,
        idle_timeout_s: float | None = None,
    ) -> AsyncGenerator[LogLines, None]:
        """Yield log lines from ``offset`` (default: this launch's first line), a batch at a time
        (the lines of one read of the log on the host), resuming after drops.

        ``tail_offset`` follows the last batch yielded, so a caller can resume a later tail there.
        """
        async with contextlib.aclosing(
            self._tail(
                offset=offset, follow=follow, until_exit=until_exit, idle_timeout_s=idle_timeout_s
            )
        ) as batches:
            async for batch in batches:
                self.tail_offset = batch.next
                yield batch

    async def _tail(
        self, *, offset: int | None, follow: bool, until_exit: bool, idle_timeout_s: float | None
    ) -> AsyncGenerator[LogLines, None]:
        position = self.log_offset if offset is None else offset
        attempts = 0
        while True:
            spec = TailSpec(
                run_id=self.run_id,
                workdir=await self.workdir(),
                offset=position,
                follow=follow,
                until_exit=until_exit,
                idle_timeout_s=idle_timeout_s,
            )
            try:
                async with contextlib.aclosing(self.agent.tail(spec)) as events:
                    async for event in events:
                        if isinstance(event, TailLines):
                            position = event.next
                            attempts = 0
                            yield event
                        elif isinstance(event, TailResult):
                            return
                return
            except AgentError:
                raise
            except (HostUnreachable, HostTimeout):  # dropped, or silent: maybe a dead link
                attempts += 1
                if self.reconnect is None or attempts > self.max_reconnects:
                    raise
                await self._reconnect(attempts)

    async def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last ``lines`` lines this launch wrote (best effort: [] if the host is gone)."""
        try:
            state = await self.status()
            start = self.log_offset
            if state.log_size is not None:
                start = max(start, state.log_size - TAIL_WINDOW_BYTES)
            collected: list[str] = []
            async with contextlib.aclosing(
                self._tail(offset=start, follow=False, until_exit=False, idle_timeout_s=None)
            ) as stream:
                async for batch in stream:
                    collected.extend(batch.lines)
            if start > self.log_offset and collected:
                collected = collected[1:]  # the window may start mid-line
            return collected[-lines:]
        except HostError:
            return []

    # -- metrics and stop --------------------------------------------------------------------
    async def metrics(self) -> str:
        answer = await self.http("GET", self.engine.metrics_path)
        if answer.status != 200:
            raise EngineError(
                self.host.name,
                f"GET {self.engine.metrics_path} of run {self.run.name!r} answered "
                f"{answer.status or answer.error}",
            )
        return answer.body

    async def stop(self, *, timeout_s: float = 30.0, gpu_timeout_s: float = 60.0) -> StopResult:
        """SIGTERM, then SIGKILL, the engine's process group; waits for its GPU memory to free
        (not on a CPU host, whose engine holds none).

        A stop that could not run (the host unreachable, its agent failing) or that left the
        engine's processes running raises ``StopFailed``, which names the commands that list
        and stop it: a server must never be left holding its port and GPUs without a word.
        """
        if self.stopped or not self.launch_sent:
            self.stopped = True
            return self.stop_result or StopResult(stopped=[])
        if self.registry is not None and _cancelling():  # a clean-up: say what it waits for
            self.registry.tell_stopping({self.host.name: 1}, timeout_s)
        if self.host.cpu_only:
            gpu_timeout_s = 0.0
        spec = StopSpec(
            run_id=self.run_id,
            workdir=await self.workdir(),
            timeout_s=timeout_s,
            gpu_timeout_s=gpu_timeout_s,
            wait_gpus=not self.host.cpu_only,
        )
        # A launch interrupted in flight may still be recording server.json: retry not_found.
        attempts = 1 if self.record is not None else STOP_NOT_FOUND_RETRIES
        result = StopResult(stopped=[])
        try:
            for attempt in range(attempts):
                try:
                    result = await self._retrying(
                        lambda agent: agent.stop(spec, timeout=timeout_s + gpu_timeout_s + 60)
                    )
                    break
                except AgentError as exc:
                    if exc.kind is not ErrorKind.NOT_FOUND:
                        raise
                    if attempt + 1 < attempts:
                        await asyncio.sleep(STOP_RETRY_S)
        except HostError as exc:
            self.stopped = True  # not tried again: the error says what to do
            kind = exc.kind if isinstance(exc, AgentError) else ErrorKind.STOP_FAILED
            raise self.stop_failed(f"stop failed: {without_host(exc)}", kind=kind) from exc
        self.stopped = True
        self.stop_result = result
        left = sorted({pid for outcome in result.stopped for pid in outcome.remaining_pids})
        if left:
            raise self.stop_failed(
                f"its processes survived SIGTERM and SIGKILL (pid {', '.join(map(str, left))})"
            )
        return result

    def stop_failed(self, why: str, *, kind: ErrorKind = ErrorKind.STOP_FAILED) -> StopFailed:
        host = self.host.name
        return StopFailed(
            host,
            f"the {self.engine.name} server of run {self.run.name!r} (run id {self.run_id}, "
            f"port {self.port}) may still be running on {host}, holding its port and GPUs: {why}",
            hint=f"list it with `orch ps --only {host}`; stop it with `orch stop {self.run_id} "
            f"--only {host}` or every server there with `orch stop --all --only {host}` "
            "(add --hosts FILE if not hosts.yaml)",
            kind=kind,
        )


class StopFailed(AgentError):
    """A server orch started may still be running: its stop could not run or did not end it."""


def _backoff(attempt: int) -> float:
    """Seconds to wait before reconnect ``attempt`` (1, 2, ...): doubled each time, capped."""
    return min(RECONNECT_BACKOFF_S * 2 ** (attempt - 1), RECONNECT_BACKOFF_MAX_S)


def without_host(exc: HostError) -> str:
    return exc.message.removeprefix(f"{exc.host}: ")


def _cancelling() -> bool:
    """Whether the current task is being cancelled (Ctrl-C): its clean-up is under way."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if cancelling is not None else False


def model_ids(body: str) -> list[str]:
    """Ids listed by an OpenAI-style ``/v1/models`` body ([] if it is not one)."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    return [str(m.get("id")) for m in items or [] if isinstance(m, dict)]


class ServerRegistry:
    """Every server a command started; ``async with`` stops the ones still running.

    ``observer`` is told what the clean-up waits for (``StoppingServers`` per host) and every
    stop that failed (``ServerLeftRunning``): after a Ctrl-C, nothing is waited on silently."""

    def __init__(self, observer: Observer | None = None) -> None:
        self._servers: list[Server] = []
        self._observer = observer

    def add(self, server: Server) -> None:
        self._servers.append(server)
        server.registry = self

    def tell_stopping(self, per_host: dict[str, int], timeout_s: float) -> None:
        if self._observer is not None:
            for host, count in per_host.items():
                self._observer.on_event(StoppingServers(host, count, timeout_s))

    @property
    def running(self) -> list[Server]:
        return [s for s in self._servers if not s.stopped]

    async def stop_all(self, *, timeout_s: float = 30.0) -> list[BaseException | StopResult]:
        servers = self.running
        per_host: dict[str, int] = {}
        for server in servers:
            per_host[server.host.name] = per_host.get(server.host.name, 0) + 1
            server.registry = None  # told here, all at once
        self.tell_stopping(per_host, timeout_s)
        results = await asyncio.gather(
            *(s.stop(timeout_s=timeout_s) for s in servers), return_exceptions=True
        )
        for server, result in zip(servers, results, strict=True):
            if isinstance(result, OrchError) and self._observer is not None:
                message = result.message.removeprefix(f"{server.host.name}: ")
                self._observer.on_event(ServerLeftRunning(server.host.name, message, result.hint))
        return list(results)

    async def __aenter__(self) -> ServerRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await shielded(self.stop_all())


def pool_reconnect(pool: ConnectionPool, host: HostConfig, agent: AgentClient) -> Reconnect:
    """A ``reconnect`` for Server: the pool opens a new connection when the old one dropped."""

    async def again() -> AgentClient:
        if isinstance(agent, Agent) and agent.reconnects:
            await agent.live()  # the same agent (already checked and pushed), reconnected
            return agent
        return Agent(
            await pool.get(host),
            host,
            bundle=agent.bundle,
            connect=functools.partial(pool.get, host),
        )

    return again


async def live_agent(pool: ConnectionPool, host: HostConfig, agent: AgentClient) -> AgentClient:
    """``agent`` on a live connection: re-opened through the pool when it dropped (a run must
    never be handed an agent whose connection died during the run before)."""
    if not isinstance(agent, Agent):
        return agent  # an in-memory agent has no connection to lose
    if agent.reconnects or getattr(agent.conn, "closed", False):
        return await pool_reconnect(pool, host, agent)()
    return agent
