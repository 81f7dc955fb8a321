"""Before any server starts: reach every host, push the agent, probe it, and run the doctor.

The doctor reads the target and drafter configs on the host itself (where the engine will read
them), so a drafter whose mask token or layer ids do not fit is caught before minutes of model
loading, and a host without the GPUs or free memory a run needs is caught before launch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agent.client import AgentClient
from orchestrator.agent.facts import HostFacts
from orchestrator.config import HostConfig
from orchestrator.config.places import place_kind
from orchestrator.doctor import HostProbe, ModelConfig, check_run, model_from_agent
from orchestrator.doctor.findings import Finding
from orchestrator.doctor.findings import error as finding_error
from orchestrator.engines import get_engine
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import OrchError
from orchestrator.remote.wire import ModelRef, ReadModelConfigsSpec
from orchestrator.runner.fanout import each_of

if TYPE_CHECKING:
    pass


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


async def doctor_run(session: HostSession, plan: PlannedLaunch) -> DoctorResult:
    """The doctor's findings for one run on one host (model files read on that host)."""
    run = plan.run
    if session.agent is None:
        return DoctorResult()
    draft = run.speculative.draft_model
    models = [ModelRef(id=run.model)] + ([ModelRef(id=draft)] if draft else [])
    # where the engine will look: the HF_HOME its environment sets (a cluster's login node
    # reads the shared cache the compute nodes' engines are given), else the agent's own
    spec = ReadModelConfigsSpec(models=models, hf_home=plan.env.get("HF_HOME"))
    answer = await session.agent.read_model_configs(spec)
    found = answer.models
    result = DoctorResult()
    result.target, note = model_from_agent(found, run.model, role="target")
    notes = [note]
    if draft:
        result.drafter, note = model_from_agent(found, draft, role="drafter")
        notes.append(note)
    gpus = plan.host.gpus
    needs = (
        host_requirements(plan.host.python, session.facts, engine=run.engine)
        if session.facts
        else []
    )
    result.findings = [finding_error("host_requirements", m) for m in needs]
    result.findings += [from_login(n, plan) for n in notes if n is not None] + check_run(
        run,
        target=result.target,
        drafter=result.drafter,
        host=(
            HostProbe.from_probe(
                session.facts.probe, cpu_only=plan.host.cpu_only, name=plan.host.name
            )
            if session.facts
            else None
        ),
        expected_gpu=gpus.model if gpus else None,
        port=plan.port,
        env=plan.env,  # host env + run env: what the engine will really see
    )
    return result


def from_login(finding: Finding, plan: PlannedLaunch) -> Finding:
    """A model's files not found from a cluster's login node may still be on the node the run
    is given (its own disk): a warning here, checked again inside the allocation."""
    if not place_kind(plan.host).front_door or finding.severity != "error":
        return finding
    return dataclasses.replace(
        finding,
        severity="warning",
        message=f"{finding.message} (read from the login node of {plan.host.name}; checked "
        "again on the node the run is given)",
    )


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


# -- what a run needs on its host ---------------------------------------------------------------


def host_requirements(python: str, facts: HostFacts, *, engine: str | None) -> list[str]:
    """What a run of ``engine`` (None: any run) would miss on a host with ``facts``, as one
    sentence each naming the interpreter and what to install; empty when nothing is missing.

    A probe by an older agent reports no modules: nothing is claimed missing then.
    """
    modules = facts.probe.modules
    if not modules:
        return []
    where = f"{python} ({facts.python_executable})" if facts.python_executable else python
    missing = []
    if engine is not None:
        package = get_engine(engine).package
        if modules.get(package) is False:
            version = facts.packages.get(package)
            found = f" (its metadata says {package} {version})" if version else ""
            missing.append(
                f"{package} is not importable by {where}{found}: install it there "
                f"({python} -m pip install {package}), or set `python` in hosts.yaml to the "
                "interpreter of the venv that has it"
            )
    return missing


class HostNotReady(OrchError):
    """Runs whose host lacks what they import (the engine): refused before any launch,
    where each would otherwise fail after loading its model."""

    def __init__(self, missing: dict[str, list[str]], runs: dict[str, list[str]]) -> None:
        lines = [
            f"{host} (runs {', '.join(runs[host])}): {line}"
            for host, lines_ in missing.items()
            for line in lines_
        ]
        super().__init__(
            "a host lacks what its runs need:\n  " + "\n  ".join(lines),
            hint="`orch hosts check` shows what each host has; README: What a host needs",
        )
        self.missing = missing


def check_requirements(sessions: dict[str, HostSession], plans: Sequence[PlannedLaunch]) -> None:
    """Refuse (``HostNotReady``) when a probed host lacks what one of its runs imports."""
    missing: dict[str, list[str]] = {}
    runs: dict[str, list[str]] = {}
    for plan in plans:
        session = sessions.get(plan.host.name)
        if session is None or session.facts is None:
            continue
        lines = host_requirements(plan.host.python, session.facts, engine=plan.run.engine)
        if lines:
            runs.setdefault(plan.host.name, []).append(plan.run_name)
            known = missing.setdefault(plan.host.name, [])
            known += [line for line in lines if line not in known]
    if missing:
        raise HostNotReady(missing, runs)
