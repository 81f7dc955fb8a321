"""`orch ps` and `orch stop`: what orch left running on every place, and stopping it.

Each backend answers for its places (``backends/``): on hosts, the servers in the workdirs'
``runs/*/server.json`` read through the agent, so both work from any controller (not only the
one that launched) and nothing is ever left orphaned on a GPU; on Slurm clusters, orch's batch
jobs (named ``orch-...``), which `orch stop --all` cancels. A place that cannot be asked is
that place's failure. `orch ps` shows live servers unless asked for every run (``all_runs``).
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from functools import reduce

from orchestrator.backends.base import by_backend
from orchestrator.backends.hosts import STOP_GRACE_S
from orchestrator.backends.reports import PsReport, StopReport
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.config import HostConfig, Inventory

__all__ = ["STOP_GRACE_S", "ps", "stop"]


async def ps(
    inventory: Inventory,
    places: Sequence[HostConfig],
    ssh: SshOptions,
    *,
    all_runs: bool = False,
) -> PsReport:
    """`orch ps`: the live servers (every run's with ``all_runs``) and jobs on ``places``
    (``backends.select_places``), each backend asked at once."""
    async with open_pool(inventory, ssh) as pool:
        parts = await asyncio.gather(
            *(b.ps(pool, mine, all_runs=all_runs) for b, mine in by_backend(places))
        )
        return reduce(operator.add, parts, PsReport())


async def stop(
    inventory: Inventory,
    places: Sequence[HostConfig],
    ssh: SshOptions,
    *,
    run_id: str | None,
    timeout_s: float,
) -> StopReport:
    """`orch stop`: ``run_id`` (or everything orch started, when None) on ``places``."""
    async with open_pool(inventory, ssh) as pool:
        parts = await asyncio.gather(
            *(
                b.stop(pool, mine, run_id=run_id, timeout_s=timeout_s)
                for b, mine in by_backend(places)
            )
        )
        return reduce(operator.add, parts, StopReport([], run_id))
