"""Before any server starts: reach every host, push the agent, probe it, and run the doctor.

The doctor reads the target and drafter configs on the host itself (where the engine will read
them), so a drafter whose mask token or layer ids do not fit is caught before minutes of model
loading, and a host without the GPUs or free memory a run needs is caught before launch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.agent import Agent
from orchestrator.agent.client import AgentClient
from orchestrator.agent.facts import HostFacts
from orchestrator.config import HostConfig
from orchestrator.doctor import HostProbe, check_run, model_from_agent
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
    target: Any = None  # ModelConfig
    drafter: Any = None  # ModelConfig

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


async def open_host(pool: ConnectionPool, host: HostConfig, ports: Sequence[int]) -> HostSession:
    session = HostSession(host)
    try:
        conn = await pool.get(host)
        agent = Agent(conn, host)
        await agent.ensure()
        session.agent = agent
        session.facts = HostFacts.from_probe(await agent.probe(ports=sorted(set(ports))))
    except OrchError as exc:
        session.error = exc
    return session


async def open_hosts(pool: ConnectionPool, plans: Sequence[PlannedLaunch]) -> dict[str, HostSession]:
    """Every host the plan touches, concurrently: a dead host never holds up the others."""
    hosts: dict[str, HostConfig] = {}
    ports: dict[str, list[int]] = {}
    for plan in plans:
        hosts.setdefault(plan.host.name, plan.host)
        ports.setdefault(plan.host.name, []).append(plan.port)
    sessions = await asyncio.gather(*(open_host(pool, h, ports[n]) for n, h in hosts.items()))
    return {s.host.name: s for s in sessions}


async def doctor_run(session: HostSession, plan: PlannedLaunch) -> DoctorResult:
    """The doctor's findings for one run on one host (model files read on that host)."""
    run = plan.run
    if session.agent is None:
        return DoctorResult()
    draft = run.speculative.draft_model
    models = [ModelRef(id=run.model)] + ([ModelRef(id=draft)] if draft else [])
    answer = await session.agent.read_model_configs(ReadModelConfigsSpec(models=models))
    # the doctor reads the entries as JSON objects (its model tests build them as such)
    found = {model_id: files.to_json() for model_id, files in answer.models.items()}
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
        session = sessions[plan.host.name]
        try:
            return await doctor_run(session, plan)
        except OrchError as exc:  # the host went away: the run itself will report it
            session.error = session.error or exc
            return DoctorResult()

    return list(await asyncio.gather(*(one(p) for p in plans)))
