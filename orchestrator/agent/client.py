"""Controller side of the remote agent: push it once, push a spec, run a verb, decode JSON lines.

The only command ever sent is ``<python> <workdir>/agent-<hash>.pyz <verb> <spec path>``, all
controller-owned paths; every user value (model names, flags, prompts, environment values)
travels inside the spec file, which goes over SFTP, so no shell ever sees it.

Each verb has a typed method taking its spec and returning its result as defined once in
``orchestrator.remote.wire`` (the same module the agent runs); ``AgentClient`` is that
interface, which the in-memory ``FakeAgent`` implements too. A line of another contract
version is refused with a plain message, never guessed at.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from orchestrator.agent.bundle import AgentBundle, build_bundle
from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines import engine_packages
from orchestrator.errors import AgentError, ConfigError, OrchError, RemoteCommandError
from orchestrator.remote.wire import (
    CONTRACT_VERSION,
    ContractMismatch,
    EchoResult,
    EchoSpec,
    ErrorEvent,
    ErrorKind,
    HttpResult,
    HttpSpec,
    LaunchResult,
    LaunchSpec,
    LoadgenEvent,
    LoadgenResult,
    LoadgenSpec,
    PhaseEvent,
    ProbeResult,
    ProbeSpec,
    ProgressEvent,
    ReadModelConfigsResult,
    ReadModelConfigsSpec,
    RequestRecord,
    StatusResult,
    StatusSpec,
    StopResult,
    StopSpec,
    TailEvent,
    TailHeartbeat,
    TailLine,
    TailResult,
    TailSpec,
    Wire,
    WireError,
    spec_file,
)
from orchestrator.remote.wire import decode_line as decode_wire_line

# asked about besides the engines' own packages (their versions explain engine behaviour)
PROBE_LIBRARIES = ("torch", "transformers")
_VERB = re.compile(r"^[a-z][a-z0-9_]*$")
_TAIL_LINES = 15
PYTHON_HINT = (
    "is `python` in hosts.yaml a Python 3.9+ interpreter on that host? It is run as given "
    "(e.g. /opt/venvs/vllm/bin/python), without your login shell's PATH tweaks"
)
CONTRACT_HINT = (
    "the agent on that host is not the one this orch ships: run the same orch version that "
    "pushed it, or delete the agent-*.pyz files in the host's workdir so this one is pushed"
)
R = TypeVar("R", bound=Wire)


def probe_packages() -> tuple[str, ...]:
    """What a probe asks the version of: every engine's package (the registry's), then the
    libraries. A function, not a constant: the registry loads the engine objects on first use."""
    return (*engine_packages().values(), *PROBE_LIBRARIES)


class _Completed(Protocol):
    @property
    def returncode(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


class _RemoteStream(Protocol):
    @property
    def returncode(self) -> int | None: ...
    @property
    def stderr(self) -> str: ...
    async def __aenter__(self) -> _RemoteStream: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def __aiter__(self) -> AsyncIterator[str]: ...


class AgentConnection(Protocol):
    """What the agent needs from ``orchestrator.transport.Connection``."""

    @property
    def host(self) -> str: ...
    async def run(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = False
    ) -> _Completed: ...
    def open_stream(
        self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True
    ) -> _RemoteStream: ...
    async def put_bytes(self, data: bytes, remote_path: str, *, mode: int = 0o600) -> int: ...
    async def exists(self, remote_path: str) -> bool: ...
    async def remove(self, remote_path: str) -> bool: ...
    async def makedirs(self, remote_path: str) -> None: ...
    async def home(self) -> str: ...


class AgentClient(Protocol):
    """The agent on one host, one typed method per verb (``Agent`` over SSH, ``FakeAgent``)."""

    @property
    def host(self) -> HostConfig: ...
    @property
    def bundle(self) -> AgentBundle: ...
    async def workdir(self) -> str: ...
    async def echo(
        self, spec: EchoSpec, *, keep_spec: bool = False, timeout: float | None = None
    ) -> EchoResult: ...
    async def probe(
        self, *, ports: Sequence[int] = (), packages: Sequence[str] | None = None
    ) -> ProbeResult: ...
    async def launch(self, spec: LaunchSpec) -> LaunchResult: ...
    async def status(self, spec: StatusSpec, *, timeout: float | None = None) -> StatusResult: ...
    def tail(self, spec: TailSpec) -> AsyncGenerator[TailEvent, None]: ...
    async def stop(self, spec: StopSpec, *, timeout: float | None = None) -> StopResult: ...
    async def http(self, spec: HttpSpec, *, timeout: float | None = None) -> HttpResult: ...
    def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]: ...
    async def read_model_configs(self, spec: ReadModelConfigsSpec) -> ReadModelConfigsResult: ...


@dataclass(frozen=True)
class DecodedOutput:
    """The agent's stdout split into protocol events and anything else (``noise``)."""

    events: list[dict[str, Any]]
    noise: list[str]

    @property
    def final(self) -> dict[str, Any] | None:
        last = self.events[-1] if self.events else None
        return last if last is not None and last["event"] in ("result", "error") else None


def decode_line(line: str) -> dict[str, Any] | None:
    """One JSON-lines event, or None for a line that is not one (e.g. a login banner)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("event"), str) else None


def decode_output(stdout: str) -> DecodedOutput:
    events: list[dict[str, Any]] = []
    noise: list[str] = []
    for line in stdout.split("\n"):  # not splitlines(): U+2028 and friends may sit inside JSON
        event = decode_line(line)
        if event is not None:
            events.append(event)
        elif line.strip():
            noise.append(line)
    return DecodedOutput(events, noise)


class Agent:
    """The agent on one host, over one reused connection."""

    def __init__(
        self, conn: AgentConnection, host: HostConfig, *, bundle: AgentBundle | None = None
    ) -> None:
        self.conn = conn
        self.host = host
        self.bundle = bundle or build_bundle()
        self.bytes_pushed = 0
        self._workdir: str | None = None
        self._ready = False
        self._lock = asyncio.Lock()

    async def workdir(self) -> str:
        """The host's workdir as an absolute path (``~`` expanded from the SFTP home, no shell)."""
        if self._workdir is None:
            self._workdir = await self._resolve_workdir(self.host.workdir)
        return self._workdir

    async def _resolve_workdir(self, raw: str) -> str:
        if raw.startswith("~") and not (raw == "~" or raw.startswith("~/")):
            raise ConfigError(
                f"workdir {raw!r} of host {self.host.name!r}: only a leading '~' or '~/' can "
                "be expanded (no shell is involved)",
                file=self.host.source,
                path=f"hosts.{self.host.name}.workdir",
                hint="use an absolute path or one under '~/'",
            )
        if raw == "~" or raw.startswith("~/") or not raw.startswith("/"):
            home = await self.conn.home()
            rest = raw[2:] if raw.startswith("~/") else ("" if raw == "~" else raw)
            raw = posixpath.join(home, rest) if rest else home
        return posixpath.normpath(raw)

    async def pyz_path(self) -> str:
        return posixpath.join(await self.workdir(), self.bundle.filename)

    async def ensure(self) -> int:
        """Make the workdir and push the bundle unless that exact file is there; bytes pushed."""
        async with self._lock:
            workdir = await self.workdir()
            await self.conn.makedirs(posixpath.join(workdir, "specs"))
            pyz = await self.pyz_path()
            sent = 0
            if not await self.conn.exists(pyz):
                sent = await self.conn.put_bytes(self.bundle.data, pyz, mode=0o644)
            self.bytes_pushed += sent
            self._ready = True
            return sent

    async def _command(self, verb: str, spec: Wire, *, keep_spec: bool = False) -> list[str]:
        """Push the spec file and return the argv that runs the verb on it."""
        if not _VERB.match(verb):
            raise ValueError(f"not a verb name: {verb!r}")
        if not self._ready:
            await self.ensure()
        data = json.dumps(spec_file(spec, keep_spec=keep_spec), ensure_ascii=True).encode("ascii")
        spec_path = posixpath.join(await self.workdir(), "specs", f"{verb}-{uuid.uuid4().hex}.json")
        await self.conn.put_bytes(data, spec_path, mode=0o600)
        return [self.host.python, await self.pyz_path(), verb, spec_path]

    # -- the verbs ---------------------------------------------------------------------------
    async def echo(
        self, spec: EchoSpec, *, keep_spec: bool = False, timeout: float | None = None
    ) -> EchoResult:
        return _typed(
            await self._call("echo", spec, timeout=timeout, keep_spec=keep_spec), EchoResult
        )

    async def probe(
        self, *, ports: Sequence[int] = (), packages: Sequence[str] | None = None
    ) -> ProbeResult:
        """``packages``: whose versions to report; None is ``probe_packages()``."""
        spec = ProbeSpec(
            workdir=await self.workdir(),
            ports=list(ports),
            packages=list(probe_packages() if packages is None else packages),
        )
        return _typed(await self._call("probe", spec), ProbeResult)

    async def launch(self, spec: LaunchSpec) -> LaunchResult:
        return _typed(await self._call("launch", spec), LaunchResult)

    async def status(self, spec: StatusSpec, *, timeout: float | None = None) -> StatusResult:
        return _typed(await self._call("status", spec, timeout=timeout), StatusResult)

    async def tail(self, spec: TailSpec) -> AsyncGenerator[TailEvent, None]:
        """Log lines (and heartbeats) as they come, then the TailResult."""
        async with contextlib.aclosing(self._stream("tail", spec)) as events:
            async for event in events:
                if isinstance(event, TailLine | TailHeartbeat | TailResult):
                    yield event

    async def stop(self, spec: StopSpec, *, timeout: float | None = None) -> StopResult:
        return _typed(await self._call("stop", spec, timeout=timeout), StopResult)

    async def http(self, spec: HttpSpec, *, timeout: float | None = None) -> HttpResult:
        return _typed(await self._call("http", spec, timeout=timeout), HttpResult)

    async def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]:
        """Phases, request records and progress as they come, then the LoadgenResult."""
        async with contextlib.aclosing(self._stream("loadgen", spec)) as events:
            async for event in events:
                if isinstance(event, PhaseEvent | ProgressEvent | RequestRecord | LoadgenResult):
                    yield event

    async def read_model_configs(self, spec: ReadModelConfigsSpec) -> ReadModelConfigsResult:
        return _typed(await self._call("read_model_configs", spec), ReadModelConfigsResult)

    # -- the protocol ------------------------------------------------------------------------
    async def _call(
        self, verb: str, spec: Wire, *, timeout: float | None = None, keep_spec: bool = False
    ) -> Wire:
        """Run ``verb`` to completion and return its typed result.

        An error event -> AgentError (its kind and details kept); no final event ->
        RemoteCommandError with the remote stderr's tail, and the spec file deleted (the agent
        may never have read it). Lines that are not events (a chatty login script, say) are
        tolerated when a final event follows.
        """
        argv = await self._command(verb, spec, keep_spec=keep_spec)
        try:
            proc = await self.conn.run(argv, timeout=timeout, check=False)
        except OrchError:
            await self._discard(argv[-1])
            raise
        decoded = decode_output(proc.stdout)
        final = decoded.final
        if final is not None:
            name, value = self._decode(verb, final)
            if isinstance(value, ErrorEvent):
                raise self._agent_error(verb, value)
            return value
        await self._discard(argv[-1])
        raise self._no_result(verb, proc.returncode, decoded.noise, proc.stderr)

    async def _stream(
        self, verb: str, spec: Wire, *, timeout: float | None = None
    ) -> AsyncGenerator[Wire, None]:
        """Yield every event as it arrives, the final result included (AgentError on error).

        Closing the iterator early stops the remote agent (the transport sends it SIGTERM).
        """
        argv = await self._command(verb, spec)
        noise: list[str] = []
        finished = False
        try:
            async with self.conn.open_stream(argv, timeout=timeout, check=False) as remote:
                async for line in remote:
                    obj = decode_line(line)
                    if obj is None:
                        if line.strip():
                            noise.append(line)
                        continue
                    name, value = self._decode(verb, obj)
                    if isinstance(value, ErrorEvent):
                        finished = True
                        raise self._agent_error(verb, value)
                    finished = finished or name == "result"
                    yield value
                if not finished:
                    raise self._no_result(verb, remote.returncode, noise, remote.stderr)
        except OrchError:
            if not finished:
                await self._discard(argv[-1])
            raise

    def _decode(self, verb: str, obj: dict[str, Any]) -> tuple[str, Wire]:
        """One line's object -> its typed value; another contract version is said plainly."""
        try:
            return decode_wire_line(verb, obj)
        except ContractMismatch as exc:
            theirs = "no contract version" if exc.theirs is None else f"contract v{exc.theirs}"
            raise RemoteCommandError(
                self.host.name,
                f"the agent on host {self.host.name} speaks {theirs}, this orch speaks "
                f"v{CONTRACT_VERSION}: its {verb} answer (event {obj.get('event')!r}) was not "
                "read",
                hint=CONTRACT_HINT,
            ) from exc
        except WireError as exc:
            raise RemoteCommandError(
                self.host.name,
                f"{verb}: the agent's answer does not fit the contract: {exc}",
                hint=CONTRACT_HINT,
            ) from exc

    async def _discard(self, spec_path: str) -> None:
        """Delete a spec file no agent reported reading (e.g. ``python`` not found: exit 127).

        The agent deletes its spec once read; when it never ran, the file (a launch spec holds
        the engine's secrets) would stay in the workdir. Best effort: the caller's error is the
        one that matters, so a failure here (connection lost) is not raised over it.
        """
        with contextlib.suppress(OrchError):
            await self.conn.remove(spec_path)

    def _agent_error(self, verb: str, event: ErrorEvent) -> AgentError:
        hint = None
        if event.kind is ErrorKind.INTERNAL:
            hint = "this is a bug in orch's agent: please report it with the traceback from the error details"
        elif event.kind is ErrorKind.PYTHON_TOO_OLD:
            hint = PYTHON_HINT
        return AgentError(
            self.host.name,
            f"{verb}: {event.message}",
            kind=event.kind,
            details=dict(event.details),
            hint=hint,
        )

    def _no_result(
        self, verb: str, returncode: int | None, noise: list[str], stderr: str
    ) -> RemoteCommandError:
        python = self.host.python
        tail = "\n".join((stderr.splitlines() + noise)[-_TAIL_LINES:]).strip()
        hint: str | None = None
        if returncode == 127:
            message = f"the remote interpreter {python!r} was not found (exit 127)"
            hint = PYTHON_HINT
        elif returncode == 126:
            message = f"the remote interpreter {python!r} is not executable (exit 126)"
            hint = PYTHON_HINT
        elif "SyntaxError" in stderr or "future feature" in stderr:
            message = f"the remote interpreter {python!r} cannot run the agent (too old?)"
            hint = PYTHON_HINT
        else:
            status = "ended" if returncode is None else f"exited with status {returncode}"
            message = f"agent verb {verb!r} {status} without a result"
            hint = "read the remote output in this message; check the host's free disk space and `python` in hosts.yaml"
        if tail:
            message += f"; remote output:\n{tail}"
        return RemoteCommandError(self.host.name, message, hint=hint)


def _typed(value: Wire, cls: type[R]) -> R:
    """``value`` as the result type its verb's contract names (decode_line built it so)."""
    if not isinstance(value, cls):
        raise TypeError(f"expected a {cls.__name__}, got {type(value).__name__}")
    return value
