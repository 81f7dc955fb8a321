"""Slurm clusters, through their login nodes (ordinary SSH hosts; ``orchestrator/slurm/``).

A run is placed in a single-node allocation of its own (``clusterrun.py``): acquired by
submitting its job and waiting for it, reached through an ``AllocationAgent``, released by
cancelling the job. A playbook's session reaches only the login node's agent. Leftovers are
orch's jobs in the queue (named ``orch-...``), which `orch stop --all` cancels (the job's
batch step holds the engine); `orch clean` prunes the job folders in the cluster's shared
workdir whose jobs have left the queue.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator.agent.client import Agent
from orchestrator.backends.base import Backend
from orchestrator.backends.clusterrun import run_cluster
from orchestrator.backends.hostrun import HostRun
from orchestrator.backends.reports import (
    CheckReport,
    CleanReport,
    ClusterJobs,
    ClusterReport,
    HostClean,
    PsReport,
    StopReport,
)
from orchestrator.config import HostConfig, Inventory, Playbook
from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.config.places import CLUSTER
from orchestrator.errors import OrchError
from orchestrator.remote.wire import PruneSpec
from orchestrator.runner.fanout import each_of
from orchestrator.runner.preflight import HostSession
from orchestrator.runner.progress import HostPhase, HostPhaseCallback
from orchestrator.runner.state import RunJob
from orchestrator.slurm.allocation import (
    JobState,
    cancel,
    login_workdir,
    orch_jobs,
    push_job_script,
)
from orchestrator.slurm.facts import CanSubmit, Partition, Partitions, SlurmVersion, run_fact
from orchestrator.slurm.jobs import JOB_NAME_PREFIX

if TYPE_CHECKING:
    from orchestrator.transport import Connection, ConnectionPool

SLURM_COMMAND_TIMEOUT_S = 60.0  # sinfo and sbatch answer in a second unless slurmctld hangs
PRUNE_TIMEOUT_S = 120.0
NOT_SHARED = (
    "workdir is not shared with the login node (shared_fs: false): the runs' folders are on "
    "the compute nodes' own disks, which only a job reaches; only the login node's was cleaned"
)


class SlurmClusters:
    """The `Backend` of Slurm clusters (hosts.yaml's ``clusters:``)."""

    place = CLUSTER

    def places(self, inventory: Inventory, only: Sequence[str] | None) -> list[HostConfig]:
        return [c.as_host() for c in inventory.select_clusters(only or None)]

    async def open(
        self, pool: ConnectionPool, host: HostConfig, ports: Sequence[int]
    ) -> HostSession:
        """The login node's agent (in the shared workdir, run by the login's Python), no probe:
        the nodes its runs get are probed inside their allocations."""
        login = _cluster(host).login
        agent = Agent(await pool.get(login), login, connect=functools.partial(pool.get, login))
        await agent.ensure()
        return HostSession(host, agent=agent)

    def execute(
        self, run: HostRun, jobs: Sequence[RunJob], playbook: Playbook, *, force: bool
    ) -> Awaitable[None]:
        return run_cluster(run, _cluster(run.session.host), jobs, playbook.slurm, force=force)

    async def check(
        self, pool: ConnectionPool, places: Sequence[HostConfig], on_phase: HostPhaseCallback
    ) -> CheckReport:
        clusters = [_cluster(p) for p in places]
        return CheckReport(clusters=await check_clusters(pool, clusters, on_phase=on_phase))

    async def ps(
        self, pool: ConnectionPool, places: Sequence[HostConfig], *, all_runs: bool
    ) -> PsReport:
        return PsReport(clusters=await each_cluster(pool, [_cluster(p) for p in places], False))

    async def stop(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        run_id: str | None,
        timeout_s: float,
    ) -> StopReport:
        clusters = [_cluster(p) for p in places]
        return StopReport([], run_id, await each_cluster(pool, clusters, True, run_id))

    async def clean(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        older_than_s: float | None,
        keep: int | None,
        dry_run: bool,
    ) -> CleanReport:
        spec = PruneSpec(workdir="", older_than_s=older_than_s, keep=keep, dry_run=dry_run)
        return await clean_clusters(pool, [_cluster(p) for p in places], spec)


BACKEND: Backend = SlurmClusters()


def _cluster(host: HostConfig) -> ClusterConfig:
    """The cluster a place of this backend stands for (``ClusterConfig.as_host``)."""
    assert host.cluster is not None, f"{host.name} is no Slurm cluster"
    return host.cluster


def _cluster_name(cluster: ClusterConfig) -> str:
    return cluster.name


# -- ps, stop and clean -----------------------------------------------------------------------


async def each_cluster(
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


def _job_id(job: JobState) -> int:
    return job.job_id


async def clean_clusters(
    pool: ConnectionPool, clusters: Sequence[ClusterConfig], spec: PruneSpec
) -> CleanReport:
    """The login node's agent prunes each cluster's job folders (``<workdir>/jobs/<run id>``)
    whose jobs are no longer in Slurm's queue (asked just before: those still there are live,
    whatever their records say), and its stale spec files. Without a shared workdir the
    folders are on the nodes: only the login node's own workdir is pruned, and a note says so."""

    async def job(cluster: ClusterConfig) -> HostClean:
        conn = await pool.get(cluster.login)
        agent = Agent(conn, cluster.login)
        workdir = await agent.workdir()
        if not cluster.shared_fs:
            result = await agent.prune(replace(spec, workdir=workdir), timeout=PRUNE_TIMEOUT_S)
            return HostClean(cluster.name, result, note=NOT_SHARED)
        live = [j.name.removeprefix(JOB_NAME_PREFIX) for j in await orch_jobs(conn)]
        mine = replace(spec, workdir=workdir, jobs=True, live=live)
        return HostClean(cluster.name, await agent.prune(mine, timeout=PRUNE_TIMEOUT_S))

    outcomes = await each_of(clusters, job, host=_cluster_name)
    entries = [
        o.unwrap() if o.ok else HostClean(o.host, error=o.message, hint=o.hint) for o in outcomes
    ]
    return CleanReport(entries, spec.dry_run)


# -- hosts check ------------------------------------------------------------------------------


def _ignore(_host: str, _phase: HostPhase) -> None:
    return None


def partition_problems(cluster: ClusterConfig, partitions: list[Partition]) -> list[str]:
    """Why the configured partition cannot run orch's jobs, from sinfo alone (the submit test
    then says whether Slurm agrees, and what else it refuses)."""
    found = {p.name: p for p in partitions}
    part = found.get(cluster.partition)
    if part is None:
        names = ", ".join(found) or "(none)"
        return [f"partition {cluster.partition!r} does not exist; partitions: {names}"]
    problems = [] if part.state == "up" else [f"partition {part.name!r} is {part.state}"]
    have = part.gpus_per_node(cluster.gres)
    if have < cluster.gpus_per_node:
        offered = ", ".join(str(g) for g in part.gres if g.name == "gpu") or "no GPUs"
        problems.append(
            f"partition {part.name!r} has no node with {cluster.gres_request} "
            f"(its nodes offer {offered})"
        )
    return problems


async def _push_job_script(conn: Connection, cluster: ClusterConfig) -> ClusterConfig:
    """The fixed job script must exist for ``sbatch --test-only`` to read it, as for a job: in
    the login node's workdir (the cluster's, when it is shared). The cluster as submitted."""
    workdir = await login_workdir(conn, cluster)
    await push_job_script(conn, workdir)
    return replace(cluster, workdir=workdir)


async def _check_cluster(
    pool: ConnectionPool, cluster: ClusterConfig, report: ClusterReport, phase: HostPhaseCallback
) -> None:
    phase(cluster.name, HostPhase.CONNECTING)
    conn = await pool.get(cluster.login)
    report.reachable = True
    phase(cluster.name, HostPhase.PROBING)
    # one after another: three quick commands, and a failed one leaves none running behind
    timeout = SLURM_COMMAND_TIMEOUT_S
    report.version = await run_fact(conn, SlurmVersion(), timeout=timeout)
    report.partitions = partitions = await run_fact(conn, Partitions(), timeout=timeout)
    submitting = await _push_job_script(conn, cluster)
    report.submit = submitted = await run_fact(conn, CanSubmit(submitting), timeout=timeout)
    report.problems = partition_problems(cluster, partitions)
    if not submitted.ok:
        report.problems.append(f"cannot submit: {submitted.message}")


async def check_clusters(
    pool: ConnectionPool,
    clusters: Sequence[ClusterConfig],
    *,
    on_phase: HostPhaseCallback | None = None,
) -> list[ClusterReport]:
    """One report per cluster, in ``clusters`` order, all checked at once like hosts."""
    phase = on_phase or _ignore
    reports = {c.name: ClusterReport(name=c.name) for c in clusters}

    async def job(cluster: ClusterConfig) -> None:
        report = reports[cluster.name]
        try:
            await _check_cluster(pool, cluster, report, phase)
        except OrchError:
            phase(cluster.name, HostPhase.FAILED)
            raise
        phase(cluster.name, HostPhase.DONE if report.ok else HostPhase.PROBLEMS)

    for outcome in await each_of(clusters, job, host=_cluster_name):
        if outcome.error is not None:
            report = reports[outcome.host]
            report.error, report.hint = outcome.error.message, outcome.error.hint
    return list(reports.values())
