"""`orch ps` and `orch stop` on the command line (the work is in ``commands/servers.py``).

Mounted by cli/main.py with ``register(app)``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
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
from orchestrator.commands import servers as command
from orchestrator.commands.servers import HostServers
from orchestrator.commands.session import load_hosts
from orchestrator.remote.wire import ServerState

# -- rendering --------------------------------------------------------------------------------


def state_text(server: ServerState) -> str:
    if server.alive:
        return "running"
    if server.group_pids:
        return "exiting"
    code = server.returncode
    signal = server.exit.signal if server.exit else None
    if signal:
        return f"stopped ({signal})"
    return f"exited ({code})" if code is not None else "gone"


def uptime_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def ps_table(results: list[HostServers]) -> Table:
    table = Table(title="engine servers started by orch", title_justify="left")
    for col in ("host", "run", "state", "pid", "port", "uptime", "log"):
        table.add_column(col)
    for result in results:
        if result.error:
            table.add_row(
                escape(result.host), "-", f"[red]{escape(result.error)}[/]", "", "", "", ""
            )
        for s in result.servers:
            state = state_text(s)
            color = "green" if state == "running" else "dim"
            table.add_row(
                escape(result.host),
                escape(s.run_id),
                f"[{color}]{state}[/]",
                str(s.pid),
                str(s.port),
                uptime_text(s.uptime_s),
                escape(s.log),
            )
    return table


def host_errors(results: list[HostServers]) -> list[dict[str, Any]]:
    return [{"host": r.host, "error": r.error, "hint": r.hint} for r in results if r.error]


def print_host_errors(results: list[HostServers]) -> None:
    for r in results:
        if r.error:
            out.print(f"[red]{escape(r.host)}: {escape(r.error)}[/]")
            if r.hint:
                out.print(f"  hint: {escape(r.hint)}")


def ps_json(results: list[HostServers]) -> dict[str, Any]:
    now = time.time()
    servers = [
        {
            "host": r.host,
            "run_id": s.run_id,
            "alive": s.alive,
            "state": state_text(s),
            "pid": s.pid,
            "port": s.port,
            "started_at": s.started_at,
            "uptime_s": s.uptime_s,
            "returncode": s.returncode,
            "log": s.log,
            "checked_at": now,
        }
        for r in results
        for s in r.servers
    ]
    return {"servers": servers, "errors": host_errors(results)}


# -- commands ---------------------------------------------------------------------------------


def ps(
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """List the engine servers orch started on the hosts (alive or not), from their server.json."""
    inventory, hosts = load_hosts(hosts_file, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)

    results = asyncio.run(command.ps(inventory, hosts, ssh))
    if as_json:
        print_json(ps_json(results))
    else:
        out.print(ps_table(results))
        for r in results:
            if r.error and r.hint:
                out.print(f"[bold]{escape(r.host)}[/]: {escape(r.hint)}")
    if any(r.error for r in results):
        raise typer.Exit(1)


def stop(
    run_id: Annotated[
        str | None, typer.Argument(help="The run id to stop (see `orch ps`).")
    ] = None,
    all_servers: Annotated[
        bool, typer.Option("--all", help="Stop every server orch started.")
    ] = False,
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds between SIGTERM and SIGKILL.")
    ] = 30.0,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Stop engine servers: SIGTERM, then SIGKILL, and wait until their GPU memory is free."""
    if bool(run_id) == all_servers:
        raise typer.BadParameter("give either a RUN_ID or --all")
    inventory, hosts = load_hosts(hosts_file, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)

    report = asyncio.run(command.stop(inventory, hosts, ssh, run_id=run_id, timeout_s=timeout))
    results, stopped = report.hosts, report.stopped
    if as_json:
        print_json(
            {
                "stopped": [dict(s.to_json(), host=h) for h, s in stopped],
                "errors": host_errors(results),
            }
        )
    else:
        for host, s in stopped:
            gpu = {
                True: "GPU memory released",
                False: "GPU memory NOT released",
                None: "no nvidia-smi",
            }[s.gpu_released]
            out.print(
                f"{escape(host)}: stopped {escape(str(s.run_id))} "
                f"(pid {s.pid}, {'+'.join(s.signals)}; {gpu})"
            )
        if not stopped:
            out.print(
                "nothing was running"
                + (f" for run {escape(run_id)}" if run_id else "")
                + (" on the hosts that answered" if report.failed else "")
            )
        print_host_errors(results)
    if report.unknown_run:
        err.print(
            f"[red]no server was launched for run {escape(str(run_id))} on "
            f"{', '.join(h.name for h in hosts)}[/] (see `orch ps`)"
        )
        raise typer.Exit(1)
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Mount `ps` and `stop` on the root app."""
    app.command("ps")(ps)
    app.command("stop")(stop)
