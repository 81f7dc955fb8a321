"""The SSH host pool: places that are machines orch reaches over SSH and runs its agent on.

A run is placed on its host as the playbook says (one after another, or on GPU slots of their
own with ``share_gpus``: ``hostrun.py``); the host is acquired by reaching its agent, and
released by stopping the run's server. Leftovers are the servers in the hosts' workdirs
(``<workdir>/runs/*/server.json``), read through the agent from any controller.

Two host entries may reach one machine and one workdir (another address, port or user whose
home is the same): the agent says which machine (``/etc/machine-id``) and which real workdir it
answered for, and entries with both equal are asked once and shown once, naming every entry.
"""

from __future__ import annotations

import functools
import getpass
import os
import socket
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from orchestrator.agent.client import Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.backends.base import Backend
from orchestrator.backends.hostrun import HostRun, host_slots, run_host
from orchestrator.backends.reports import (
    CheckReport,
    CleanReport,
    HostClean,
    HostReport,
    HostServers,
    PsReport,
    StopReport,
    is_live,
    same_place,
)
from orchestrator.config import HostConfig, Inventory, Playbook
from orchestrator.config.places import HOST
from orchestrator.engines import ENGINES
from orchestrator.errors import AgentError, OrchError
from orchestrator.remote.wire import ErrorKind, PruneResult, PruneSpec, StatusSpec, StopSpec
from orchestrator.runner.fanout import HostOutcome, each_host
from orchestrator.runner.preflight import HostSession, host_requirements
from orchestrator.runner.progress import HostPhase, HostPhaseCallback
from orchestrator.runner.state import RunJob

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

STOP_GRACE_S = StopSpec.timeout_s  # `orch stop --grace`: seconds from SIGTERM to SIGKILL
STOP_LINGER_S = StopSpec.linger_s  # once the server's port has closed, this long at most
PRUNE_TIMEOUT_S = 120.0


class HostPool:
    """The `Backend` of SSH hosts (hosts.yaml's ``hosts:``)."""

    place = HOST

    def places(self, inventory: Inventory, only: Sequence[str] | None) -> list[HostConfig]:
        return inventory.select(only or None)

    async def open(
        self, pool: ConnectionPool, host: HostConfig, ports: Sequence[int]
    ) -> HostSession:
        conn = await pool.get(host)
        # every call takes a live connection: one that dropped is re-opened for the next step
        agent = Agent(conn, host, connect=functools.partial(pool.get, host))
        await agent.ensure()
        facts = HostFacts.from_probe(await agent.probe(ports=sorted(set(ports))))
        return HostSession(host, agent=agent, facts=facts)

    def execute(
        self, run: HostRun, jobs: Sequence[RunJob], playbook: Playbook, *, force: bool
    ) -> Awaitable[None]:
        return run_host(run, jobs, host_slots(playbook, run.session, run.observer))

    async def check(
        self, pool: ConnectionPool, places: Sequence[HostConfig], on_phase: HostPhaseCallback
    ) -> CheckReport:
        return CheckReport(hosts=await check_hosts(pool, places, on_phase=on_phase))

    async def ps(
        self, pool: ConnectionPool, places: Sequence[HostConfig], *, all_runs: bool
    ) -> PsReport:
        return PsReport(hosts=await list_servers(pool, list(places), all_runs=all_runs))

    async def stop(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        run_id: str | None,
        timeout_s: float,
    ) -> StopReport:
        return await stop_servers(pool, list(places), run_id=run_id, timeout_s=timeout_s)

    async def clean(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        older_than_s: float | None,
        keep: int | None,
        dry_run: bool,
    ) -> CleanReport:
        return await clean_hosts(
            pool, list(places), older_than_s=older_than_s, keep=keep, dry_run=dry_run
        )


BACKEND: Backend = HostPool()


# -- hosts check ------------------------------------------------------------------------------


def engine_warnings(host: HostConfig, facts: HostFacts) -> list[str]:
    installed = [e for e in ENGINES if facts.engines.get(e)]
    if installed:
        return []
    return [
        f"neither {' nor '.join(ENGINES)} is installed for {host.python} "
        "(set `python` in hosts.yaml "
        "to the engine venv's interpreter)"
    ]


def _ignore(_host: str, _phase: HostPhase) -> None:
    return None


async def _probe(
    pool: ConnectionPool, host: HostConfig, report: HostReport, phase: HostPhaseCallback
) -> HostFacts:
    """Reach, push, probe; ``report`` records how far it got (an OrchError says why not)."""
    phase(host.name, HostPhase.CONNECTING)
    conn = await pool.get(host)
    report.reachable = True
    phase(host.name, HostPhase.PUSHING_AGENT)
    agent = Agent(conn, host)
    report.agent_bytes_pushed = await agent.ensure()
    phase(host.name, HostPhase.PROBING)
    return HostFacts.from_probe(await agent.probe())


async def check_hosts(
    pool: ConnectionPool, hosts: Sequence[HostConfig], *, on_phase: HostPhaseCallback | None = None
) -> list[HostReport]:
    """One report per host, in ``hosts`` order; each host's phase is told as it gets there."""
    phase = on_phase or _ignore
    reports = {h.name: HostReport(name=h.name, cpu_only=h.cpu_only) for h in hosts}

    async def job(host: HostConfig) -> HostReport:
        report = reports[host.name]
        try:
            facts = await _probe(pool, host, report, phase)
        except OrchError:
            phase(host.name, HostPhase.FAILED)
            raise
        report.facts = facts
        report.gpu_problems = facts.gpu_problems(host.gpus)
        report.missing = host_requirements(host.python, facts, engine=None)
        report.warnings = [*facts.gpu_warnings(host.gpus), *engine_warnings(host, facts)]
        phase(host.name, HostPhase.DONE if report.ok else HostPhase.PROBLEMS)
        return report

    for outcome in await each_host(hosts, job):
        if outcome.error is not None:
            report = reports[outcome.host]
            report.error, report.hint = outcome.error.message, outcome.error.hint
    return list(reports.values())


# -- ps, stop and clean -----------------------------------------------------------------------


def _entries(outcomes: list[HostOutcome[HostServers]]) -> list[HostServers]:
    return [
        o.unwrap() if o.ok else HostServers(o.host, error=o.message, hint=o.hint) for o in outcomes
    ]


async def list_servers(
    pool: ConnectionPool, hosts: list[HostConfig], *, all_runs: bool = True
) -> list[HostServers]:
    """Every place's servers, once per (machine, workdir); ``all_runs=False``: live ones only."""

    async def job(host: HostConfig) -> HostServers:
        agent = Agent(await pool.get(host), host)
        data = await agent.status(StatusSpec(all=True, workdir=await agent.workdir()))
        servers = [s for s in data.servers if all_runs or is_live(s)]
        return HostServers(
            host.name, servers=servers, machine_id=data.machine_id, workdir=data.workdir
        )

    return same_place(_entries(await each_host(hosts, job)))


async def distinct_hosts(
    pool: ConnectionPool, hosts: list[HostConfig]
) -> list[tuple[HostConfig, list[str]]]:
    """``hosts`` less the entries that reach a workdir an earlier one already does, each with
    the names of the entries it stands for; a host that cannot be asked is kept (the command
    then reports why)."""
    by_name = {h.name: h for h in hosts}
    if len(hosts) < 2:
        return [(h, []) for h in hosts]
    return [(by_name[e.host], e.also) for e in await list_servers(pool, hosts)]


def who_stops() -> str:
    """``user@controller``: what the interrupted run names as having stopped its server."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


async def stop_servers(
    pool: ConnectionPool,
    hosts: list[HostConfig],
    *,
    run_id: str | None = None,
    timeout_s: float = STOP_GRACE_S,
) -> StopReport:
    """Stop ``run_id`` wherever it exists, or every server (``run_id=None``); per-host results.
    ``timeout_s`` is the grace between SIGTERM and SIGKILL (shorter once the port has closed:
    ``StopSpec.linger_s``). Each server is marked as stopped by this user first, so a run
    measuring on it says so rather than guessing at its death."""

    also = dict((h.name, names) for h, names in await distinct_hosts(pool, hosts))
    by = who_stops()

    async def job(host: HostConfig) -> HostServers:
        agent = Agent(await pool.get(host), host)
        spec = StopSpec(
            workdir=await agent.workdir(),
            timeout_s=timeout_s,
            linger_s=min(STOP_LINGER_S, timeout_s),
            run_id=run_id,
            all=run_id is None,
            requested_by=by,
            wait_gpus=not host.cpu_only,
        )
        try:
            data = await agent.stop(spec, timeout=timeout_s + 120)
        except AgentError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return HostServers(host.name, also=also[host.name])
            raise
        return HostServers(host.name, stopped=list(data.stopped), also=also[host.name])

    chosen = [h for h in hosts if h.name in also]
    return StopReport(_entries(await each_host(chosen, job)), run_id)


async def clean_hosts(
    pool: ConnectionPool,
    hosts: list[HostConfig],
    *,
    older_than_s: float | None,
    keep: int | None,
    dry_run: bool,
) -> CleanReport:
    """The agent's ``prune`` in every distinct workdir: a live server's folder is never touched."""
    also = dict((h.name, names) for h, names in await distinct_hosts(pool, hosts))

    async def job(host: HostConfig) -> PruneResult:
        agent = Agent(await pool.get(host), host)
        spec = PruneSpec(
            workdir=await agent.workdir(), older_than_s=older_than_s, keep=keep, dry_run=dry_run
        )
        return await agent.prune(spec, timeout=PRUNE_TIMEOUT_S)

    chosen = [h for h in hosts if h.name in also]
    entries = []
    for outcome in await each_host(chosen, job):
        if outcome.ok:
            entries.append(HostClean(outcome.host, outcome.unwrap(), also=also[outcome.host]))
        else:
            entries.append(HostClean(outcome.host, error=outcome.message, hint=outcome.hint))
    return CleanReport(entries, dry_run)
