"""Dry-run planning: which run goes to which host, with which exact argv and environment.

Every run is validated before anything else happens, so a mistake in the last run of a
playbook is reported before the first server starts. Placement: a run goes to the hosts its
own ``hosts`` selector names, else the playbook's; ``--only`` narrows that further. Runs that
share a host execute one after another in playbook order (each needs the host's GPUs to
itself), unless the playbook says ``share_gpus``: then runs needing fewer GPUs than the host has
run at once on GPUs of their own (``runner/slots.py``); different hosts work in parallel. The
plan lists runs in playbook order, then hosts in inventory order, which is also the order each
host starts its runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.hostconfig import HostConfig
from orchestrator.config.inventory import Inventory
from orchestrator.config.places import place_kind
from orchestrator.config.playbook import Playbook, RunSpec, cluster_hosts
from orchestrator.engines import engine_for
from orchestrator.engines.parallel import Parallelism
from orchestrator.errors import SpecError


@dataclass(frozen=True)
class PlannedLaunch:
    run: RunSpec
    host: HostConfig
    argv: list[str]  # secrets masked: safe to print
    env_masked: dict[str, str]
    port: int
    env: dict[str, str] = field(repr=False, default_factory=dict)  # the real values, never printed
    argv_real: list[str] = field(repr=False, default_factory=list)

    @property
    def run_name(self) -> str:
        return str(self.run.name)

    @property
    def parallelism(self) -> Parallelism:
        """The server's parallel sizes, as its argv sets them."""
        return engine_for(self.run).parallelism(self.run)

    @property
    def gpus(self) -> int:
        """GPUs the server needs: the product of its parallel sizes (``engines/parallel.py``)."""
        return self.parallelism.gpus


def hosts_for(
    run: RunSpec, playbook: Playbook, inventory: Inventory, host_filter: Sequence[str] | None = None
) -> list[HostConfig]:
    """The hosts ``run`` goes to: its own selector, else the playbook's, narrowed by the filter."""
    chosen = playbook.hosts_for(run, inventory)
    if host_filter:
        selectors = list(host_filter)
        allowed = {
            h.name for h in inventory.select(selectors) + cluster_hosts(inventory, selectors)
        }
        chosen = [h for h in chosen if h.name in allowed]
    return chosen


def spec_fields(exc: SpecError) -> list[str]:
    """Where in the run a SpecError points, as the dotted paths ``Playbook.error_at`` takes:
    the ``field`` its raiser gave (the engine's validation always gives one), else none (the
    error is then shown at the run itself)."""
    dotted = exc.dotted_field
    return [dotted] if dotted else []


def plan_launches(
    playbook: Playbook,
    inventory: Inventory,
    *,
    host_filter: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[PlannedLaunch]:
    runs = list(playbook.expand())  # matrix runs become one run per combination
    for run in runs:  # all of them first: no host is touched for a playbook with a bad run
        try:
            engine_for(run).validate(run)
        except SpecError as exc:
            raise playbook.error_at(run, spec_fields(exc), exc.message, hint=exc.hint) from exc
    plans: list[PlannedLaunch] = []
    for run in runs:
        engine = engine_for(run)
        port = engine.port(run)
        argv = engine.argv(run, port=port)
        for host in hosts_for(run, playbook, inventory, host_filter):
            env = engine.env(run, host, environ=environ)
            secrets = engine.secrets(run, host, environ=environ)
            plans.append(
                PlannedLaunch(
                    run=run,
                    host=host,
                    argv=engine.masked_argv(argv, secrets),
                    env_masked=engine.masked_env(env, secrets),
                    port=port,
                    env=env,
                    argv_real=argv,
                )
            )
    return plans


def relocated(plan: PlannedLaunch, port: int) -> PlannedLaunch:
    """``plan`` listening on ``port`` instead (a cluster's run whose port was taken on the node
    it was given): its argv rebuilt, masked as planning masks it."""
    if port == plan.port:
        return plan
    engine = engine_for(plan.run)
    argv = engine.argv(plan.run, port=port)
    masked = engine.masked_argv(argv, engine.secrets(plan.run, plan.host))
    return dataclasses.replace(plan, port=port, argv=masked, argv_real=argv)


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost", "localhost6"})


def machine_of(host: HostConfig) -> str:
    """Which machine's loopback ``host``'s engines listen on, as far as the inventory tells:
    embedded hosts all run on this machine; SSH hosts are told apart by address (two entries
    with one address, whatever their SSH port or user, reach one machine)."""
    if host.transport == "embedded":
        return "localhost"
    target = host.target.strip().lower().strip("[]")
    return "localhost" if target in LOOPBACK_NAMES else target


@dataclass(frozen=True)
class PortCollision:
    """Two launches that would run at once on one machine and port."""

    first: PlannedLaunch
    second: PlannedLaunch
    machine: str

    @property
    def port(self) -> int:
        return self.first.port

    def message(self) -> str:
        where = (
            "this machine's loopback (both are embedded hosts or reach 127.0.0.1)"
            if self.machine == "localhost"
            else f"one machine ({self.machine})"
        )
        return (
            f"runs {self.first.run_name!r} on {self.first.host.name} and "
            f"{self.second.run_name!r} on {self.second.host.name} would both listen on port "
            f"{self.port} of {where} at the same time: one would fail with 'address already in "
            "use' and be measured against the other's server"
        )


def port_collisions(plans: Sequence[PlannedLaunch]) -> list[PortCollision]:
    """Launches that would run at the same time on the same machine and port.

    Different host entries run in parallel; the launches of one entry never collide: they run
    one after another, or, with ``share_gpus``, a run waits while another run of its host
    listens on its port (``runner/slots.py``). So two launches collide when their entries
    differ, reach one machine (``machine_of``) and use one port. One collision per pair of host
    entries and port.
    """
    found: list[PortCollision] = []
    seen: set[tuple[str, str, int]] = set()
    for i, first in enumerate(plans):
        for second in plans[i + 1 :]:
            if first.host.name == second.host.name or first.port != second.port:
                continue
            machine = machine_of(first.host)
            if machine != machine_of(second.host):
                continue
            a, b = sorted((first.host.name, second.host.name))
            if (a, b, first.port) in seen:
                continue
            seen.add((a, b, first.port))
            found.append(PortCollision(first, second, machine))
    return found


@dataclass(frozen=True)
class GpuShortfall:
    """A launch needing more GPUs than its host declares in hosts.yaml (``gpus:``)."""

    plan: PlannedLaunch
    host_gpus: int

    def message(self) -> str:
        p = self.plan
        if p.host.cpu_only:
            return (
                f"run {p.run_name!r} needs {p.gpus} devices ({p.parallelism.describe()}) but "
                f"host {p.host.name} is a CPU host (hosts.yaml: gpus: none), where a server "
                "runs on one device, the CPU"
            )
        limit = place_kind(p.host).gpu_shortfall
        if limit:
            why = limit.format(name=p.host.name, have=self.host_gpus)
            return f"run {p.run_name!r} needs {p.gpus} GPUs ({p.parallelism.describe()}) but {why}"
        return (
            f"run {p.run_name!r} needs {p.gpus} GPUs ({p.parallelism.describe()}) but host "
            f"{p.host.name} has {self.host_gpus} (hosts.yaml: gpus: {p.host.gpus}): with "
            "share_gpus it could never get them"
        )


def gpu_shortfalls(plans: Sequence[PlannedLaunch]) -> list[GpuShortfall]:
    """Launches whose host, as hosts.yaml declares it, has fewer GPUs than they need (a host
    without ``gpus:`` is not judged here: its probe will tell). A CPU host (``gpus: none``)
    offers one device, its CPU."""
    return [
        GpuShortfall(p, devices)
        for p in plans
        if p.host.gpus is not None and p.gpus > (devices := max(p.host.gpus.count, 1))
    ]


def to_json(plans: Sequence[PlannedLaunch]) -> dict[str, Any]:
    """``{"runs": [{"run", "host", "argv", "env"}]}`` with secrets shown as ``***``."""
    return {
        "runs": [
            {
                "run": p.run_name,
                "host": p.host.name,
                "argv": list(p.argv),
                "env": dict(p.env_masked),
            }
            for p in plans
        ]
    }
