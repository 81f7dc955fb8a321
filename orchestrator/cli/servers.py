"""`orch ps` and `orch stop`: the engine servers orch started on the hosts, and stopping them.

Both read the hosts' ``<workdir>/runs/*/server.json`` through the agent, so they work from any
controller (not only the one that launched): nothing is ever left orphaned on a GPU.
Mounted by cli/main.py with ``register(app)``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.agent.client import Agent
from orchestrator.cli.common import (
    DEFAULT_HOSTS_FILE,
    AcceptNewOpt,
    HostsFileOpt,
    JsonOpt,
    KnownHostsOpt,
    OnlyOpt,
    SshOptions,
    err,
    host_message,
    out,
    print_json,
)
from orchestrator.cli.session import load_hosts, open_pool
from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import AgentError, OrchError
from orchestrator.remote.wire import ErrorKind, ServerState, StatusSpec, StopOutcome, StopSpec


@dataclass
class HostServers:
    """One host's answer: its servers (``ps``) or what was stopped, or why it could not be asked."""

    host: str
    servers: list[ServerState] = field(default_factory=list)
    stopped: list[StopOutcome] = field(default_factory=list)
    error: str | None = None  # without the host's name: every line that shows it names the host
    hint: str | None = None


async def _agent(pool: Any, host: HostConfig) -> Agent:
    return Agent(await pool.get(host), host)


async def _each(hosts: list[HostConfig], job: Any) -> list[HostServers]:
    """Run ``job(host)`` on every host at once; a failing host becomes an error entry."""

    async def one(host: HostConfig) -> HostServers:
        try:
            return await job(host)
        except OrchError as exc:
            return HostServers(host.name, error=host_message(exc, host.name), hint=exc.hint)

    return list(await asyncio.gather(*(one(h) for h in hosts)))


async def list_servers(pool: Any, hosts: list[HostConfig]) -> list[HostServers]:
    async def job(host: HostConfig) -> HostServers:
        agent = await _agent(pool, host)
        data = await agent.status(StatusSpec(all=True, workdir=await agent.workdir()))
        return HostServers(host.name, servers=list(data.servers))

    return await _each(hosts, job)


async def stop_servers(pool: Any, hosts: list[HostConfig], *, run_id: str | None = None,
                       timeout_s: float = 30.0) -> list[HostServers]:
    """Stop ``run_id`` wherever it exists, or every server (``run_id=None``); per-host results."""

    async def job(host: HostConfig) -> HostServers:
        agent = await _agent(pool, host)
        spec = StopSpec(workdir=await agent.workdir(), timeout_s=timeout_s, run_id=run_id,
                        all=run_id is None)
        try:
            data = await agent.stop(spec, timeout=timeout_s + 120)
        except AgentError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return HostServers(host.name)
            raise
        return HostServers(host.name, stopped=list(data.stopped))

    return await _each(hosts, job)


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
            table.add_row(escape(result.host), "-", f"[red]{escape(result.error)}[/]", "", "", "", "")
        for s in result.servers:
            state = state_text(s)
            color = "green" if state == "running" else "dim"
            table.add_row(escape(result.host), escape(s.run_id), f"[{color}]{state}[/]",
                          str(s.pid), str(s.port), uptime_text(s.uptime_s), escape(s.log))
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
        {"host": r.host, "run_id": s.run_id, "alive": s.alive,
         "state": state_text(s), "pid": s.pid, "port": s.port,
         "started_at": s.started_at, "uptime_s": s.uptime_s,
         "returncode": s.returncode, "log": s.log, "checked_at": now}
        for r in results for s in r.servers
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

    async def go() -> list[HostServers]:
        async with open_pool(inventory, ssh) as pool:
            return await list_servers(pool, hosts)

    results = asyncio.run(go())
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
    run_id: Annotated[str | None, typer.Argument(help="The run id to stop (see `orch ps`).")] = None,
    all_servers: Annotated[bool, typer.Option("--all", help="Stop every server orch started.")] = False,
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds between SIGTERM and SIGKILL.")] = 30.0,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Stop engine servers: SIGTERM, then SIGKILL, and wait until their GPU memory is free."""
    if bool(run_id) == all_servers:
        raise typer.BadParameter("give either a RUN_ID or --all")
    inventory, hosts = load_hosts(hosts_file, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)

    async def go() -> list[HostServers]:
        async with open_pool(inventory, ssh) as pool:
            return await stop_servers(pool, hosts, run_id=run_id, timeout_s=timeout)

    results = asyncio.run(go())
    stopped = [(r.host, s) for r in results for s in r.stopped if s.was_running]
    if as_json:
        print_json({"stopped": [dict(s.to_json(), host=h) for h, s in stopped],
                    "errors": host_errors(results)})
    else:
        for host, s in stopped:
            gpu = {True: "GPU memory released", False: "GPU memory NOT released",
                   None: "no nvidia-smi"}[s.gpu_released]
            out.print(f"{escape(host)}: stopped {escape(str(s.run_id))} "
                      f"(pid {s.pid}, {'+'.join(s.signals)}; {gpu})")
        if not stopped:
            out.print("nothing was running" + (f" for run {escape(run_id)}" if run_id else "")
                      + (" on the hosts that answered" if any(r.error for r in results) else ""))
        print_host_errors(results)
    known = any(r.stopped for r in results)
    if run_id and not known and not any(r.error for r in results):
        err.print(f"[red]no server was launched for run {escape(run_id)} on "
                  f"{', '.join(h.name for h in hosts)}[/] (see `orch ps`)")
        raise typer.Exit(1)
    if any(r.error for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Mount `ps` and `stop` on the root app."""
    app.command("ps")(ps)
    app.command("stop")(stop)
