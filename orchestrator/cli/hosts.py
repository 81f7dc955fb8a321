"""`orch hosts check`: the inventory's hosts, their GPUs and engines, in one table; its Slurm
clusters (Slurm version, partitions, whether a job would be accepted) in another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from orchestrator.backends import select_places
from orchestrator.backends.reports import CheckReport, ClusterReport, HostReport
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
from orchestrator.commands import hostcheck
from orchestrator.commands.session import load_hosts, open_pool
from orchestrator.config import HostConfig, Inventory
from orchestrator.engines import ENGINES
from orchestrator.runner.progress import HostPhase
from orchestrator.slurm.facts import Partition

app = typer.Typer(help="Inspect the hosts in the inventory.", no_args_is_help=True)


@app.command("check")
def check(
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Connect to every host at once, push the agent if needed, probe GPUs and engines; on each
    Slurm cluster's login node, ask Slurm for its version and partitions and test a submission.

    Exit status 0 when every host is reachable, runs the agent and has the GPUs hosts.yaml
    declares, and every cluster's partition has the GPUs asked for and accepts the job.
    """
    inventory, _ = load_hosts(hosts_file, only)
    places = select_places(inventory, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
    checked = asyncio.run(_check_with_progress(inventory, places, ssh, quiet=as_json))
    reports, cluster_reports = checked.hosts, checked.clusters
    if as_json:
        print_json(
            {
                "hosts": [report_json(r) for r in reports],
                "clusters": [cluster_json(r) for r in cluster_reports],
            }
        )
    else:
        if reports or not cluster_reports:
            out.print(render_table(reports))
        if cluster_reports:
            out.print(render_clusters(cluster_reports))
        hints = [(r.name, r.error, r.hint) for r in reports]
        hints += [(r.name, r.error, r.hint) for r in cluster_reports]
        for name, error, hint in hints:
            if error and hint:
                out.print(f"[bold]{escape(name)}[/]: {escape(hint)}")
    if not checked.ok:
        raise typer.Exit(1)


async def _check_with_progress(
    inventory: Inventory,
    places: list[HostConfig],
    ssh: SshOptions,
    *,
    quiet: bool,
) -> CheckReport:
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.fields[phase]}"),
        console=err,
        transient=True,
        disable=quiet or not err.is_terminal,
    ) as progress:
        tasks = {
            name: progress.add_task(name, phase=HostPhase.WAITING.value, total=None)
            for name in [p.name for p in places]
        }

        def on_phase(name: str, phase: HostPhase) -> None:
            progress.update(tasks[name], phase=phase.value)

        async with open_pool(inventory, ssh) as pool:
            return await hostcheck.check(pool, places, on_phase=on_phase)


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
        gpus += " (CPU host)" if r.cpu_only else ""
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
        "cpu_only": r.cpu_only,
        "engines": {e: (facts.engines.get(e) if facts else None) for e in ENGINES},
        "python": facts.python_version if facts else None,
        "agent_bytes_pushed": r.agent_bytes_pushed,
        "problems": r.problems,
    }


def render_clusters(reports: list[ClusterReport]) -> Table:
    table = Table(title="Slurm clusters", title_justify="left")
    for col in ("cluster", "login", "slurm", "partitions (state, nodes, GPU gres)", "can submit"):
        table.add_column(col, no_wrap=True)
    table.add_column("problems")
    for r in reports:
        login = "[green]reachable[/]" if r.reachable else "[red]unreachable[/]"
        submit = "-" if r.submit is None else "[green]yes[/]" if r.submit.ok else "[red]no[/]"
        problems = [escape(p) for p in r.problems] + ([escape(r.failure)] if r.failure else [])
        table.add_row(
            escape(r.name),
            login,
            escape(r.version or "-"),
            "\n".join(escape(_partition_line(p)) for p in r.partitions) or "-",
            submit,
            "\n".join(f"[red]{p}[/]" for p in problems) or "[green]ok[/]",
        )
    return table


def _partition_line(p: Partition) -> str:
    """``gpu* up, 1 node, gpu:a6000:2``: as sinfo shows it, the default partition starred."""
    gpus = ", ".join(str(g) for g in p.gres if g.name == "gpu") or "no GPUs"
    nodes = f"{p.nodes} node{'s' if p.nodes != 1 else ''}"
    return f"{p.name}{'*' if p.default else ''} {p.state}, {nodes}, {gpus}"


def cluster_json(r: ClusterReport) -> dict[str, Any]:
    """One cluster of `orch hosts check --json`."""
    return {
        "name": r.name,
        "reachable": r.reachable,
        "error": r.error,
        "hint": r.hint,
        "slurm_version": r.version,
        "partitions": [
            {
                "name": p.name,
                "default": p.default,
                "state": p.state,
                "nodes": p.nodes,
                "gres": [str(g) for g in p.gres],
            }
            for p in r.partitions
        ],
        "can_submit": None if r.submit is None else r.submit.ok,
        "submit_message": None if r.submit is None else r.submit.message,
        "problems": r.problems,
        "ok": r.ok,
    }


def _mib(v: int | None) -> str:
    return "?" if v is None else f"{v / 1024:.1f} GiB"
