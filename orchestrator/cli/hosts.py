"""`orch hosts check`: the inventory's hosts, their GPUs and engines, in one table."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from orchestrator.cli.common import (
    DEFAULT_HOSTS_FILE,
    AcceptNewOpt,
    HostsFileOpt,
    JsonOpt,
    KnownHostsOpt,
    OnlyOpt,
    SshOptions,
    err,
    out,
    print_json,
)
from orchestrator.commands.hostcheck import HostReport, check_hosts
from orchestrator.commands.progress import HostPhase
from orchestrator.commands.session import load_hosts, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.engines import ENGINES

app = typer.Typer(help="Inspect the hosts in the inventory.", no_args_is_help=True)


@app.command("check")
def check(
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Connect to every host at once, push the agent if needed, probe GPUs and engines.

    Exit status 0 when every host is reachable, runs the agent and has the GPUs hosts.yaml
    declares.
    """
    inventory, hosts = load_hosts(hosts_file, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
    reports = asyncio.run(_check_with_progress(inventory, hosts, ssh, quiet=as_json))
    if as_json:
        print_json({"hosts": [report_json(r) for r in reports]})
    else:
        out.print(render_table(reports))
        for r in reports:
            if r.error and r.hint:
                out.print(f"[bold]{escape(r.name)}[/]: {escape(r.hint)}")
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


async def _check_with_progress(
    inventory: Inventory, hosts: list[HostConfig], ssh: SshOptions, *, quiet: bool
) -> list[HostReport]:
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.fields[phase]}"),
        console=err,
        transient=True,
        disable=quiet or not err.is_terminal,
    ) as progress:
        tasks = {
            h.name: progress.add_task(h.name, phase=HostPhase.WAITING.value, total=None)
            for h in hosts
        }

        def on_phase(name: str, phase: HostPhase) -> None:
            progress.update(tasks[name], phase=phase.value)

        async with open_pool(inventory, ssh) as pool:
            return await check_hosts(pool, hosts, on_phase=on_phase)


def render_table(reports: list[HostReport]) -> Table:
    table = Table(title="hosts", title_justify="left")
    for col in ("host", "GPUs", "memory in use", "driver", *ENGINES):
        table.add_column(col, no_wrap=True)
    table.add_column("problems")
    for r in reports:
        f = r.facts
        if f is None:
            dashes = ["-"] * (3 + len(ENGINES))
            table.add_row(escape(r.name), *dashes, f"[red]{escape(r.failure or '')}[/]")
            continue
        gpus = ", ".join(sorted({g.name or "?" for g in f.gpus})) if f.gpus else "none"
        gpus = f"{len(f.gpus)} x {gpus}" if f.gpus else gpus
        mem = (
            "\n".join(
                f"{g.index}: {_mib(g.memory_used_mib)} / {_mib(g.memory_total_mib)}" for g in f.gpus
            )
            or "-"
        )
        problems = (
            "\n".join(
                [f"[red]{escape(p)}[/]" for p in [*r.gpu_problems, *r.missing]]
                + [f"[yellow]{escape(p)}[/]" for p in r.warnings]
            )
            or "[green]ok[/]"
        )
        table.add_row(
            escape(r.name),
            gpus,
            mem,
            f.driver_version or "-",
            *(f.engines.get(e) or "-" for e in ENGINES),
            problems,
        )
    return table


def report_json(r: HostReport) -> dict[str, Any]:
    """One host of `orch hosts check --json`."""
    facts = r.facts
    return {
        "name": r.name,
        "reachable": r.reachable,
        "error": r.error,
        "hint": r.hint,
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
        "agent_bytes_pushed": r.agent_bytes_pushed,
        "problems": r.problems,
    }


def _mib(v: int | None) -> str:
    return "?" if v is None else f"{v / 1024:.1f} GiB"
