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
import os
import posixpath
import re
import shlex
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TypeVar

from orchestrator.agent import verify
from orchestrator.agent.bundle import AgentBundle, build_bundle
from orchestrator.agent.session import (
    AgentSession,
    SessionLost,
    SessionStream,
    SpareStream,
    decode_line,
)
from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines import engine_packages
from orchestrator.errors import (
    AgentError,
    ConfigError,
    HostTimeout,
    HostUnreachable,
    NoFreeChannel,
    OrchError,
    RemoteCommandError,
    RemoteDiskFull,
)
from orchestrator.remote.wire import (
    CONTRACT,
    CONTRACT_VERSION,
    SERVE_VERB,
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
    PruneResult,
    PruneSpec,
    ReadModelConfigsResult,
    ReadModelConfigsSpec,
    RequestRecord,
    StatusResult,
    StatusSpec,
    StopResult,
    StopSpec,
    TailEvent,
    TailHeartbeat,
    TailLines,
    TailResult,
    TailSpec,
    Wire,
    WireError,
    spec_file,
)
from orchestrator.remote.wire import decode_line as decode_wire_line
from orchestrator.transport.translate import no_space_error

# asked about besides the engines' own packages (their versions explain engine behaviour)
PROBE_LIBRARIES = ("torch", "transformers", "aiohttp")
# what a run imports on the host besides its engine: nothing (the load generator's HTTP client
# is the agent's own, standard library only)
RUN_MODULES: tuple[str, ...] = ()
_VERB = re.compile(r"^[a-z][a-z0-9_]*$")
CANCEL_DISCARD_S = 5.0  # how long an interrupted call may spend deleting its spec file
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

# Every agent call has a deadline, so a host whose interpreter blocks (stale NFS, a disk in D
# state) fails its own row instead of holding up every host. Quick verbs: seconds the whole
# call may take (a host's `agent_timeout_s` in hosts.yaml replaces these); a caller passing its
# own timeout (stop waits for the engine to exit, http for the server) wins.
VERB_TIMEOUT_S = {
    verb: c.timeout_s for verb, c in CONTRACT.items() if c.timeout_s is not None and not c.streaming
}
# Streams: seconds they may stay silent. tail sends a heartbeat every 5 s; loadgen a progress
# line every 2 s once it runs, but first loads the tokenizer (slow on a cold cache). A host's
# `agent_timeout_s` can raise these, never lower them below the heartbeat's reach.
STREAM_SILENCE_S = {
    verb: c.timeout_s for verb, c in CONTRACT.items() if c.timeout_s is not None and c.streaming
}
MIN_STREAM_SILENCE_S = 20.0
FIND_BLOCKED_TIMEOUT_S = 5.0
# A load generator cut by a dropped connection ends on its own (stdin EOF, then a hard exit
# after the agent's EXIT_GRACE_S, 10 s): its error is raised once it is gone (or after this),
# so a measurement started again never runs beside it.
ORPHAN_WAIT_S = 15.0
ORPHAN_POLL_S = 0.2
BLOCKED_HINT = (
    "look at that process on the host (`ps -o pid,stat,wchan,args -p PID`: state D is a "
    "process stuck in the kernel, e.g. on a stale NFS mount or a failing disk); kill it or fix "
    "the mount, then retry. If the host is only slow, raise agent_timeout_s in hosts.yaml"
)
SESSION_ENV = "ORCH_AGENT_SESSION"  # "0": every call its own agent process, as before sessions
MAX_SESSION_FAILURES = 2  # sessions ended under a call before this agent stops starting them
# channels an agent keeps open beside its calls: the session and a spare load generator (both
# opened only on a free channel; transport/ssh.py's MAX_CHANNELS budgets them)
BACKGROUND_CHANNELS = 2
STDIN_SPEC = "-"  # the spec path that tells the agent to read its spec from stdin's first line


def probe_packages() -> tuple[str, ...]:
    """What a probe asks the version of: every engine's package (the registry's), then the
    libraries. A function, not a constant: the registry loads the engine objects on first use."""
    return (*engine_packages().values(), *PROBE_LIBRARIES)


def probe_modules() -> tuple[str, ...]:
    """What a probe checks is importable: what every run needs, then each engine's package."""
    return (*RUN_MODULES, *engine_packages().values())


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
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = False,
        input: str | None = None,
    ) -> _Completed: ...
    def open_stream(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        idle_timeout: float | None = None,
        input: str | None = None,
        background: bool = False,
    ) -> _RemoteStream: ...
    async def put_bytes(self, data: bytes, remote_path: str, *, mode: int = 0o600) -> int: ...
    async def exists(self, remote_path: str) -> bool: ...
    async def remove(self, remote_path: str) -> bool: ...
    async def makedirs(self, remote_path: str, *, mode: int | None = None) -> None: ...
    async def lstat(self, remote_path: str, *, follow: bool = False) -> verify.Attrs | None: ...
    async def read_bytes(self, remote_path: str) -> bytes: ...
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


Connect = Callable[[], Awaitable[AgentConnection]]


class Agent:
    """The agent on one host, over one reused connection.

    With ``connect`` (e.g. ``functools.partial(pool.get, host)``) every call first checks that
    the connection is still up and takes a fresh one when it dropped: an agent held across a
    dropped connection serves the next step instead of failing it with "connection lost".
    """

    def __init__(
        self,
        conn: AgentConnection,
        host: HostConfig,
        *,
        bundle: AgentBundle | None = None,
        connect: Connect | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.conn = conn
        self.host = host
        # argv run before the agent's own: ``srun --jobid=J --overlap ... --`` runs every verb
        # inside a Slurm allocation, from its login node (``slurm/node.py``)
        self.prefix = tuple(prefix)
        self.bundle = bundle or build_bundle()
        self.bytes_pushed = 0
        self._connect = connect
        self._workdir: str | None = None
        self._pyz: str | None = None  # elsewhere than the workdir this agent pushes to
        self._ready = False
        self._lock = asyncio.Lock()
        self._session: AgentSession | None = None
        self._session_lock = asyncio.Lock()
        self._sessions_failed = 0  # sessions that ended under a call: at 2, one-shot calls only
        self._spare: SpareStream | None = None  # the next load point's process, started ahead
        self._spare_starting = False

    def with_prefix(
        self, prefix: Sequence[str], host: HostConfig, *, pyz: str | None = None
    ) -> Agent:
        """This agent's connection, its verbs run behind ``prefix`` as ``host`` says (its
        Python): the agent inside a Slurm allocation, pushed and checked already. ``pyz``: the
        agent's own copy where the files this agent writes are not seen (a compute node
        without the login's filesystem); its specs then go on stdin."""
        other = Agent(self.conn, host, bundle=self.bundle, connect=self._connect, prefix=prefix)
        other._workdir = self._workdir if pyz is None else posixpath.normpath(host.workdir)
        other._ready = self._ready
        other._pyz = pyz
        return other

    def read_event(self, verb: str, obj: dict[str, Any]) -> Wire:
        """One decoded line of ``verb``'s output as its typed value; an error event raised as
        this agent raises it (a job's output file is read this way, not streamed)."""
        _name, value = self._decode(verb, obj)
        if isinstance(value, ErrorEvent):
            raise self._agent_error(verb, value)
        return value

    @property
    def reconnects(self) -> bool:
        """Whether this agent re-opens its connection itself when it dropped."""
        return self._connect is not None

    async def live(self) -> AgentConnection:
        """The connection, re-opened first if it dropped (when this agent knows how)."""
        if self._connect is not None and getattr(self.conn, "closed", False):
            self.conn = await self._connect()
        return self.conn

    def _timeout(self, verb: str, given: float | None) -> float | None:
        if given is not None:
            return given
        own = self.host.agent_timeout_s
        if own is not None and verb != "stop":
            return float(own)
        return VERB_TIMEOUT_S.get(verb)

    def _silence(self, verb: str) -> float | None:
        default = STREAM_SILENCE_S.get(verb)
        own = self.host.agent_timeout_s
        if own is None:
            return default
        return max(float(own), MIN_STREAM_SILENCE_S)

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
            home = await (await self.live()).home()
            rest = raw[2:] if raw.startswith("~/") else ("" if raw == "~" else raw)
            raw = posixpath.join(home, rest) if rest else home
        return posixpath.normpath(raw)

    async def pyz_path(self) -> str:
        if self._pyz is not None:
            return self._pyz
        return posixpath.join(await self.workdir(), self.bundle.filename)

    async def ensure(self) -> int:
        """Make the workdir and push the bundle unless that exact file is there; bytes pushed.

        Nothing runs unless it is verified (see ``agent/verify.py``): the workdir and ``specs/``
        belong to the login user and nobody else can write to them, and the agent file is a
        regular file of that user whose content is the bundle (read back and hashed). A file
        that differs is replaced (atomically, in a directory only we can write to) and checked
        again; anything else is refused with UnsafeRemotePath, before any spec is written.
        """
        async with self._lock:
            workdir = await self.workdir()
            conn = await self.live()
            specs = posixpath.join(workdir, "specs")
            await conn.makedirs(specs, mode=0o700)
            uid = await _login_uid(conn, self.host.name, specs)
            for path in (workdir, specs):
                verify.check_dir(self.host.name, path, await conn.lstat(path, follow=True), uid)
            pyz = await self.pyz_path()
            sent = 0
            if not await self._verified_agent(conn, pyz, uid, present_only=True):
                sent = await conn.put_bytes(self.bundle.data, pyz, mode=0o644)
                await self._verified_agent(conn, pyz, uid, present_only=False)
            self.bytes_pushed += sent
            self._ready = True
            return sent

    async def _verified_agent(
        self, conn: AgentConnection, pyz: str, uid: int, *, present_only: bool
    ) -> bool:
        """True when ``pyz`` is the bundle, safe to run. ``present_only``: a missing or different
        file is False (to be pushed); otherwise (just pushed) it is an error."""
        attrs = await conn.lstat(pyz)
        if attrs is None:
            if present_only:
                return False
            raise verify.UnsafeRemotePath(self.host.name, f"{pyz} vanished right after the push")
        verify.check_agent_file(self.host.name, pyz, attrs, uid)
        data = await conn.read_bytes(pyz)
        if present_only:
            return verify.matches(data, self.bundle.sha256)
        verify.check_content(self.host.name, pyz, data, self.bundle.sha256)
        return True

    async def _command(
        self, verb: str, spec: Wire, *, keep_spec: bool = False
    ) -> tuple[list[str], str | None]:
        """Push the spec file; the argv that runs the verb on it, and what to send on stdin.

        When the host's disk is full the spec cannot be written: it then goes on the agent's
        stdin (one JSON line; still never on a command line, where `ps` would show it), so
        `orch ps` and `orch stop` keep working on a host where nothing can be written.
        """
        if not _VERB.match(verb):
            raise ValueError(f"not a verb name: {verb!r}")
        if not self._ready:
            await self.ensure()
        text = json.dumps(spec_file(spec, keep_spec=keep_spec), ensure_ascii=True)
        if self._pyz is not None:  # where it runs, the files we write are not seen
            return [*self.prefix, self.host.python, self._pyz, verb, STDIN_SPEC], text + "\n"
        spec_path = posixpath.join(await self.workdir(), "specs", f"{verb}-{uuid.uuid4().hex}.json")
        conn = await self.live()
        try:
            await conn.put_bytes(text.encode("ascii"), spec_path, mode=0o600)
        except RemoteDiskFull:
            return [*self.prefix, self.host.python, await self.pyz_path(), verb, STDIN_SPEC], (
                text + "\n"
            )
        return [*self.prefix, self.host.python, await self.pyz_path(), verb, spec_path], None

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
            modules=list(probe_modules()),
        )
        return _typed(await self._call("probe", spec), ProbeResult)

    async def prune(self, spec: PruneSpec, *, timeout: float | None = None) -> PruneResult:
        return _typed(await self._call("prune", spec, timeout=timeout), PruneResult)

    async def launch(self, spec: LaunchSpec) -> LaunchResult:
        launched = _typed(await self._call("launch", spec), LaunchResult)
        await self._start_spare()  # its load generator starts while the engine loads
        return launched

    async def status(self, spec: StatusSpec, *, timeout: float | None = None) -> StatusResult:
        return _typed(await self._call("status", spec, timeout=timeout), StatusResult)

    async def tail(self, spec: TailSpec) -> AsyncGenerator[TailEvent, None]:
        """Log lines, a batch per read of the log (and heartbeats), as they come, then the
        TailResult."""
        async with contextlib.aclosing(self._stream("tail", spec)) as events:
            async for event in events:
                if isinstance(event, TailLines | TailHeartbeat | TailResult):
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
        # the next point's, once this one's channel is free (a spare never waits for one)
        await self._start_spare()

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
        if not keep_spec and self._may_use_session(verb):
            session = await self._open_session()
            if session is not None:
                return await self._session_call(session, verb, spec, timeout)
        return await self._one_shot(verb, spec, timeout=timeout, keep_spec=keep_spec)

    async def _one_shot(
        self, verb: str, spec: Wire, *, timeout: float | None = None, keep_spec: bool = False
    ) -> Wire:
        """``verb`` as its own agent process (first contact, streams, recovery, Slurm)."""
        argv, stdin = await self._command(verb, spec, keep_spec=keep_spec)
        deadline = self._timeout(verb, timeout)
        try:
            if stdin is None:
                proc = await self.conn.run(argv, timeout=deadline, check=False)
            else:
                proc = await self.conn.run(argv, timeout=deadline, check=False, input=stdin)
        except HostTimeout as exc:
            waited = f"no answer within {deadline:g} s" if deadline is not None else exc.message
            raise await self._blocked(verb, argv, waited) from exc
        except OrchError:
            await self._discard(argv[-1])
            raise
        except asyncio.CancelledError:
            await self._discard_cancelled(argv[-1])
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

    # -- the session agent (agent/session.py) ----------------------------------------------
    def _may_use_session(self, verb: str) -> bool:
        """After first contact, for the verbs the contract serves in a session, on a transport
        whose streams take writes; never behind a prefix (Slurm's srun runs one process per
        call) nor where this agent's files are not seen."""
        contract = CONTRACT.get(verb)
        return (
            contract is not None
            and contract.session
            and self._ready
            and not self.prefix
            and self._pyz is None
            and self._sessions_failed < MAX_SESSION_FAILURES
            and os.environ.get(SESSION_ENV, "1") != "0"
            and bool(getattr(self.conn, "supports_sessions", False))
        )

    async def _open_session(self) -> AgentSession | None:
        """The running session, started first if there is none (or it ended); None when one
        cannot be started (the call then runs as its own process)."""
        async with self._session_lock:
            if self._session is not None and self._session.alive:
                return self._session
            await self.close_session()
            conn = await self.live()
            argv = [
                self.host.python,
                await self.pyz_path(),
                SERVE_VERB,
                f"session-{uuid.uuid4().hex}",
            ]
            stream: SessionStream = conn.open_stream(  # type: ignore[assignment]
                argv, check=False, background=True
            )
            session = AgentSession(stream, argv, conn)
            try:
                await session.start()
            except NoFreeChannel:  # the runs' streams hold every channel: this call goes alone
                return None
            except OrchError:
                self._sessions_failed += 1
                return None
            self._session = session
            self._end_with(conn)
            return session

    def _end_with(self, conn: AgentConnection) -> None:
        """End the session and the spare when ``conn`` closes (they live on it)."""
        at_close = getattr(conn, "at_close", None)
        if at_close is not None:
            at_close(self.close_session)

    async def close_session(self) -> None:
        """End the session agent and the spare load generator, if they run."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.close()

    async def _start_spare(self) -> None:
        """Start the next load point's load generator now (see ``SpareStream``); best effort:
        without one, the next point starts its own."""
        if self._spare is not None or self._spare_starting or not self._may_use_session("status"):
            return
        self._spare_starting = True  # two runs of a host end points at once: one spare
        try:
            await self._open_spare()
        finally:
            self._spare_starting = False

    async def _open_spare(self) -> None:
        with contextlib.suppress(OrchError):  # NoFreeChannel included: no spare this time
            conn = await self.live()
            argv = [
                self.host.python,
                await self.pyz_path(),
                "loadgen",
                f"{STDIN_SPEC}spare-{uuid.uuid4().hex}",
            ]
            silence = self._silence("loadgen")
            stream: SessionStream = conn.open_stream(  # type: ignore[assignment]
                argv, check=False, idle_timeout=silence, background=True
            )
            await stream.__aenter__()
            self._spare = SpareStream(stream, argv, conn)
            self._end_with(conn)

    async def _take_spare(self) -> SpareStream | None:
        """The spare load generator if it still waits on this agent's connection."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        if spare.alive and spare.conn is self.conn and not getattr(self.conn, "closed", False):
            return spare
        await spare.close()
        return None

    async def _session_call(
        self, session: AgentSession, verb: str, spec: Wire, timeout: float | None
    ) -> Wire:
        """``verb`` over the session, with the one-shot call's deadline and errors. A session
        that ends under the call is dropped; a verb that only reads is then sent again as its
        own process, any other raises what the one-shot call would have."""
        deadline = self._timeout(verb, timeout)
        try:
            final = await asyncio.wait_for(session.request(verb, spec), deadline)
        except asyncio.TimeoutError as exc:  # its thread may be stuck: the session goes with it
            waited = f"no answer within {deadline:g} s"
            raise await self._blocked(verb, session.argv, waited, close=session) from exc
        except SessionLost as lost:
            # exited with a status before answering anything: it cannot serve (an agent without
            # `serve` answers unknown_verb), so this call never ran and no session is tried again
            refused = session.answered == 0 and (lost.returncode or 0) > 0
            self._sessions_failed = MAX_SESSION_FAILURES if refused else self._sessions_failed + 1
            await self.close_session()
            if refused or CONTRACT[verb].retry_safe:
                return await self._one_shot(verb, spec, timeout=timeout)
            if lost.error is not None:
                raise lost.error from None
            raise self._no_result(verb, lost.returncode, lost.noise, lost.stderr) from None
        _name, value = self._decode(verb, final)
        if isinstance(value, ErrorEvent):
            raise self._agent_error(verb, value)
        return value

    async def _stream(
        self, verb: str, spec: Wire, *, timeout: float | None = None
    ) -> AsyncGenerator[Wire, None]:
        """Yield every event as it arrives, the final result included (AgentError on error).

        Closing the iterator early stops the remote agent (the transport sends it SIGTERM).
        """
        noise: list[str] = []
        finished = False
        silence = self._silence(verb)
        spare = await self._take_spare() if verb == "loadgen" and timeout is None else None
        stream: Any
        if spare is not None:  # started ahead: the spec goes on its stdin
            argv = spare.argv
            stream = spare.fed(json.dumps(spec_file(spec), ensure_ascii=True) + "\n")
        else:
            argv, stdin = await self._command(verb, spec)
            stream = (
                self.conn.open_stream(argv, timeout=timeout, check=False, idle_timeout=silence)
                if stdin is None
                else self.conn.open_stream(
                    argv, timeout=timeout, check=False, idle_timeout=silence, input=stdin
                )
            )
        try:
            async with stream as remote:
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
        except HostTimeout as exc:
            if not finished:
                waited = f"no output for {silence:g} s" if silence is not None else exc.message
                raise await self._blocked(verb, argv, waited) from exc
            raise
        except OrchError as exc:
            if not finished:
                await self._discard(argv[-1])
                if verb == "loadgen" and isinstance(exc, HostUnreachable):
                    await self._wait_gone(argv[-1])  # a retry must not load beside it
            raise
        except asyncio.CancelledError:
            if not finished:
                await self._discard_cancelled(argv[-1])
            raise

    async def _wait_gone(self, spec_path: str) -> None:
        """Wait (bounded) until no process on the host holds ``spec_path`` in its command line:
        the remote end of a stream whose connection dropped, which ends when it sees its stdin
        close. Best effort: a host that cannot be asked is not waited on."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ORPHAN_WAIT_S
        while await self._find(spec_path) and loop.time() < deadline:
            await asyncio.sleep(ORPHAN_POLL_S)

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

    async def _blocked(
        self, verb: str, argv: list[str], waited: str, *, close: AgentSession | None = None
    ) -> HostTimeout:
        """The deadline's error, naming the remote process it left behind (pid when found);
        ``close``: the session it ran in, ended once its pid is known."""
        pids = await self._find(argv[-1])
        if close is not None:
            if close is self._session:
                await self.close_session()
            else:
                await close.close()
        else:
            await self._discard(argv[-1])
        which = f"pid {', '.join(map(str, pids))}" if pids else "pid unknown"
        return HostTimeout(
            self.host.name,
            f"{verb}: {waited} from the agent; its process may still be blocked on the host "
            f"({which}): {shlex.join(argv)}",
            hint=BLOCKED_HINT,
        )

    async def _find(self, spec_path: str) -> list[int]:
        """Pids of the processes whose command line holds ``spec_path`` (unique per call: a
        spec file's path, or a session's tag)."""
        if not spec_path.startswith(("/", "session-", f"{STDIN_SPEC}spare-")):
            return []
        try:
            conn = await self.live()
            found = await conn.run(
                ["pgrep", "-f", "--", re.escape(spec_path)], timeout=FIND_BLOCKED_TIMEOUT_S
            )
        except OrchError:
            return []
        return [int(p) for p in found.stdout.split() if p.isdigit()]

    async def _discard(self, spec_path: str) -> None:
        """Delete a spec file no agent reported reading (e.g. ``python`` not found: exit 127).

        The agent deletes its spec once read; when it never ran, the file (a launch spec holds
        the engine's secrets) would stay in the workdir. Best effort: the caller's error is the
        one that matters, so a failure here (connection lost) is not raised over it.
        """
        if spec_path.startswith(STDIN_SPEC):  # on stdin: no file
            return
        with contextlib.suppress(OrchError):
            await (await self.live()).remove(spec_path)

    async def _discard_cancelled(self, spec_path: str) -> None:
        """Ctrl-C mid-call: the agent may never have read its spec (a launch spec holds the
        engine's secrets). Shielded and bounded, so the interrupt still ends the call soon."""
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self._discard(spec_path)), CANCEL_DISCARD_S)

    def _agent_error(self, verb: str, event: ErrorEvent) -> AgentError | RemoteDiskFull:
        if event.details.get("errno") == "ENOSPC":  # not a bug: the host's disk is full
            path = event.details.get("path") or self._workdir or self.host.workdir
            return no_space_error(self.host.name, str(path), verb)
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
        raise OrchError(  # the contract tables disagree with a client method: a bug, said plainly
            f"the agent answered a {type(value).__name__} where a {cls.__name__} was expected",
            hint=CONTRACT_HINT,
        )
    return value


async def _login_uid(conn: AgentConnection, host: str, directory: str) -> int:
    """The uid this login writes files as: that of a new file, made and removed here."""
    probe = posixpath.join(directory, f".owner-{uuid.uuid4().hex}")
    await conn.put_bytes(b"", probe, mode=0o600)
    try:
        attrs = await conn.lstat(probe)
    finally:
        await conn.remove(probe)
    if attrs is None or attrs.uid is None:
        raise verify.UnsafeRemotePath(
            host, f"cannot tell who owns the files written in {directory}"
        )
    return attrs.uid
