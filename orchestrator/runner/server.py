"""Controller side of one engine server: start it, wait until it serves, follow its log, stop it.

Everything goes through the host's agent (``launch``, ``status``, ``tail``, ``stop``, ``http``,
its typed methods); the engine itself only ever listens on the host's loopback. The engine
object (``orchestrator.engines``) says what to launch and how to read its failures; this module
is the I/O around it, which is why it lives with the runner and not in the pure engines package.

Dropped connections: ``tail`` remembers the byte offset just past the last line it yielded and,
when the SSH connection breaks, asks ``reconnect`` for a fresh agent and resumes from that
offset, so no line is lost or repeated. Calls that only read (status, http) are retried the
same way; ``launch`` is never retried blindly (it is not idempotent).

Cleanup: every server is entered in the caller's :class:`ServerRegistry` *before* its launch is
sent, so a Ctrl-C that lands while ``launch`` is in flight still stops it. The registry's
``__aexit__`` stops whatever is still running, shielded from further cancellation so it always
completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.agent.client import Agent, AgentClient
from orchestrator.config.hostconfig import HostConfig
from orchestrator.config.playbook import RunSpec
from orchestrator.engines import engine_for
from orchestrator.engines.base import Engine
from orchestrator.errors import AgentError, EngineError, HostError
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
    TailLine,
    TailResult,
    TailSpec,
)

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

LOG_TAIL_LINES = 40
TAIL_WINDOW_BYTES = 256 * 1024
DEFAULT_GPU_BUSY_THRESHOLD_MIB = 1024
STOP_NOT_FOUND_RETRIES = 15  # a launch cut off in flight may still be writing server.json
STOP_RETRY_S = 0.2
RECONNECT_BACKOFF_S = 0.2  # doubled per failed attempt, at most RECONNECT_BACKOFF_MAX_S
RECONNECT_BACKOFF_MAX_S = 5.0
DIED_POLL_S = 0.1  # the supervisor records the exit code a moment after the death
Reconnect = Callable[[], Awaitable[AgentClient]]  # -> a fresh agent for the same host
Progress = Callable[[str, float], None]  # (phase, seconds waited)
LogLine = TailLine  # one line of server.log: offset, next (where a resumed tail starts), text
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
        adapter: Engine,
        reconnect: Reconnect | None = None,
        max_reconnects: int = 5,
    ) -> None:
        self.agent = agent
        self.host = host
        self.run = run
        self.run_id = run_id
        self.port = port
        self.adapter = adapter
        self.reconnect = reconnect
        self.max_reconnects = max_reconnects
        self.record: LaunchResult | None = None  # launch's answer (pid, pgid, log ...)
        self.log_offset = 0  # where this launch's output starts in server.log
        self.tail_offset: int | None = None  # just past the last line tail() yielded
        self.stopped = False
        self.launch_sent = False
        self.stop_result: StopResult | None = None
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
    ) -> Server:
        """Launch ``run`` on ``host``; returns at once (the engine loads in the background).

        Refusals from the host (port in use, GPUs busy) arrive as AgentError with their kind.
        """
        adapter = engine_for(run)
        chosen = adapter.port(run) if port is None else port
        server = cls(
            agent,
            host=host,
            run=run,
            run_id=run_id,
            port=chosen,
            adapter=adapter,
            reconnect=reconnect,
        )
        registry.add(server)  # before launch: Ctrl-C mid-launch still stops it
        spec = LaunchSpec(
            run_id=run_id,
            workdir=await server.workdir(),
            argv=adapter.argv(run, port=chosen),
            env=adapter.env(run, host, environ=environ),
            port=chosen,
            gpus_needed=adapter.gpus_needed(run),
            gpu_busy_threshold_mib=gpu_busy_threshold_mib,
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
        return self.adapter.served_name(self.run)

    # -- calls that survive a dropped connection ----------------------------------------------
    async def _retrying(self, call: Callable[[AgentClient], Awaitable[T]]) -> T:
        attempts = 0
        while True:
            try:
                return await call(self.agent)
            except AgentError:
                raise
            except HostError:
                attempts += 1
                if self.reconnect is None or attempts > self.max_reconnects:
                    raise
                await self._reconnect(attempts)

    async def _reconnect(self, attempt: int) -> None:
        assert self.reconnect is not None
        await asyncio.sleep(min(RECONNECT_BACKOFF_S * 2 ** (attempt - 1), RECONNECT_BACKOFF_MAX_S))
        self.agent = await self.reconnect()

    async def http(
        self, method: str, path: str, *, body: Any = None, timeout_s: float = 10.0
    ) -> HttpResult:
        key = self.adapter.api_key(self.run)
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

        A process that dies meanwhile fails at once with its exit code, the classified cause
        and the last log lines; a timeout fails with the log lines too.
        """
        started = time.monotonic()
        phase = "starting"
        while True:
            elapsed = time.monotonic() - started
            state = await self.status()
            if not state.alive:
                raise await self._died(state)
            phase = await self._probe_ready(phase)
            if phase == "ready":
                return time.monotonic() - started
            if on_progress is not None:
                on_progress(phase, elapsed)
            if elapsed >= timeout:
                raise EngineError(
                    self.host.name,
                    f"{self.adapter.name} server of run {self.run.name!r} was not ready after "
                    f"{timeout:g} s (last state: {phase})",
                    log_tail=await self.log_tail(),
                    hint="large models take minutes to load: raise ready_timeout_s in the playbook",
                )
            await asyncio.sleep(poll_interval)

    async def _probe_ready(self, phase: str) -> str:
        health = await self.http("GET", self.adapter.health_path, timeout_s=5.0)
        if health.status is None:
            return "starting" if phase == "starting" else "not answering"
        if health.status != 200:
            return f"loading (health {health.status})"
        models = await self.http("GET", self.adapter.models_path, timeout_s=5.0)
        if models.status == 200 and self.served_name in model_ids(models.body):
            return "ready"
        return "health ok, waiting for the model list"

    async def _died(self, state: ServerState) -> EngineError:
        for _ in range(20):
            if state.returncode is not None:
                break
            await asyncio.sleep(DIED_POLL_S)
            state = await self.status()
        tail = await self.log_tail()
        cause = self.adapter.classify_failure(tail)
        title, hint = self.adapter.describe_failure(cause)
        code = state.returncode
        message = f"{self.adapter.name} server of run {self.run.name!r} died during start-up"
        if cause is not None:
            message += f": {title}"
        if code is not None:
            message += f" (exit code {code})"
        return EngineError(
            self.host.name, message, cause=cause, log_tail=tail, exit_code=code, hint=hint
        )

    # -- log ---------------------------------------------------------------------------------
    async def tail(
        self,
        *,
        offset: int | None = None,
        follow: bool = True,
        until_exit: bool = True,
        idle_timeout_s: float | None = None,
    ) -> AsyncGenerator[LogLine, None]:
        """Yield log lines from ``offset`` (default: this launch's first line), resuming after drops.

        ``tail_offset`` follows the last line yielded, so a caller can resume a later tail there.
        """
        async with contextlib.aclosing(
            self._tail(
                offset=offset, follow=follow, until_exit=until_exit, idle_timeout_s=idle_timeout_s
            )
        ) as lines:
            async for line in lines:
                self.tail_offset = line.next
                yield line

    async def _tail(
        self, *, offset: int | None, follow: bool, until_exit: bool, idle_timeout_s: float | None
    ) -> AsyncGenerator[LogLine, None]:
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
                        if isinstance(event, TailLine):
                            position = event.next
                            attempts = 0
                            yield event
                        elif isinstance(event, TailResult):
                            return
                return
            except AgentError:
                raise
            except HostError:
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
                async for line in stream:
                    collected.append(line.text)
            if start > self.log_offset and collected:
                collected = collected[1:]  # the window may start mid-line
            return collected[-lines:]
        except HostError:
            return []

    # -- metrics and stop --------------------------------------------------------------------
    async def metrics(self) -> str:
        answer = await self.http("GET", self.adapter.metrics_path)
        if answer.status != 200:
            raise EngineError(
                self.host.name,
                f"GET {self.adapter.metrics_path} of run {self.run.name!r} answered "
                f"{answer.status or answer.error}",
            )
        return answer.body

    async def stop(self, *, timeout_s: float = 30.0, gpu_timeout_s: float = 60.0) -> StopResult:
        """SIGTERM, then SIGKILL, the engine's process group; waits for its GPU memory to free."""
        if self.stopped or not self.launch_sent:
            self.stopped = True
            return self.stop_result or StopResult(stopped=[])
        spec = StopSpec(
            run_id=self.run_id,
            workdir=await self.workdir(),
            timeout_s=timeout_s,
            gpu_timeout_s=gpu_timeout_s,
        )
        # A launch interrupted in flight may still be recording server.json: retry not_found.
        attempts = 1 if self.record is not None else STOP_NOT_FOUND_RETRIES
        result = StopResult(stopped=[])
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
        self.stopped = True
        self.stop_result = result
        return result


def model_ids(body: str) -> list[str]:
    """Ids listed by an OpenAI-style ``/v1/models`` body ([] if it is not one)."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    return [str(m.get("id")) for m in items or [] if isinstance(m, dict)]


class ServerRegistry:
    """Every server a command started; ``async with`` stops the ones still running."""

    def __init__(self) -> None:
        self._servers: list[Server] = []

    def add(self, server: Server) -> None:
        self._servers.append(server)

    @property
    def running(self) -> list[Server]:
        return [s for s in self._servers if not s.stopped]

    async def stop_all(self, *, timeout_s: float = 30.0) -> list[BaseException | StopResult]:
        servers = self.running
        results = await asyncio.gather(
            *(s.stop(timeout_s=timeout_s) for s in servers), return_exceptions=True
        )
        return list(results)

    async def __aenter__(self) -> ServerRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await shielded(self.stop_all())


async def shielded(coro: Awaitable[T]) -> T:
    """Run ``coro`` to the end even if we are cancelled meanwhile (Ctrl-C), then re-cancel."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


def pool_reconnect(pool: ConnectionPool, host: HostConfig, agent: AgentClient) -> Reconnect:
    """A ``reconnect`` for Server: the pool opens a new connection when the old one dropped."""

    async def again() -> AgentClient:
        return Agent(await pool.get(host), host, bundle=agent.bundle)

    return again
