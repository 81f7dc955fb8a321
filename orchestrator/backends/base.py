"""The backend seam: what orch needs of a kind of place where runs execute.

A *place* is what hosts.yaml declares and a playbook's ``hosts:`` names: an SSH host, or a
Slurm cluster (reached through its login node). Every place is handed around as a
`HostConfig`; its ``backend`` field names the kind, and `backend_of` finds the one object
that knows how to plan, acquire, reach, release, list, stop and clean on places of that kind.
Commands loop over `backends()` or group places with `by_backend`; none of them branches on
the kind, so a new kind (Kubernetes) is one module plus one entry in `REGISTRY`.

The registry names each backend as ``"module:attribute"`` (as the agent's verbs are) and
imports it on first use: each backend's module imports this one for the protocol. What the
planner and the runner read of a kind (its noun, GPU bounds, wording) is plain data below them,
``config/places.py``; reaching a place (`open_hosts`) is here, for the commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

from orchestrator.config import HostConfig, Inventory
from orchestrator.config.places import CLUSTER, HOST, PlaceKind
from orchestrator.runner.fanout import each_host
from orchestrator.runner.preflight import HostSession

if TYPE_CHECKING:
    from orchestrator.backends.hostrun import HostRun
    from orchestrator.backends.reports import CheckReport, CleanReport, PsReport, StopReport
    from orchestrator.config import Playbook
    from orchestrator.engines.plan import PlannedLaunch
    from orchestrator.runner.progress import HostPhaseCallback
    from orchestrator.runner.state import RunJob
    from orchestrator.transport import ConnectionPool

# kind -> "module:attribute" of its Backend; hosts.yaml's entries say their kind
# (HostConfig.backend), in this order commands list them
REGISTRY: dict[str, str] = {
    HOST.kind: "orchestrator.backends.hosts:BACKEND",
    CLUSTER.kind: "orchestrator.backends.slurm:BACKEND",
}


class Backend(Protocol):
    """One kind of place. Every method takes places of this kind only (`by_backend`)."""

    # its kind's plain facts (config/places.py): the kind, its noun, GPU bounds and wording,
    # which the planner and the runner read there without reaching the backend
    place: PlaceKind

    def places(self, inventory: Inventory, only: Sequence[str] | None) -> list[HostConfig]:
        """The inventory's places of this kind that ``only`` selects (all: None)."""
        ...

    async def open(
        self, pool: ConnectionPool, host: HostConfig, ports: Sequence[int]
    ) -> HostSession:
        """Reach ``host``'s agent for a playbook run (``ports``: its runs'); OrchError: not."""
        ...

    def execute(
        self, run: HostRun, jobs: Sequence[RunJob], playbook: Playbook, *, force: bool
    ) -> Awaitable[None]:
        """``jobs`` (one place's, in playbook order): each placed, acquired, executed and
        released, its results recorded in ``run.results``."""
        ...

    async def check(
        self, pool: ConnectionPool, places: Sequence[HostConfig], on_phase: HostPhaseCallback
    ) -> CheckReport:
        """`orch hosts check` on ``places``."""
        ...

    async def ps(
        self, pool: ConnectionPool, places: Sequence[HostConfig], *, all_runs: bool
    ) -> PsReport:
        """orch's leftovers on ``places``: its servers (live only unless ``all_runs``), jobs."""
        ...

    async def stop(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        run_id: str | None,
        timeout_s: float,
    ) -> StopReport:
        """Stop ``run_id`` (every one of orch's servers: None) on ``places``."""
        ...

    async def clean(
        self,
        pool: ConnectionPool,
        places: Sequence[HostConfig],
        *,
        older_than_s: float | None,
        keep: int | None,
        dry_run: bool,
    ) -> CleanReport:
        """Remove finished runs' folders on ``places``; a live run's never."""
        ...


_loaded: dict[str, Backend] = {}


def backend(kind: str) -> Backend:
    """The backend registered for ``kind`` (a KeyError for an unknown one: config validates)."""
    found = _loaded.get(kind)
    if found is None:
        module, _, attribute = REGISTRY[kind].partition(":")
        found = _loaded[kind] = getattr(importlib.import_module(module), attribute)
    return found


def backends() -> list[Backend]:
    """Every registered backend, in registry order."""
    return [backend(kind) for kind in REGISTRY]


def backend_of(host: HostConfig) -> Backend:
    return backend(host.backend)


def select_places(inventory: Inventory, only: Sequence[str] | None) -> list[HostConfig]:
    """Every place ``only`` selects, backend by backend (hosts, then clusters)."""
    return [place for b in backends() for place in b.places(inventory, only)]


def by_backend(places: Sequence[HostConfig]) -> list[tuple[Backend, list[HostConfig]]]:
    """``places`` grouped by backend, in registry order; backends without a place left out."""
    groups = [(b, [p for p in places if p.backend == b.place.kind]) for b in backends()]
    return [(b, mine) for b, mine in groups if mine]


async def open_host(pool: ConnectionPool, host: HostConfig, ports: Sequence[int]) -> HostSession:
    """Reach ``host``, push the agent, probe it (``ports``: the ones its runs will listen on),
    as its backend does it (a cluster's login node gets the agent but no probe)."""
    return await backend_of(host).open(pool, host, ports)


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
