"""`orch clean`: remove finished runs' folders from the hosts' workdirs (the agent's ``prune``).

A run's folder on the host keeps its command line (API key included) and the engine's log for
as long as nobody removes it; the controller has its own copy in the results folder. Live
servers' folders are never touched; host entries that reach one workdir are pruned once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agent.client import Agent
from orchestrator.commands.servers import distinct_hosts
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.errors import OrchError
from orchestrator.remote.wire import PruneResult, PruneSpec
from orchestrator.runner.fanout import each_host

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
PRUNE_TIMEOUT_S = 120.0


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"`` (a bare number is seconds) -> seconds."""
    match = _AGE.match(text)
    if match is None:
        raise OrchError(
            f"--older-than {text!r} is not an age",
            hint="give a number with a unit: 90s, 30m, 12h, 7d or 2w",
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass
class HostClean:
    """One workdir's answer (``also``: other host entries for it), or why it could not be asked."""

    host: str
    result: PruneResult | None = None
    also: list[str] = field(default_factory=list)
    error: str | None = None
    hint: str | None = None


@dataclass(frozen=True)
class CleanReport:
    hosts: list[HostClean]
    dry_run: bool

    @property
    def failed(self) -> bool:
        """A host could not be asked, or a folder could not be removed."""
        return any(
            h.error or (h.result and any(p.error for p in h.result.pruned)) for h in self.hosts
        )


async def clean_hosts(
    pool: ConnectionPool,
    hosts: list[HostConfig],
    *,
    older_than_s: float | None,
    keep: int | None,
    dry_run: bool,
) -> CleanReport:
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


async def clean(
    inventory: Inventory,
    hosts: list[HostConfig],
    ssh: SshOptions,
    *,
    older_than_s: float | None = None,
    keep: int | None = None,
    dry_run: bool = False,
) -> CleanReport:
    """`orch clean`: prune finished runs on ``hosts``."""
    if keep is not None and keep < 0:
        raise OrchError(f"--keep {keep}: give 0 or more runs to keep")
    async with open_pool(inventory, ssh) as pool:
        return await clean_hosts(pool, hosts, older_than_s=older_than_s, keep=keep, dry_run=dry_run)
