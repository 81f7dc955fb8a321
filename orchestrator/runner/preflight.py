"""Before any server starts: reach every host, push the agent, probe it, and run the doctor.

The doctor reads the target and drafter configs on the host itself (where the engine will read
them), so a drafter whose mask token or layer ids do not fit is caught before minutes of model
loading, and a host without the GPUs or free memory a run needs is caught before launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agent import Agent
from orchestrator.agent.client import AgentClient
from orchestrator.agent.facts import HostFacts
from orchestrator.commands.fanout import each_host, each_of
from orchestrator.config import HostConfig
from orchestrator.doctor import HostProbe, ModelConfig, check_run, model_from_agent
from orchestrator.doctor.findings import Finding
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import OrchError
from orchestrator.remote.wire import ModelRef, ReadModelConfigsSpec

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


@dataclass
class HostSession:
    """One host's connection, agent and facts for the whole playbook run (or why it has none)."""

    host: HostConfig
    agent: AgentClient | None = None
    facts: HostFacts | None = None
    error: OrchError | None = None


@dataclass
class DoctorResult:
    findings: list[Finding] = field(default_factory=list)
    target: ModelConfig | None = None
    drafter: ModelConfig | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


async def open_host(pool: ConnectionPool, host: HostConfig, ports: Sequence[int]) -> HostSession:
    """Reach ``host``, push the agent, probe it (``ports``: the ones its runs will listen on)."""
    conn = await pool.get(host)
    agent = Agent(conn, host)
    await agent.ensure()
    facts = HostFacts.from_probe(await agent.probe(ports=sorted(set(ports))))
    return HostSession(host, agent=agent, facts=facts)


async def open_hosts(
    pool: ConnectionPool, plans: Sequence[PlannedLaunch]
) -> dict[str, HostSession]:
    """Every host the plan touches, concurrently: a dead host never holds up the others."""
    hosts: dict[str, HostConfig] = {}
    ports: dict[str, list[int]] = {}
    for plan in plans:
        hosts.setdefault(plan.host.name, plan.host)
        ports.setdefault(plan.host.name, []).append(plan.port)

    async def job(host: HostConfig) -> HostSession:
        return await open_host(pool, host, ports[host.name])

    outcomes = await each_host(list(hosts.values()), job)
    return {
        o.host: o.unwrap() if o.error is None else HostSession(hosts[o.host], error=o.error)
        for o in outcomes
    }


async def doctor_run(session: HostSession, plan: PlannedLaunch) -> DoctorResult:
    """The doctor's findings for one run on one host (model files read on that host)."""
    run = plan.run
    if session.agent is None:
        return DoctorResult()
    draft = run.speculative.draft_model
    models = [ModelRef(id=run.model)] + ([ModelRef(id=draft)] if draft else [])
    answer = await session.agent.read_model_configs(ReadModelConfigsSpec(models=models))
    found = answer.models
    result = DoctorResult()
    result.target, note = model_from_agent(found, run.model, role="target")
    notes = [note]
    if draft:
        result.drafter, note = model_from_agent(found, draft, role="drafter")
        notes.append(note)
    gpus = plan.host.gpus
    result.findings = [n for n in notes if n is not None] + check_run(
        run,
        target=result.target,
        drafter=result.drafter,
        host=HostProbe.from_probe(session.facts.probe) if session.facts else None,
        expected_gpu=gpus.model if gpus else None,
        port=plan.port,
        env=plan.env,  # host env + run env: what the engine will really see
    )
    return result


async def doctor_plans(
    sessions: dict[str, HostSession], plans: Sequence[PlannedLaunch]
) -> list[DoctorResult]:
    async def one(plan: PlannedLaunch) -> DoctorResult:
        return await doctor_run(sessions[plan.host.name], plan)

    results = []
    for plan, outcome in zip(plans, await each_of(plans, one, host=_host_name), strict=True):
        if outcome.error is not None:  # the host went away: the run itself will report it
            session = sessions[plan.host.name]
            session.error = session.error or outcome.error
        results.append(outcome.unwrap() if outcome.error is None else DoctorResult())
    return results


def _host_name(plan: PlannedLaunch) -> str:
    return plan.host.name
