"""One Slurm cluster's runs during `orch run`: each in an allocation of its own.

A run asks Slurm for a single-node job with the GPUs it needs, waits while telling its queue
state and reason (``PENDING (Resources)``), probes the node it was given, records the job, node
and GPUs in its manifest, then runs exactly as on a host (``execute_run`` with an
``AllocationAgent``), after the doctor has looked again from that node. Whatever happens (the run ends, fails, is interrupted by Ctrl-C or
SIGTERM), its job is cancelled on the way out.

Up to ``slurm.max_allocations`` runs of the playbook are under way on a cluster at once; Slurm
decides when each starts. Runs planned on one port may land on one node: the second then
listens on the next free port, found by the node's probe, and its manifest says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agent.client import Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.backends.hostrun import HostRun
from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.config.playbook import SlurmSpec
from orchestrator.doctor.findings import Finding, warning
from orchestrator.engines.plan import relocated
from orchestrator.errors import OrchError
from orchestrator.runner.execute import execute_run, not_run_results
from orchestrator.runner.preflight import HostSession, doctor_run
from orchestrator.runner.progress import DoctorNotice, PhaseChanged, RunPhase
from orchestrator.runner.server import live_agent, shielded
from orchestrator.runner.state import RunJob
from orchestrator.slurm.allocation import Allocation, AllocationTimeout, JobState
from orchestrator.slurm.node import AllocationAgent

PORT_TRIES = 16  # ports tried from the planned one on, on the node a run is given


@dataclass
class ClusterRun:
    """What one cluster's runs share: the host run (login session, results, observer) and
    the playbook's Slurm settings."""

    host: HostRun
    cluster: ClusterConfig
    spec: SlurmSpec
    force: bool = False  # --force: the doctor's errors do not refuse a launch
    taken: dict[str, set[int]] = field(default_factory=dict)  # node -> ports of runs under way
    held: dict[str, tuple[str, int]] = field(default_factory=dict)  # run key -> (node, port)

    async def run(self, job: RunJob) -> None:
        """``job`` in an allocation of its own, its results recorded whatever happens."""
        host = self.host
        if host.gone is not None:
            host.not_run(job)
            return
        if host.session.agent is None:
            error = host.session.error or OrchError("login node not reachable")
            host.failed(job, error)
            host.gone = (
                f"not run: the login node of {self.cluster.name} could not be reached "
                f"({error.message})"
            )
            return
        login = await live_agent(host.pool, self.cluster.login, host.session.agent)
        assert isinstance(login, Agent)
        connect = functools.partial(host.pool.get, self.cluster.login)
        agent = AllocationAgent(login, self.cluster, job.run_id, connect=connect)
        try:
            await self._in_allocation(job, agent)
        finally:
            self._give_port(job)
            problem = await shielded(agent.release())
            if problem is not None:
                advice = f"; cancel it with `orch stop --all --only {self.cluster.name}`"
                finding = warning("slurm_release", problem + advice)
                host.observer.on_event(
                    DoctorNotice(job.plan.run_name, host.session.host.name, finding)
                )

    async def _in_allocation(self, job: RunJob, agent: AllocationAgent) -> None:
        host = self.host

        def queued(state: JobState) -> None:
            if state.running:  # launching comes next; the manifest names the node
                return
            why = f"job {state.job_id} {state.describe()}"
            host.observer.on_event(PhaseChanged(job.key, RunPhase.QUEUED, reason=why))

        host.observer.on_event(PhaseChanged(job.key, RunPhase.QUEUED, reason="submitting"))
        try:
            allocation = await agent.allocate(
                job.plan.gpus, pending_timeout=self.spec.pending_timeout_s, on_state=queued
            )
            job.manifest = with_slurm(
                job.manifest, self.cluster, job_id=agent.job_id, allocation=allocation
            )
            wanted = job.plan.port
            facts = HostFacts.from_probe(await agent.probe(ports=port_candidates(wanted)))
            self._take_port(job, allocation, facts)
        except AllocationTimeout as exc:
            job.manifest = with_slurm(
                job.manifest, self.cluster, job_id=exc.job_id, allocation=None
            )
            why = f"not run: {exc.message}"
            host.results[job.key] = not_run_results(job, why, host.observer)
            host.observer.on_event(PhaseChanged(job.key, RunPhase.FAILED, reason=why))
            return
        except OrchError as exc:
            job.manifest = with_slurm(
                job.manifest, self.cluster, job_id=agent.job_id, allocation=agent.allocation
            )
            host.failed(job, exc)
            return
        few = few_cpus(allocation, job.plan.gpus)
        if few is not None:
            job.doctor.append(few)
            host.observer.on_event(DoctorNotice(job.plan.run_name, self.cluster.name, few))
        job.manifest = with_slurm(
            job.manifest, self.cluster, job_id=agent.job_id, allocation=allocation, facts=facts
        )
        refused = await self._doctor(job, agent, facts)
        if refused:
            node = ", ".join(agent.allocation.nodes) if agent.allocation else "?"
            lines = "; ".join(f"[{f.check}] {f.message}" for f in refused)
            host.failed(job, OrchError(f"the doctor refused to launch on node {node}: {lines}"))
            return
        host.results[job.key] = await execute_run(
            job,
            agent=agent,
            reconnect=agent.reconnected,
            registry=host.registry,
            observer=host.observer,
        )

    def _take_port(self, job: RunJob, allocation: Allocation, facts: HostFacts) -> None:
        """The run's port on its node: the planned one, or the next free one when another run
        of this playbook, or anything else, listens there (runs sharing a port may share a
        node). The run's plan and manifest then say which."""
        node = allocation.nodes[0] if allocation.nodes else "?"
        mine = self.taken.setdefault(node, set())
        port = choose_port(job.plan.port, facts.free_ports, mine)
        if port is None:
            raise OrchError(
                f"no free port on node {node} from {job.plan.port} to "
                f"{job.plan.port + PORT_TRIES - 1}",
                hint="give the run another `port:` in the playbook",
            )
        mine.add(port)
        self.held[job.key] = (node, port)
        if port != job.plan.port:
            moved = {"port": port, "port_planned": job.plan.port}
            job.plan = relocated(job.plan, port)
            job.manifest = {**job.manifest, **moved, "argv": job.plan.argv}

    def _give_port(self, job: RunJob) -> None:
        node, port = self.held.pop(job.key, ("", 0))
        self.taken.get(node, set()).discard(port)

    async def _doctor(self, job: RunJob, agent: AllocationAgent, facts: HostFacts) -> list[Finding]:
        """The doctor again, on the node the run was given (its Python, its GPUs, the model
        files it sees): the errors that refuse the launch, unless forced or ``doctor: warn``.
        Its findings join the run's in the manifest."""
        session = HostSession(job.plan.host, agent=agent, facts=facts)
        result = await doctor_run(session, job.plan)
        job.drafter = result.drafter or job.drafter
        job.target = result.target or job.target
        seen = {(f.check, f.message) for f in job.doctor}
        job.doctor += [f for f in result.findings if (f.check, f.message) not in seen]
        job.manifest = {**job.manifest, "doctor": [f.to_json() for f in job.doctor]}
        if self.force or str(job.plan.run.doctor) != "error":
            return []
        return result.errors


def with_slurm(
    record: dict[str, Any],
    cluster: ClusterConfig,
    *,
    job_id: int | None,
    allocation: Allocation | None,
    facts: HostFacts | None = None,
) -> dict[str, Any]:
    """``record`` for a run on a Slurm cluster: its job, the node and GPUs Slurm gave it, and
    the facts probed inside the allocation (where the engine runs, not the login node)."""
    slurm = {
        "cluster": cluster.name,
        "partition": cluster.partition,
        "account": cluster.account,
        "qos": cluster.qos,
        "job_id": job_id,
        "nodes": list(allocation.nodes) if allocation else [],
        "gpus": list(allocation.gpus) if allocation else [],
        "cpus": allocation.cpus if allocation else None,
        "memory_mib": allocation.memory_mib if allocation else None,
    }
    out = {**record, "slurm": slurm}
    if facts is not None:
        out["host_facts"] = dataclasses.asdict(facts)
        out["engine_version"] = facts.engines.get(str(record.get("run", {}).get("engine")))
    return out


def port_candidates(wanted: int) -> list[int]:
    """The ports a run may listen on, in order: its own, then the next ones."""
    return [p for p in range(wanted, wanted + PORT_TRIES) if p < 65536]


def choose_port(wanted: int, free: Sequence[int], taken: set[int]) -> int | None:
    """The first of ``port_candidates(wanted)`` free on the node and not taken by a run of
    this playbook there (the probe cannot see a port whose engine is still loading)."""
    return next((p for p in port_candidates(wanted) if p in free and p not in taken), None)


def few_cpus(allocation: Allocation, gpus: int) -> Finding | None:
    """A warning when the job's CPUs cannot give each GPU worker, the engine's API server and
    the load generator one of their own: the figures would then measure CPU contention."""
    need = gpus + 2
    if allocation.cpus is None or allocation.cpus >= need:
        return None
    return warning(
        "slurm_cpus",
        f"job {allocation.job_id} has {allocation.cpus} CPU{'s' * (allocation.cpus != 1)} for "
        f"{gpus} GPU worker{'s' * (gpus != 1)}, the engine's API server and the load generator: "
        f"the figures may measure CPU contention. Fix: ask for at least {need} in the "
        "cluster's sbatch_options (e.g. '--cpus-per-gpu=8')",
        cpus=allocation.cpus,
    )


async def run_cluster(
    host: HostRun,
    cluster: ClusterConfig,
    jobs: Sequence[RunJob],
    spec: SlurmSpec,
    *,
    force: bool = False,
) -> None:
    """``jobs`` (one cluster's, in playbook order), up to ``spec.max_allocations`` at once. An
    exception in one (a results folder that cannot be written) cancels
    the others, whose jobs are then cancelled by their own clean-up."""
    runner = ClusterRun(host, cluster, spec, force)
    limit = asyncio.Semaphore(spec.max_allocations)

    async def one(job: RunJob) -> None:
        async with limit:
            await runner.run(job)

    tasks = [asyncio.ensure_future(one(job)) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
