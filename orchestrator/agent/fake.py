"""``FakeAgent``: the ``AgentClient`` interface in memory, scripted per verb, recording calls.

The runner's retry, resume and failure paths (a connection dropped mid-tail, a stop racing an
interrupted launch, a refused port, an engine dying while it loads, a load generator that ends
without a result) are decided by the agent's answers. Scripting those answers here lets them be
tested in milliseconds with the real runner code; the real-sshd and embedded tests remain the
end-to-end layer that proves the real agent gives the same answers.

Each verb takes its outcomes from a queue (``on``), then from a standing answer (``always``).
An outcome is a result, an ``OrchError`` to raise (``agent_error``, ``dropped``), a ``Stream``
of events for ``tail``/``loadgen`` (optionally cut by an error), or a function of the spec
returning one of those (``FakeLog`` is one: it serves a log from any byte offset).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from orchestrator.agent.bundle import AgentBundle
from orchestrator.agent.client import probe_packages
from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import AgentError, HostUnreachable, OrchError
from orchestrator.remote.wire import (
    CONTRACT,
    EchoResult,
    EchoSpec,
    ErrorKind,
    GpuCheck,
    HttpResult,
    HttpSpec,
    LaunchResult,
    LaunchSpec,
    LoadgenEvent,
    LoadgenSpec,
    ProbeResult,
    ProbeSpec,
    ReadModelConfigsResult,
    ReadModelConfigsSpec,
    ServerState,
    StatusResult,
    StatusSpec,
    StopResult,
    StopSpec,
    TailEvent,
    TailLines,
    TailResult,
    TailSpec,
    Wire,
)

R = TypeVar("R", bound=Wire)
FAKE_HOST = HostConfig(name="fake-gpu", address="127.0.0.1", workdir="/srv/orch")
FAKE_BUNDLE = AgentBundle(data=b"", sha256="0" * 64, filename="agent-fake.pyz")


@dataclass(frozen=True)
class Stream:
    """What a streaming verb sends: these events, then ``then`` raised (e.g. a lost connection)."""

    events: Sequence[Wire]
    then: OrchError | None = None


Outcome = Wire | Stream | OrchError | Callable[[Wire], "Outcome"]


@dataclass(frozen=True)
class Call:
    verb: str
    spec: Wire


def agent_error(
    kind: ErrorKind, message: str = "refused", *, host: str = FAKE_HOST.name, verb: str = "launch"
) -> AgentError:
    """The error the real client raises for an agent ``error`` line of ``kind``."""
    return AgentError(host, f"{verb}: {message}", kind=kind)


def dropped(host: str = FAKE_HOST.name) -> HostUnreachable:
    """What the transport raises when the SSH connection goes away under a call."""
    return HostUnreachable(host, "connection lost while running the agent")


class FakeAgent:
    """An ``AgentClient`` whose answers are scripted; ``calls`` lists every call in order."""

    def __init__(self, host: HostConfig = FAKE_HOST, *, bundle: AgentBundle = FAKE_BUNDLE) -> None:
        self.host = host
        self.bundle = bundle
        self.calls: list[Call] = []
        self.reconnects = 0
        self._queued: dict[str, deque[Outcome]] = {}
        self._standing: dict[str, Outcome] = {}

    # -- scripting ---------------------------------------------------------------------------
    def on(self, verb: str, *outcomes: Outcome) -> FakeAgent:
        """Answer the next calls of ``verb`` with ``outcomes``, one each, in order."""
        self._queued.setdefault(verb, deque()).extend(outcomes)
        return self

    def always(self, verb: str, outcome: Outcome) -> FakeAgent:
        """Answer every call of ``verb`` with ``outcome`` once its queue is empty."""
        self._standing[verb] = outcome
        return self

    def specs(self, verb: str) -> list[Wire]:
        return [c.spec for c in self.calls if c.verb == verb]

    async def reconnect(self) -> FakeAgent:
        """A ``reconnect`` for ``Server``: the same host state, over a "new connection"."""
        self.reconnects += 1
        return self

    # -- AgentClient -------------------------------------------------------------------------
    async def workdir(self) -> str:
        return self.host.workdir

    async def echo(
        self, spec: EchoSpec, *, keep_spec: bool = False, timeout: float | None = None
    ) -> EchoResult:
        return self._answer("echo", spec, EchoResult)

    async def probe(
        self, *, ports: Sequence[int] = (), packages: Sequence[str] | None = None
    ) -> ProbeResult:
        spec = ProbeSpec(
            workdir=self.host.workdir,
            ports=list(ports),
            packages=list(probe_packages() if packages is None else packages),
        )
        return self._answer("probe", spec, ProbeResult)

    async def launch(self, spec: LaunchSpec) -> LaunchResult:
        return self._answer("launch", spec, LaunchResult)

    async def status(self, spec: StatusSpec, *, timeout: float | None = None) -> StatusResult:
        return self._answer("status", spec, StatusResult)

    async def tail(self, spec: TailSpec) -> AsyncGenerator[TailEvent, None]:
        async for event in self._events("tail", spec):
            yield cast(TailEvent, event)

    async def stop(self, spec: StopSpec, *, timeout: float | None = None) -> StopResult:
        return self._answer("stop", spec, StopResult)

    async def http(self, spec: HttpSpec, *, timeout: float | None = None) -> HttpResult:
        return self._answer("http", spec, HttpResult)

    async def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]:
        async for event in self._events("loadgen", spec):
            yield cast(LoadgenEvent, event)

    async def read_model_configs(self, spec: ReadModelConfigsSpec) -> ReadModelConfigsResult:
        return self._answer("read_model_configs", spec, ReadModelConfigsResult)

    # -- the machinery -----------------------------------------------------------------------
    def _outcome(self, verb: str, spec: Wire) -> Outcome:
        self.calls.append(Call(verb, spec))
        queue = self._queued.get(verb)
        if queue:
            outcome = queue.popleft()
        elif verb in self._standing:
            outcome = self._standing[verb]
        else:
            raise AssertionError(f"FakeAgent: no answer scripted for {verb} ({spec})")
        while callable(outcome) and not isinstance(outcome, Wire | Stream | OrchError):
            outcome = outcome(spec)
        return outcome

    def _answer(self, verb: str, spec: Wire, expected: type[R]) -> R:
        """The scripted answer, checked against the verb's contract (``wire.CONTRACT``)."""
        if expected is not CONTRACT[verb].result:
            raise TypeError(f"FakeAgent: {verb} answers a {CONTRACT[verb].result.__name__}")
        outcome = self._outcome(verb, spec)
        if isinstance(outcome, OrchError):
            raise outcome
        if not isinstance(outcome, expected):
            raise TypeError(
                f"FakeAgent: {verb} answers a {expected.__name__}, "
                f"the script gave {type(outcome).__name__}"
            )
        return outcome

    async def _events(self, verb: str, spec: Wire) -> AsyncGenerator[Wire, None]:
        """The scripted stream, each event one the verb's contract lets it send."""
        contract = CONTRACT[verb]
        stream = self._stream(verb, spec)
        for event in stream.events:
            if not isinstance(event, (*contract.events, contract.result)):
                raise TypeError(f"FakeAgent: {verb} cannot send a {type(event).__name__}")
            yield event
        if stream.then is not None:
            raise stream.then

    def _stream(self, verb: str, spec: Wire) -> Stream:
        outcome = self._outcome(verb, spec)
        if isinstance(outcome, OrchError):
            raise outcome
        if isinstance(outcome, Stream):
            return outcome
        if isinstance(outcome, Wire):
            return Stream([outcome])
        raise TypeError(f"FakeAgent: {verb} got a {type(outcome).__name__} to stream")


# -- building blocks for scripts -------------------------------------------------------------


def tail_lines(texts: Sequence[str], *, start: int = 0, per_event: int = 1) -> list[TailLines]:
    """server.log lines with the byte offsets the real agent gives them (UTF-8, newline-ended),
    ``per_event`` lines an event (the real agent sends the lines of each read of the log)."""
    batches, offset = [], start
    for first in range(0, len(texts), per_event):
        chunk = list(texts[first : first + per_event])
        size = sum(len(text.encode("utf-8")) + 1 for text in chunk)
        batches.append(TailLines(offset=offset, next=offset + size, lines=chunk))
        offset += size
    return batches


@dataclass
class FakeLog:
    """A host's server.log that ``tail`` serves from any byte offset (from the first line that
    starts there or after).

    ``drops`` cuts the connection after that many events, one entry per tail call (``None``: a
    call that is not cut), so a resumed tail must ask again from the right offset. Each event
    holds ``per_event`` lines (the last one of a call fewer).
    """

    texts: Sequence[str]
    exited: bool = True
    drops: list[int | None] = field(default_factory=list)
    host: str = FAKE_HOST.name
    per_event: int = 1

    @property
    def batches(self) -> list[TailLines]:
        """The whole log as served from its start: one event per ``per_event`` lines."""
        return tail_lines(self.texts, per_event=self.per_event)

    @property
    def size(self) -> int:
        return sum(len(text.encode("utf-8")) + 1 for text in self.texts)

    def __call__(self, spec: Wire) -> Stream:
        assert isinstance(spec, TailSpec)
        skipped, start = 0, 0  # the lines that start at or after the offset are served
        for text in self.texts:
            if start >= spec.offset:
                break
            start += len(text.encode("utf-8")) + 1
            skipped += 1
        served = tail_lines(self.texts[skipped:], start=start, per_event=self.per_event)
        cut = self.drops.pop(0) if self.drops else None
        if cut is not None:
            return Stream(served[:cut], then=dropped(self.host))
        end = served[-1].next if served else spec.offset
        return Stream(
            [*served, TailResult(offset=end, reason="exited" if self.exited else "eof", exit=None)]
        )


def launch_result(spec: LaunchSpec, *, pid: int = 4242, log_offset: int = 0) -> LaunchResult:
    """What ``launch`` answers for ``spec`` on a host where it started."""
    return LaunchResult(
        run_id=spec.run_id,
        pid=pid,
        pgid=pid,
        supervisor_pid=pid - 1,
        argv=list(spec.argv),
        requested_argv=list(spec.argv),
        env_keys=sorted(spec.env),
        port=spec.port,
        cwd=f"{spec.workdir}/runs/{spec.run_id}",
        log=f"{spec.workdir}/runs/{spec.run_id}/server.log",
        started_at=1_700_000_000.0,
        start_ticks=1000,
        boot_id="fake-boot",
        log_offset=log_offset,
        gpu_check=GpuCheck(checked=False, reason="no GPUs requested"),
    )


def server_state(
    run_id: str,
    *,
    alive: bool,
    returncode: int | None = None,
    log_size: int | None = 0,
    pid: int = 4242,
) -> ServerState:
    """One ``status`` entry for ``run_id``."""
    return ServerState(
        run_id=run_id,
        pid=pid,
        pgid=pid,
        supervisor_pid=pid - 1,
        argv=["vllm", "serve"],
        requested_argv=["vllm", "serve"],
        env_keys=[],
        port=8000,
        cwd="/srv/orch",
        log="/srv/orch/runs/server.log",
        started_at=1_700_000_000.0,
        start_ticks=1000,
        boot_id="fake-boot",
        alive=alive,
        group_pids=[pid] if alive else [],
        exit=None,
        returncode=returncode,
        log_size=log_size,
        uptime_s=1.0 if alive else None,
    )


def status_of(
    run_id: str, *, alive: bool, returncode: int | None = None, log_size: int | None = 0
) -> StatusResult:
    return StatusResult(
        servers=[server_state(run_id, alive=alive, returncode=returncode, log_size=log_size)]
    )


def http_answer(status: int | None, body: str = "", error: str | None = None) -> HttpResult:
    return HttpResult(status=status, headers={}, body=body, error=error)
