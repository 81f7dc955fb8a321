"""The session agent through the real client code: over the embedded transport and OpenSSH,
a session killed under a call (recovery), and a call past its deadline."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from orchestrator.agent.client import Agent
from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import HostTimeout, RemoteCommandError
from orchestrator.remote.wire import (
    EchoSpec,
    HttpSpec,
    LoadgenResult,
    LoadgenSpec,
    PromptSource,
    StatusSpec,
)
from orchestrator.sim.embedded import SimulatedHosts
from orchestrator.transport.ssh import ConnectionPool
from tests.fixtures.sshd import SshdFactory, SshdHost

pytestmark = pytest.mark.integration
T = TypeVar("T")


@asynccontextmanager
async def embedded_agent(root: Path) -> AsyncIterator[Agent]:
    config = HostConfig(
        name="sim", transport="embedded", python=sys.executable, workdir="~/.cache/orch"
    )
    async with ConnectionPool(embedded_root=root, embedded=SimulatedHosts) as pool:
        agent = Agent(await pool.get(config), config)
        try:
            yield agent
        finally:
            await agent.close_session()


def with_sshd_agent(
    factory: SshdFactory, host: SshdHost, body: Callable[[Agent], Awaitable[T]], **config: object
) -> T:
    async def scenario() -> T:
        pool = factory.pool()
        try:
            agent = Agent(await pool.get(host.host_config(**config)), host.host_config(**config))
            return await body(agent)
        finally:
            await pool.close()  # ends the agent's session and spare, and waits for them

    return asyncio.run(scenario())


def spec_files(workdir: Path) -> list[str]:
    return sorted(p.name for p in (workdir / "specs").iterdir())


async def started(tag: str, timeout: float = 10.0) -> list[int]:
    """``processes_with(tag)`` once there is one: a process just spawned over SSH is a shell
    for a moment before it execs the agent (longer on a busy machine)."""
    deadline = time.monotonic() + timeout
    while not (found := processes_with(tag)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return found


def processes_with(tag: str) -> list[int]:
    """The agent processes (not the shells that started them) whose argv holds ``tag``."""
    done = subprocess.run(
        ["pgrep", "-f", "--", re.escape(tag)], capture_output=True, text=True, check=False
    )
    pids = []
    for pid in map(int, done.stdout.split()):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0 == os.fsencode(sys.executable):
            pids.append(pid)
    return pids


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (an engine stuck mid-request)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


async def status_twice_concurrently(agent: Agent, workdir: str) -> list[int]:
    spec = StatusSpec(workdir=workdir, all=True)
    answers = await asyncio.gather(*(agent.status(spec) for _ in range(4)))
    return [len(a.servers) for a in answers]


def test_calls_after_first_contact_go_over_one_session_embedded(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int], int, int, list[str]]:
        async with embedded_agent(tmp_path / "embedded") as agent:
            await agent.echo(EchoSpec(payload="first contact"))  # one-shot: pushes the agent
            assert agent._session is None
            workdir = await agent.workdir()
            counts = await status_twice_concurrently(agent, workdir)
            session = agent._session
            assert session is not None
            pids = processes_with(session.tag)
            answered = session.answered
            listing = spec_files(Path(workdir))
        return counts, answered, len(pids), listing

    counts, answered, pids, listing = asyncio.run(scenario())
    assert counts == [0, 0, 0, 0]
    assert answered == 4  # every status went over the one session process
    assert pids == 1
    assert listing == []  # no spec file was written for them (the echo's was read and deleted)


def test_session_over_openssh_keeps_secrets_off_argv_and_ends_with_the_connection(
    sshd_factory: SshdFactory,
) -> None:
    host = sshd_factory.start("sess-a")
    secret = "hf_sessionsecret123"
    seen: dict[str, object] = {}

    async def body(agent: Agent) -> None:
        await agent.ensure()
        result = await agent.http(
            HttpSpec(port=1, path="/", headers={"Authorization": f"Bearer {secret}"}, timeout_s=2)
        )
        assert result.status is None and result.error  # nothing listens on port 1
        session = agent._session
        assert session is not None and session.answered == 1
        seen["tag"] = session.tag
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        seen["argv_has_secret"] = secret in ps.stdout
        seen["pids"] = processes_with(session.tag)

    with_sshd_agent(sshd_factory, host, body)
    assert seen["argv_has_secret"] is False
    assert len(seen["pids"]) >= 1  # type: ignore[arg-type]
    # closing the connection ended the session agent first (stdin EOF) and waited for it
    assert processes_with(str(seen["tag"])) == []
    assert host.leftover_pids() == []
    assert spec_files(host.workdir) == []


def test_a_session_killed_under_a_call_fails_that_call_and_the_next_goes_on(
    sshd_factory: SshdFactory, silent_port: int
) -> None:
    """Recovery: the call in flight fails as a one-shot agent killed under it would; a status
    (it only reads) cut the same way is sent again as its own process; then a new session."""
    host = sshd_factory.start("sess-b")

    async def body(agent: Agent) -> tuple[str, int, int]:
        await agent.ensure()
        workdir = await agent.workdir()
        await agent.status(StatusSpec(workdir=workdir, all=True))
        first = agent._session
        assert first is not None
        call = asyncio.ensure_future(agent.http(HttpSpec(port=silent_port, path="/", timeout_s=30)))
        await asyncio.sleep(1.0)
        [pid] = processes_with(first.tag)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RemoteCommandError) as info:
            await asyncio.wait_for(call, 10)
        after = await agent.status(StatusSpec(workdir=workdir, all=True))
        assert after.servers == []
        second = agent._session
        assert second is not None and second is not first
        # a read cut by a killed session is retried as its own process
        [pid] = processes_with(second.tag)
        os.kill(pid, signal.SIGKILL)
        again = await agent.status(StatusSpec(workdir=workdir, all=True))
        assert again.servers == []
        return str(info.value), first.answered, second.answered

    message, first_answered, second_answered = with_sshd_agent(sshd_factory, host, body)
    # killed by SIGKILL: the shell sshd ran it with says 137 when it did not exec the agent
    assert re.search(r"agent verb 'http' exited with status (-9|137) without a result", message)
    assert (first_answered, second_answered) == (1, 1)


def test_a_call_past_its_deadline_names_the_session_process_and_ends_it(
    sshd_factory: SshdFactory, silent_port: int
) -> None:
    host = sshd_factory.start("sess-c")

    async def body(agent: Agent) -> tuple[str, str]:
        await agent.ensure()
        await agent.status(StatusSpec(workdir=await agent.workdir(), all=True))
        session = agent._session
        assert session is not None
        [pid] = processes_with(session.tag)
        with pytest.raises(HostTimeout) as info:
            await agent.http(HttpSpec(port=silent_port, path="/", timeout_s=30), timeout=1.5)
        assert agent._session is None
        answer = await agent.status(StatusSpec(workdir=await agent.workdir(), all=True))
        assert answer.servers == [] and agent._session is not None
        return str(info.value), f"pid {pid}"

    message, pid = with_sshd_agent(sshd_factory, host, body)
    assert message.startswith(f"{host.name}: http: no answer within 1.5 s from the agent; ")
    assert f"its process may still be blocked on the host ({pid}): " in message
    assert " serve session-" in message


def test_a_load_point_feeds_the_spare_load_generator_started_ahead(
    sshd_factory: SshdFactory, silent_port: int
) -> None:
    """After a load point, the next one's process is already running, waiting for its spec on
    stdin (no spec file); its events are read as a one-shot's; an unused one ends with the
    session."""
    host = sshd_factory.start("sess-d")
    spec = LoadgenSpec(
        model="m",
        prompts=PromptSource(kind="list", items=["hello"]),
        port=silent_port,
        num_prompts=1,
        concurrency=1,
        max_tokens=4,
        timeout_s=0.5,
    )

    async def point(agent: Agent) -> LoadgenResult:
        results = [e async for e in agent.loadgen(spec) if isinstance(e, LoadgenResult)]
        assert len(results) == 1
        return results[0]

    async def body(agent: Agent) -> tuple[list[str], str, int]:
        await agent.ensure()
        first = await point(agent)  # its own process: no spare yet
        assert (first.requests, first.failed) == (1, 1)  # nothing answers on that port
        spare = agent._spare
        assert spare is not None
        tag = spare.argv[-1]
        assert tag.startswith("-spare-") and len(await started(tag)) == 1
        second = await point(agent)  # fed to the spare
        assert agent._spare is not None and agent._spare is not spare
        assert (second.requests, second.failed) == (1, 1)
        return spec_files(host.workdir), agent._spare.argv[-1], len(processes_with(tag))

    listing, unused, after = with_sshd_agent(sshd_factory, host, body)
    assert listing == []
    assert after == 0  # the spare that ran the second point is gone
    assert processes_with(unused) == []  # the unused spare ended before the connection did
    assert host.leftover_pids() == []
