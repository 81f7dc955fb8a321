"""`orch ps` and `orch stop`: the engine servers orch started on the hosts, and stopping them.

Both read the hosts' ``<workdir>/runs/*/server.json`` through the agent, so they work from any
controller (not only the one that launched): nothing is ever left orphaned on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agent.client import Agent
from orchestrator.commands.fanout import HostOutcome, each_host
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.errors import AgentError
from orchestrator.remote.wire import ErrorKind, ServerState, StatusSpec, StopOutcome, StopSpec

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


@dataclass
class HostServers:
    """One host's answer: its servers (``ps``) or what was stopped, or why it could not be asked."""

    host: str
    servers: list[ServerState] = field(default_factory=list)
    stopped: list[StopOutcome] = field(default_factory=list)
    error: str | None = None  # without the host's name: every line that shows it names the host
    hint: str | None = None


@dataclass(frozen=True)
class StopReport:
    """What `orch stop` did on every host it asked."""

    hosts: list[HostServers]
    run_id: str | None

    @property
    def stopped(self) -> list[tuple[str, StopOutcome]]:
        """(host, server) of every server that was running and is now stopped."""
        return [(r.host, s) for r in self.hosts for s in r.stopped if s.was_running]

    @property
    def failed(self) -> bool:
        """Some host could not be asked."""
        return any(r.error for r in self.hosts)

    @property
    def unknown_run(self) -> bool:
        """A run id was given, every host answered, and none of them ever launched it."""
        return bool(self.run_id) and not self.failed and not any(r.stopped for r in self.hosts)


def _entries(outcomes: list[HostOutcome[HostServers]]) -> list[HostServers]:
    return [
        o.unwrap() if o.ok else HostServers(o.host, error=o.message, hint=o.hint) for o in outcomes
    ]


async def list_servers(pool: ConnectionPool, hosts: list[HostConfig]) -> list[HostServers]:
    async def job(host: HostConfig) -> HostServers:
        agent = Agent(await pool.get(host), host)
        data = await agent.status(StatusSpec(all=True, workdir=await agent.workdir()))
        return HostServers(host.name, servers=list(data.servers))

    return _entries(await each_host(hosts, job))


async def stop_servers(
    pool: ConnectionPool,
    hosts: list[HostConfig],
    *,
    run_id: str | None = None,
    timeout_s: float = 30.0,
) -> StopReport:
    """Stop ``run_id`` wherever it exists, or every server (``run_id=None``); per-host results."""

    async def job(host: HostConfig) -> HostServers:
        agent = Agent(await pool.get(host), host)
        spec = StopSpec(
            workdir=await agent.workdir(), timeout_s=timeout_s, run_id=run_id, all=run_id is None
        )
        try:
            data = await agent.stop(spec, timeout=timeout_s + 120)
        except AgentError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return HostServers(host.name)
            raise
        return HostServers(host.name, stopped=list(data.stopped))

    return StopReport(_entries(await each_host(hosts, job)), run_id)


async def ps(inventory: Inventory, hosts: list[HostConfig], ssh: SshOptions) -> list[HostServers]:
    """`orch ps`: the servers on ``hosts``, one entry per host."""
    async with open_pool(inventory, ssh) as pool:
        return await list_servers(pool, hosts)


async def stop(
    inventory: Inventory,
    hosts: list[HostConfig],
    ssh: SshOptions,
    *,
    run_id: str | None,
    timeout_s: float,
) -> StopReport:
    """`orch stop`: ``run_id`` (or every server when None) on ``hosts``."""
    async with open_pool(inventory, ssh) as pool:
        return await stop_servers(pool, hosts, run_id=run_id, timeout_s=timeout_s)
