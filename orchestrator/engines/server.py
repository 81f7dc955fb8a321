"""Controller side of one engine server: start it, wait until it serves, follow its log, stop it.

Everything goes through the host's agent (``launch``, ``status``, ``tail``, ``stop``, ``http``);
the engine itself only ever listens on the host's loopback.

Dropped connections: ``tail`` remembers the byte offset just past the last line it yielded and,
when the SSH connection breaks, asks ``reconnect`` for a fresh agent and resumes from that
offset, so no line is lost or repeated. Calls that only read (status, http) are retried the
same way; ``launch`` is never retried blindly (it is not idempotent).

Cleanup: every server is entered in a :class:`ServerRegistry` *before* its launch is sent, so a
Ctrl-C that lands while ``launch`` is in flight still stops it. The registry's ``__aexit__``
stops whatever is still running, shielded from further cancellation so it always completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.agent.client import Agent
from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines import adapter_for
from orchestrator.engines.base import EngineAdapter
from orchestrator.engines.failures import classify, describe
from orchestrator.errors import AgentError, EngineError, HostError

LOG_TAIL_LINES = 40
TAIL_WINDOW_BYTES = 256 * 1024
DEFAULT_GPU_BUSY_THRESHOLD_MIB = 1024
Reconnect = Callable[[], Awaitable[Any]]  # -> a fresh Agent for the same host
Progress = Callable[[str, float], None]  # (phase, seconds waited)


@dataclass(frozen=True)
class LogLine:
    offset: int  # byte offset of the line's start in server.log
    next: int  # offset just past it: where a resumed tail starts
    text: str


@dataclass(frozen=True)
class ServerStatus:
    alive: bool
    returncode: int | None
    log_size: int | None
    uptime_s: float | None
    raw: dict[str, Any]


class Server:
    """One engine server on one host, started by this controller."""

    def __init__(self, agent: Any, *, host: HostConfig, run: Any, run_id: str, port: int,
                 adapter: EngineAdapter, reconnect: Reconnect | None = None,
                 max_reconnects: int = 5) -> None:
        self.agent = agent
        self.host = host
        self.run = run
        self.run_id = run_id
        self.port = port
        self.adapter = adapter
        self.reconnect = reconnect
        self.max_reconnects = max_reconnects
        self.record: dict[str, Any] | None = None  # launch's answer (pid, pgid, log ...)
        self.log_offset = 0  # where this launch's output starts in server.log
        self.tail_offset: int | None = None  # just past the last line tail() yielded
        self.stopped = False
        self.launch_sent = False
        self.stop_result: dict[str, Any] | None = None
        self._workdir: str | None = None

    # -- start -------------------------------------------------------------------------------
    @classmethod
    async def start(cls, agent: Any, run: Any, host: HostConfig, *, run_id: str,
                    port: int | None = None, registry: ServerRegistry | None = None,
                    reconnect: Reconnect | None = None, environ: dict[str, str] | None = None,
                    gpu_busy_threshold_mib: int = DEFAULT_GPU_BUSY_THRESHOLD_MIB) -> Server:
        """Launch ``run`` on ``host``; returns at once (the engine loads in the background).

        Refusals from the host (port in use, GPUs busy) arrive as AgentError with their kind.
        """
        adapter = adapter_for(run)
        chosen = adapter.port(run) if port is None else port
        argv = adapter.argv(run, port=chosen)
        env = adapter.env(run, host, environ=environ)
        server = cls(agent, host=host, run=run, run_id=run_id, port=chosen, adapter=adapter,
                     reconnect=reconnect)
        (registry or default_registry()).add(server)  # before launch: Ctrl-C mid-launch still stops it
        spec = {
            "run_id": run_id,
            "workdir": await server.workdir(),
            "argv": argv,
            "env": env,
            "port": chosen,
            "gpus_needed": adapter.gpus_needed(run),
            "gpu_busy_threshold_mib": gpu_busy_threshold_mib,
        }
        server.launch_sent = True
        try:
            server.record = await agent.call("launch", spec)
        except AgentError:
            server.stopped = True  # refused: nothing was started
            raise
        server.log_offset = int(server.record.get("log_offset", 0))
        return server

    async def workdir(self) -> str:
        if self._workdir is None:
            self._workdir = await self.agent.workdir()
        return self._workdir

    @property
    def served_name(self) -> str:
        return self.adapter.served_name(self.run)

    # -- calls that survive a dropped connection ----------------------------------------------
    async def _call(self, verb: str, spec: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        attempts = 0
        while True:
            try:
                return await self.agent.call(verb, spec, timeout=timeout)
            except AgentError:
                raise
            except HostError:
                attempts += 1
                if self.reconnect is None or attempts > self.max_reconnects:
                    raise
                await self._reconnect(attempts)

    async def _reconnect(self, attempt: int) -> None:
        await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 5.0))
        self.agent = await self.reconnect()  # type: ignore[misc]

    async def http(self, method: str, path: str, *, body: Any = None,
                   timeout_s: float = 10.0) -> dict[str, Any]:
        spec: dict[str, Any] = {"method": method, "port": self.port, "path": path, "timeout_s": timeout_s}
        key = self.adapter.api_key(self.run)
        if key and path.startswith("/v1/"):  # travels in the 0600 spec file, never in argv
            spec["headers"] = {"Authorization": f"Bearer {key}"}
        if body is not None:
            spec["body"] = body
        return await self._call("http", spec, timeout=timeout_s + 30)

    async def status(self) -> ServerStatus:
        data = await self._call("status", {"run_id": self.run_id, "workdir": await self.workdir()})
        raw = data["servers"][0]
        return ServerStatus(alive=bool(raw.get("alive")), returncode=raw.get("returncode"),
                            log_size=raw.get("log_size"), uptime_s=raw.get("uptime_s"), raw=raw)

    # -- readiness ---------------------------------------------------------------------------
    async def wait_ready(self, *, timeout: float, poll_interval: float = 2.0,
                         on_progress: Progress | None = None) -> float:
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
        if health.get("status") is None:
            return "starting" if phase == "starting" else "not answering"
        if health["status"] != 200:
            return f"loading (health {health['status']})"
        models = await self.http("GET", self.adapter.models_path, timeout_s=5.0)
        if models.get("status") == 200 and self.served_name in model_ids(models.get("body") or ""):
            return "ready"
        return "health ok, waiting for the model list"

    async def _died(self, state: ServerStatus) -> EngineError:
        for _ in range(20):  # the supervisor records the exit code a moment after the death
            if state.returncode is not None:
                break
            await asyncio.sleep(0.1)
            state = await self.status()
        tail = await self.log_tail()
        cause = classify(tail)
        title, hint = describe(cause)
        code = state.returncode
        message = f"{self.adapter.name} server of run {self.run.name!r} died during start-up"
        if cause is not None:
            message += f": {title}"
        if code is not None:
            message += f" (exit code {code})"
        return EngineError(self.host.name, message, cause=cause, log_tail=tail, exit_code=code,
                           hint=hint)

    # -- log ---------------------------------------------------------------------------------
    async def tail(self, *, offset: int | None = None, follow: bool = True, until_exit: bool = True,
                   idle_timeout_s: float | None = None) -> AsyncIterator[LogLine]:
        """Yield log lines from ``offset`` (default: this launch's first line), resuming after drops.

        ``tail_offset`` follows the last line yielded, so a caller can resume a later tail there.
        """
        async for line in self._tail(offset=offset, follow=follow, until_exit=until_exit,
                                     idle_timeout_s=idle_timeout_s):
            self.tail_offset = line.next
            yield line

    async def _tail(self, *, offset: int | None, follow: bool, until_exit: bool,
                    idle_timeout_s: float | None) -> AsyncIterator[LogLine]:
        position = self.log_offset if offset is None else offset
        attempts = 0
        while True:
            spec = {"run_id": self.run_id, "workdir": await self.workdir(), "offset": position,
                    "follow": follow, "until_exit": until_exit, "idle_timeout_s": idle_timeout_s}
            try:
                async with contextlib.aclosing(self.agent.stream("tail", spec)) as events:
                    async for event in events:
                        if event["event"] == "line":
                            line = LogLine(int(event["offset"]), int(event["next"]), str(event["text"]))
                            position = line.next
                            attempts = 0
                            yield line
                        elif event["event"] == "result":
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
        if answer.get("status") != 200:
            raise EngineError(
                self.host.name,
                f"GET {self.adapter.metrics_path} of run {self.run.name!r} answered "
                f"{answer.get('status') or answer.get('error')}",
            )
        return str(answer["body"])

    async def stop(self, *, timeout_s: float = 30.0, gpu_timeout_s: float = 60.0) -> dict[str, Any]:
        """SIGTERM, then SIGKILL, the engine's process group; waits for its GPU memory to free."""
        if self.stopped or not self.launch_sent:
            self.stopped = True
            return self.stop_result or {"stopped": []}
        spec = {"run_id": self.run_id, "workdir": await self.workdir(), "timeout_s": timeout_s,
                "gpu_timeout_s": gpu_timeout_s}
        # A launch interrupted in flight may still be recording server.json: retry not_found.
        attempts = 1 if self.record is not None else 15
        result: dict[str, Any] = {"stopped": []}
        for attempt in range(attempts):
            try:
                result = await self._call("stop", spec, timeout=timeout_s + gpu_timeout_s + 60)
                break
            except AgentError as exc:
                if exc.kind != "not_found":
                    raise
                if attempt + 1 < attempts:
                    await asyncio.sleep(0.2)
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
    """Every server this controller started; ``async with`` stops the ones still running."""

    def __init__(self) -> None:
        self._servers: list[Server] = []

    def add(self, server: Server) -> None:
        self._servers.append(server)

    @property
    def running(self) -> list[Server]:
        return [s for s in self._servers if not s.stopped]

    async def stop_all(self, *, timeout_s: float = 30.0) -> list[BaseException | dict[str, Any]]:
        servers = self.running
        results = await asyncio.gather(*(s.stop(timeout_s=timeout_s) for s in servers),
                                       return_exceptions=True)
        return list(results)

    async def __aenter__(self) -> ServerRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await shielded(self.stop_all())


async def shielded(coro: Awaitable[Any]) -> Any:
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


_DEFAULT = ServerRegistry()


def pool_reconnect(pool: Any, host: HostConfig, agent: Any) -> Reconnect:
    """A ``reconnect`` for Server: the pool opens a new connection when the old one dropped."""
    async def again() -> Any:
        return Agent(await pool.get(host), host, bundle=agent.bundle)

    return again


def default_registry() -> ServerRegistry:
    """The registry of this controller process (used when Server.start gets none)."""
    return _DEFAULT
