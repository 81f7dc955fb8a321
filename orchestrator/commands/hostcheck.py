"""`orch hosts check`: connect to every host at once, push the agent if needed, probe, compare.

Hosts are checked concurrently and independently (``fanout.each_host``): one dead or slow host
is reported as such and never blocks or fails the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agent import Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.commands.fanout import each_host
from orchestrator.commands.progress import HostPhase, HostPhaseCallback
from orchestrator.config import HostConfig
from orchestrator.engines import ENGINES
from orchestrator.errors import OrchError
from orchestrator.runner.preflight import host_requirements

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


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
    reports = {h.name: HostReport(name=h.name) for h in hosts}

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
