"""`orch ps` and `orch stop`: the engine servers orch started on the hosts, and stopping them.

Both read the hosts' ``<workdir>/runs/*/server.json`` through the agent, so they work from any
controller (not only the one that launched): nothing is ever left orphaned on a GPU.

Two host entries may reach one machine and one workdir (another address, port or user whose
home is the same): the agent says which machine (``/etc/machine-id``) and which real workdir it
answered for, and entries with both equal are asked once and shown once, naming every entry
(``HostServers.also``). `orch ps` shows live servers unless asked for every run (``all_runs``).

Slurm clusters are asked alongside the hosts, through their login nodes: there orch's servers
are its batch jobs (named ``orch-...``), which `orch ps` lists and `orch stop --all` cancels.
A login node that cannot be reached is a cluster's failure, as an unreachable host is a host's.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from orchestrator.agent.client import Agent
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.config.cluster import ClusterConfig
from orchestrator.errors import AgentError
from orchestrator.remote.wire import ErrorKind, ServerState, StatusSpec, StopOutcome, StopSpec
from orchestrator.runner.fanout import HostOutcome, each_host, each_of
from orchestrator.slurm.allocation import JobState, cancel, orch_jobs
from orchestrator.slurm.jobs import JOB_NAME_PREFIX

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

STOP_GRACE_S = StopSpec.timeout_s  # `orch stop --grace`: seconds from SIGTERM to SIGKILL
STOP_LINGER_S = StopSpec.linger_s  # once the server's port has closed, this long at most


@dataclass
class HostServers:
    """One host's answer: its servers (``ps``) or what was stopped, or why it could not be asked."""

    host: str
    servers: list[ServerState] = field(default_factory=list)
    stopped: list[StopOutcome] = field(default_factory=list)
    error: str | None = None  # without the host's name: every line that shows it names the host
    hint: str | None = None
    machine_id: str | None = None  # which machine and real workdir answered (None: not known)
    workdir: str | None = None
    also: list[str] = field(default_factory=list)  # other host entries for the same workdir

    @property
    def place(self) -> tuple[str, str] | None:
        """(machine id, real workdir) when both are known: entries with equal places share one
        workdir, hence its servers."""
        if self.machine_id and self.workdir:
            return (self.machine_id, self.workdir)
        return None

    @property
    def names(self) -> list[str]:
        return [self.host, *self.also]


def is_live(server: ServerState) -> bool:
    """Running, or something of its process group still is (exiting)."""
    return server.alive or bool(server.group_pids)


def same_place(entries: Sequence[HostServers]) -> list[HostServers]:
    """One entry per (machine, workdir): the first entry of each place, naming the others in
    ``also``; entries whose place is unknown (a host that could not be asked) stay as they are."""
    out: list[HostServers] = []
    first: dict[tuple[str, str], HostServers] = {}
    for entry in entries:
        place = entry.place
        if place is None:
            out.append(entry)
        elif place in first:
            first[place].also.append(entry.host)
        else:
            first[place] = entry
            out.append(entry)
    return out


@dataclass
class ClusterJobs:
    """One cluster's answer: orch's jobs in its queue (``ps``) or those cancelled (``stop``),
    or why its login node could not be asked."""

    cluster: str
    jobs: list[JobState] = field(default_factory=list)
    error: str | None = None  # without the cluster's name, as HostServers.error
    hint: str | None = None


@dataclass(frozen=True)
class PsReport:
    """What `orch ps` found: servers on the hosts, orch's jobs on the clusters."""

    hosts: list[HostServers]
    clusters: list[ClusterJobs] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Some host or cluster could not be asked."""
        return any(r.error for r in self.hosts) or any(c.error for c in self.clusters)


@dataclass(frozen=True)
class StopReport:
    """What `orch stop` did on every host and cluster it asked."""

    hosts: list[HostServers]
    run_id: str | None
    clusters: list[ClusterJobs] = field(default_factory=list)

    @property
    def stopped(self) -> list[tuple[str, StopOutcome]]:
        """(host, server) of every server that was running and is now stopped."""
        return [(r.host, s) for r in self.hosts for s in r.stopped if s.was_running]

    @property
    def cancelled(self) -> list[tuple[str, JobState]]:
        """(cluster, job) of every orch job that was in a queue and is now cancelled."""
        return [(c.cluster, job) for c in self.clusters for job in c.jobs]

    @property
    def failed(self) -> bool:
        """Some host or cluster could not be asked."""
        return any(r.error for r in self.hosts) or any(c.error for c in self.clusters)

    @property
    def unknown_run(self) -> bool:
        """A run id was given, every host answered, and none of them ever launched it."""
        return (
            bool(self.run_id)
            and not self.failed
            and not any(r.stopped for r in self.hosts)
            and not self.cancelled
        )


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


async def _each_cluster(
    pool: ConnectionPool,
    clusters: Sequence[ClusterConfig],
    cancelling: bool,
    run_id: str | None = None,
) -> list[ClusterJobs]:
    """Every cluster's orch jobs at once (``run_id``'s alone, when given: its job is named
    after it), through its login node; cancelled when ``cancelling`` (those listed just
    before: a job submitted meanwhile is not orch's to guess at, and the next `orch stop
    --all` gets it). Cancelling a run's job stops its engine: the job's batch step holds it."""

    async def job(cluster: ClusterConfig) -> ClusterJobs:
        conn = await pool.get(cluster.login)
        jobs = sorted(await orch_jobs(conn), key=_job_id)  # squeue puts pending ones first
        if run_id is not None:
            jobs = [j for j in jobs if j.name == JOB_NAME_PREFIX + run_id]
        if cancelling:
            await cancel(conn, [j.job_id for j in jobs])
        return ClusterJobs(cluster.name, jobs=jobs)

    outcomes = await each_of(clusters, job, host=_cluster_name)
    return [
        o.unwrap() if o.ok else ClusterJobs(o.host, error=o.message, hint=o.hint) for o in outcomes
    ]


def _cluster_name(cluster: ClusterConfig) -> str:
    return cluster.name


def _job_id(job: JobState) -> int:
    return job.job_id


async def ps(
    inventory: Inventory,
    hosts: list[HostConfig],
    ssh: SshOptions,
    *,
    all_runs: bool = False,
    clusters: Sequence[ClusterConfig] = (),
) -> PsReport:
    """`orch ps`: the live servers on ``hosts`` (every run's with ``all_runs``), one entry per
    machine and workdir, and orch's jobs queued on ``clusters``."""
    async with open_pool(inventory, ssh) as pool:
        servers, jobs = await asyncio.gather(
            list_servers(pool, hosts, all_runs=all_runs), _each_cluster(pool, clusters, False)
        )
        return PsReport(servers, jobs)


async def stop(
    inventory: Inventory,
    hosts: list[HostConfig],
    ssh: SshOptions,
    *,
    run_id: str | None,
    timeout_s: float,
    clusters: Sequence[ClusterConfig] = (),
) -> StopReport:
    """`orch stop`: ``run_id`` (or every server when None) on ``hosts``, and its job (or
    every orch job) on ``clusters``, cancelled."""
    async with open_pool(inventory, ssh) as pool:
        report, jobs = await asyncio.gather(
            stop_servers(pool, hosts, run_id=run_id, timeout_s=timeout_s),
            _each_cluster(pool, clusters, True, run_id),
        )
        return replace(report, clusters=jobs)
