"""`orch hosts check`: every place checked at once, each by its backend (``backends/``).

Hosts: connect, push the agent if needed, probe, compare with hosts.yaml. Slurm clusters:
through their login nodes, no agent, only Slurm's own client commands. One dead or slow place
is reported as such and never blocks or fails the others.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from orchestrator.backends.base import by_backend
from orchestrator.backends.reports import CheckReport
from orchestrator.config import HostConfig
from orchestrator.runner.progress import HostPhase, HostPhaseCallback

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


def _ignore(_host: str, _phase: HostPhase) -> None:
    return None


async def check(
    pool: ConnectionPool,
    places: Sequence[HostConfig],
    *,
    on_phase: HostPhaseCallback | None = None,
) -> CheckReport:
    """One report per place (``backends.select_places``), backend by backend, in ``places``
    order within each; each place's phase is told as it gets there."""
    phase = on_phase or _ignore
    parts = await asyncio.gather(*(b.check(pool, mine, phase) for b, mine in by_backend(places)))
    return reduce(operator.add, parts, CheckReport())
