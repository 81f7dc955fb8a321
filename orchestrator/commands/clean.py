"""`orch clean`: remove finished runs' folders from every place's workdir.

A run's folder keeps its command line (API key included) and the engine's log for as long as
nobody removes it; the controller has its own copy in the results folder. Each backend prunes
its places (``backends/``): a host's workdir through its agent (host entries that reach one
workdir pruned once), a Slurm cluster's job folders through its login node's agent. A live
run's folder is never touched.
"""

from __future__ import annotations

import asyncio
import operator
import re
from collections.abc import Sequence
from functools import reduce

from orchestrator.backends.base import by_backend
from orchestrator.backends.reports import CleanReport
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.errors import OrchError

__all__ = ["clean", "parse_age"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"`` (a bare number is seconds) -> seconds."""
    match = _AGE.match(text)
    if match is None:
        raise OrchError(
            f"--older-than {text!r} is not an age",
            hint="give a number with a unit: 90s, 30m, 12h, 7d or 2w",
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


async def clean(
    inventory: Inventory,
    places: Sequence[HostConfig],
    ssh: SshOptions,
    *,
    older_than_s: float | None = None,
    keep: int | None = None,
    dry_run: bool = False,
) -> CleanReport:
    """`orch clean`: prune finished runs on ``places`` (``backends.select_places``)."""
    if keep is not None and keep < 0:
        raise OrchError(f"--keep {keep}: give 0 or more runs to keep")
    async with open_pool(inventory, ssh) as pool:
        parts = await asyncio.gather(
            *(
                b.clean(pool, mine, older_than_s=older_than_s, keep=keep, dry_run=dry_run)
                for b, mine in by_backend(places)
            )
        )
        return reduce(operator.add, parts, CleanReport([], dry_run))
