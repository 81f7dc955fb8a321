"""Dry-run planning: which run goes to which host, with which exact argv and environment.

Every run is validated before anything else happens, so a mistake in the last run of a
playbook is reported before the first server starts. Placement: a run goes to the hosts its
own ``hosts`` selector names, else the playbook's; ``--only`` narrows that further. Runs that
share a host execute one after another in playbook order (each needs the host's GPUs to
itself); different hosts work in parallel. The plan lists runs in playbook order, then hosts in
inventory order, which is also the order each host executes its runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.hostconfig import HostConfig
from orchestrator.config.playbook import SpeculativeSpec
from orchestrator.engines import adapter_for
from orchestrator.errors import SpecError


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


_DOTTED = re.compile(r"\b(?:speculative(?:\.[\w-]+){1,2}|extra_args|tensor_parallel)\b")
_FLAG = re.compile(r"extra_args (?:sets|has) (--?[\w.-]+)")
_SPECULATIVE_FIELDS = tuple(f for f in SpeculativeSpec.model_fields if f != "options")


def spec_fields(exc: SpecError, run: Any) -> list[str]:
    """Where in the run a SpecError points, most specific first (``Playbook.error_at`` takes
    the first one written in the file).

    ``exc.field`` when the adapter set it; else the settings its message names: dotted paths
    first (``speculative.draft_model``, ``extra_args``), then bare speculative field names
    (``method`` in "speculative method 'x' needs ..."). An extra_args error naming a flag
    points at the item holding it.
    """
    found = [exc.field] if exc.field else []
    found += [m.group(0) for m in _DOTTED.finditer(exc.message)]
    bare = {m.start(): f"speculative.{name}" for name in _SPECULATIVE_FIELDS
            for m in re.finditer(rf"\b{name}\b", exc.message)}
    found += [bare[at] for at in sorted(bare)]  # in the order the message names them
    flag = _FLAG.search(exc.message)
    if flag and "extra_args" in found:
        items = [str(a) for a in run.extra_args or []]
        at = next((i for i, a in enumerate(items)
                   if a == flag.group(1) or a.startswith(flag.group(1) + "=")), None)
        if at is not None:
            found.insert(found.index("extra_args"), f"extra_args.{at}")
    return list(dict.fromkeys(found))


def plan_launches(playbook: Any, inventory: Any, *, host_filter: Sequence[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> list[PlannedLaunch]:
    runs = list(playbook.expand())  # matrix runs become one run per combination
    for run in runs:  # all of them first: no host is touched for a playbook with a bad run
        try:
            adapter_for(run).validate(run)
        except SpecError as exc:
            raise playbook.error_at(run, spec_fields(exc, run), exc.message, hint=exc.hint) from exc
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
