"""`orch hosts check`: connect to every host at once, push the agent if needed, probe, compare.

Hosts are checked concurrently and independently: one dead or slow host is reported as such and
never blocks or fails the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.agent import Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.config import HostConfig
from orchestrator.engines import ENGINES
from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

PhaseCallback = Callable[[str, str], None]


@dataclass
class HostReport:
    name: str
    reachable: bool = False
    error: str | None = None
    hint: str | None = None
    facts: HostFacts | None = None
    gpu_problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    agent_bytes_pushed: int = 0

    @property
    def ok(self) -> bool:
        """Reachable, the agent ran, and the GPUs are the ones declared (warnings do not count)."""
        return self.reachable and self.error is None and not self.gpu_problems

    @property
    def failure(self) -> str | None:
        """What stopped the check, by the step that failed: a host that answered SSH but could
        not run the agent (a wrong `python`) is no "unreachable" host."""
        if self.error is None:
            return None
        return f"{'agent failed' if self.reachable else 'unreachable'}: {self.error}"

    @property
    def problems(self) -> list[str]:
        return [*self.gpu_problems, *self.warnings]

    def to_json(self) -> dict[str, Any]:
        facts = self.facts
        return {
            "name": self.name,
            "reachable": self.reachable,
            "error": self.error,
            "hint": self.hint,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "memory_total_mib": g.memory_total_mib,
                    "memory_used_mib": g.memory_used_mib,
                }
                for g in (facts.gpus if facts else [])
            ],
            "driver": facts.driver_version if facts else None,
            "engines": {e: (facts.engines.get(e) if facts else None) for e in ENGINES},
            "python": facts.python_version if facts else None,
            "agent_bytes_pushed": self.agent_bytes_pushed,
            "problems": self.problems,
        }


def engine_warnings(host: HostConfig, facts: HostFacts) -> list[str]:
    installed = [e for e in ENGINES if facts.engines.get(e)]
    if installed:
        return []
    return [f"neither vllm nor sglang is installed for {host.python} (set `python` in hosts.yaml "
            "to the engine venv's interpreter)"]


async def check_host(
    pool: ConnectionPool, host: HostConfig, *, on_phase: PhaseCallback | None = None
) -> HostReport:
    report = HostReport(name=host.name)
    phase = on_phase or (lambda _h, _p: None)
    try:
        phase(host.name, "connecting")
        conn = await pool.get(host)
        report.reachable = True
        phase(host.name, "pushing agent")
        agent = Agent(conn, host)
        report.agent_bytes_pushed = await agent.ensure()
        phase(host.name, "probing")
        facts = HostFacts.from_probe(await agent.probe())
    except OrchError as exc:
        report.error, report.hint = exc.message, exc.hint
        phase(host.name, "failed")
        return report
    report.facts = facts
    report.gpu_problems = facts.gpu_problems(host.gpus)
    report.warnings = [*facts.gpu_warnings(host.gpus), *engine_warnings(host, facts)]
    phase(host.name, "done" if report.ok else "problems")
    return report


async def check_hosts(
    pool: ConnectionPool, hosts: Sequence[HostConfig], *, on_phase: PhaseCallback | None = None
) -> list[HostReport]:
    return list(await asyncio.gather(*(check_host(pool, h, on_phase=on_phase) for h in hosts)))
