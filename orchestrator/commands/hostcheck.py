"""`orch hosts check`: connect to every host at once, push the agent if needed, probe, compare.

Hosts are checked concurrently and independently (``fanout.each_host``): one dead or slow host
is reported as such and never blocks or fails the others. Slurm clusters are checked alongside,
through their login nodes (ordinary SSH hosts): no agent, only Slurm's own client commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from orchestrator.agent import Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.config import HostConfig
from orchestrator.config.cluster import ClusterConfig
from orchestrator.engines import ENGINES
from orchestrator.errors import OrchError
from orchestrator.runner.fanout import each_host, each_of
from orchestrator.runner.preflight import host_requirements
from orchestrator.runner.progress import HostPhase, HostPhaseCallback
from orchestrator.slurm.allocation import login_workdir, push_job_script
from orchestrator.slurm.facts import (
    CanSubmit,
    Partition,
    Partitions,
    SlurmVersion,
    SubmitCheck,
    run_fact,
)

if TYPE_CHECKING:
    from orchestrator.transport import Connection, ConnectionPool

SLURM_COMMAND_TIMEOUT_S = 60.0  # sinfo and sbatch answer in a second unless slurmctld hangs


@dataclass
class HostReport:
    name: str
    reachable: bool = False
    error: str | None = None
    hint: str | None = None
    facts: HostFacts | None = None
    gpu_problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # what every run imports (aiohttp)
    warnings: list[str] = field(default_factory=list)
    agent_bytes_pushed: int = 0
    cpu_only: bool = False  # hosts.yaml declares `gpus: none`: no GPU is expected

    @property
    def ok(self) -> bool:
        """Reachable, the agent ran, and the GPUs are the ones declared (warnings do not count)."""
        return self.reachable and self.error is None and not self.gpu_problems and not self.missing

    @property
    def failure(self) -> str | None:
        """What stopped the check, by the step that failed: a host that answered SSH but could
        not run the agent (a wrong `python`) is no "unreachable" host."""
        if self.error is None:
            return None
        return f"{'agent failed' if self.reachable else 'unreachable'}: {self.error}"

    @property
    def problems(self) -> list[str]:
        return [*self.gpu_problems, *self.missing, *self.warnings]


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


@dataclass
class ClusterReport:
    """One Slurm cluster: how far the check got through its login node, and what Slurm said."""

    name: str
    reachable: bool = False  # the login node answered SSH
    error: str | None = None
    hint: str | None = None
    version: str | None = None
    partitions: list[Partition] = field(default_factory=list)
    submit: SubmitCheck | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The login node answered, Slurm did, the partition has the GPUs, and a job would be
        accepted."""
        return self.reachable and self.error is None and not self.problems

    @property
    def failure(self) -> str | None:
        if self.error is None:
            return None
        return f"{'slurm failed' if self.reachable else 'login unreachable'}: {self.error}"


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


def _cluster_name(cluster: ClusterConfig) -> str:
    return cluster.name
