"""Dry-run planning: which run goes to which host, with which exact argv and environment.

Every run is validated before anything else happens, so a mistake in the last run of a
playbook is reported before the first server starts. Placement: a run goes to the hosts its
own ``hosts`` selector names, else the playbook's; ``--only`` narrows that further. Runs that
share a host execute one after another in playbook order (each needs the host's GPUs to
itself); different hosts work in parallel. The plan lists runs in playbook order, then hosts in
inventory order, which is also the order each host executes its runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines import adapter_for


@dataclass(frozen=True)
class PlannedLaunch:
    run: Any  # RunSpec
    host: HostConfig
    argv: list[str]  # secrets masked: safe to print
    env_masked: dict[str, str]
    port: int
    env: dict[str, str] = field(repr=False, default_factory=dict)  # the real values, never printed
    argv_real: list[str] = field(repr=False, default_factory=list)

    @property
    def run_name(self) -> str:
        return str(self.run.name)


def hosts_for(run: Any, playbook: Any, inventory: Any,
              host_filter: Sequence[str] | None = None) -> list[HostConfig]:
    """The hosts ``run`` goes to: its own selector, else the playbook's, narrowed by the filter."""
    chosen = playbook.hosts_for(run, inventory)
    if host_filter:
        allowed = {h.name for h in inventory.select(list(host_filter))}
        chosen = [h for h in chosen if h.name in allowed]
    return chosen


def plan_launches(playbook: Any, inventory: Any, *, host_filter: Sequence[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> list[PlannedLaunch]:
    runs = list(playbook.expand())  # matrix runs become one run per combination
    for run in runs:  # all of them first: no host is touched for a playbook with a bad run
        adapter_for(run).validate(run)
    plans: list[PlannedLaunch] = []
    for run in runs:
        adapter = adapter_for(run)
        port = adapter.port(run)
        argv = adapter.argv(run, port=port)
        for host in hosts_for(run, playbook, inventory, host_filter):
            env = adapter.env(run, host, environ=environ)
            secrets = adapter.secrets(run, host, environ=environ)
            plans.append(PlannedLaunch(
                run=run, host=host, argv=adapter.masked_argv(argv, secrets),
                env_masked=adapter.masked_env(env, secrets), port=port, env=env, argv_real=argv,
            ))
    return plans


def to_json(plans: Sequence[PlannedLaunch]) -> dict[str, Any]:
    """``{"runs": [{"run", "host", "argv", "env"}]}`` with secrets shown as ``***``."""
    return {
        "runs": [
            {"run": p.run_name, "host": p.host.name, "argv": list(p.argv), "env": dict(p.env_masked)}
            for p in plans
        ]
    }
