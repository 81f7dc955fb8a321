"""`orch ps`, `orch stop` and `orch clean` on the command line (the work is in
``commands/servers.py`` and ``commands/clean.py``).

Mounted by cli/main.py with ``register(app)``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.backends import select_places
from orchestrator.backends.reports import CleanReport, ClusterJobs, HostServers
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
from orchestrator.commands import clean as clean_command
from orchestrator.commands import servers as command
from orchestrator.commands.clean import parse_age
from orchestrator.commands.servers import STOP_GRACE_S
from orchestrator.commands.session import load_hosts
from orchestrator.remote.wire import ServerState
from orchestrator.slurm.jobs import JobState

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


def started_text(epoch: float) -> str:
    """Local time, the date only when it is not today."""
    when = datetime.fromtimestamp(epoch)
    today = datetime.now().date() == when.date()
    return when.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M")


def host_text(result: HostServers) -> str:
    """The entry's name, and the other entries that reach the same workdir."""
    return " = ".join(result.names)


def ps_table(results: list[HostServers], *, all_runs: bool = False) -> Table:
    title = "engine servers started by orch" + ("" if all_runs else " (running; --all: every run)")
    table = Table(title=title, title_justify="left")
    for col in ("host", "run", "state", "pid", "port", "started", "uptime", "log"):
        table.add_column(col)
    for result in results:
        if result.error:
            table.add_row(
                escape(result.host), "-", f"[red]{escape(result.error)}[/]", "", "", "", "", ""
            )
        for s in result.servers:
            state = state_text(s)
            color = "green" if state == "running" else "dim"
            table.add_row(
                escape(host_text(result)),
                escape(s.run_id),
                f"[{color}]{state}[/]",
                str(s.pid),
                str(s.port),
                started_text(s.started_at),
                uptime_text(s.uptime_s),
                escape(s.log),
            )
    return table


def jobs_table(clusters: list[ClusterJobs]) -> Table:
    """orch's Slurm jobs, one row per job, a cluster whose login node failed in red."""
    table = Table(title="Slurm jobs started by orch", title_justify="left")
    for col in ("cluster", "job", "name", "state", "reason", "node", "time"):
        table.add_column(col)
    for c in clusters:
        if c.error:
            table.add_row(escape(c.cluster), "-", f"[red]{escape(c.error)}[/]", "", "", "", "")
        for job in c.jobs:
            color = "green" if job.running else "yellow"
            table.add_row(
                escape(c.cluster),
                str(job.job_id),
                escape(job.name),
                f"[{color}]{escape(job.state)}[/]",
                escape(job.reason or "-"),
                escape(",".join(job.nodes) or "-"),
                escape(job.time),
            )
    return table


def job_json(cluster: str, job: JobState) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "job_id": job.job_id,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "nodes": list(job.nodes),
        "time": job.time,
    }


def host_errors(
    results: list[HostServers], clusters: list[ClusterJobs] | None = None
) -> list[dict[str, Any]]:
    """Hosts, then clusters, that could not be asked; a cluster as a host named like it."""
    failed = [(r.host, r.error, r.hint) for r in results if r.error]
    failed += [(c.cluster, c.error, c.hint) for c in clusters or [] if c.error]
    return [{"host": name, "error": error, "hint": hint} for name, error, hint in failed]


def print_host_errors(
    results: list[HostServers], clusters: list[ClusterJobs] | None = None
) -> None:
    for error in host_errors(results, clusters):
        out.print(f"[red]{escape(error['host'])}: {escape(error['error'])}[/]")
        if error["hint"]:
            out.print(f"  hint: {escape(error['hint'])}")


def ps_json(
    results: list[HostServers], clusters: list[ClusterJobs] | None = None
) -> dict[str, Any]:
    now = time.time()
    servers = [
        {
            "host": r.host,
            "also": list(r.also),
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
    report: dict[str, Any] = {"servers": servers, "errors": host_errors(results, clusters)}
    if clusters is not None:
        report["jobs"] = [job_json(c.cluster, job) for c in clusters for job in c.jobs]
    return report


# -- commands ---------------------------------------------------------------------------------


def ps(
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Also the runs whose server has ended.")
    ] = False,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """List the engine servers orch started on the hosts that are running (--all: every run's),
    with their start time and uptime. Host entries reaching one workdir are shown once.
    On Slurm clusters, orch's jobs in the queue (pending or running)."""
    inventory, _ = load_hosts(hosts_file, only)
    places = select_places(inventory, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)

    report = asyncio.run(command.ps(inventory, places, ssh, all_runs=all_runs))
    results, jobs = report.hosts, report.clusters
    if as_json:
        print_json(ps_json(results, jobs if jobs else None))
    else:
        out.print(ps_table(results, all_runs=all_runs))
        if jobs:
            out.print(jobs_table(jobs))
        for name, error, hint in [(r.host, r.error, r.hint) for r in results] + [
            (c.cluster, c.error, c.hint) for c in jobs
        ]:
            if error and hint:
                out.print(f"[bold]{escape(name)}[/]: {escape(hint)}")
    if report.failed:
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
        float,
        typer.Option(
            "--grace",
            "--timeout",
            min=0.0,
            help="Seconds from SIGTERM to SIGKILL (at most 5 once the server's port has "
            "closed and only its processes linger).",
        ),
    ] = STOP_GRACE_S,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Stop engine servers: SIGTERM, then SIGKILL, and wait until their GPU memory is free.
    On Slurm clusters, cancel (scancel) the run's job, or with --all every orch job: the job
    holds the engine, which stops with it."""
    if bool(run_id) == all_servers:
        raise typer.BadParameter("give either a RUN_ID or --all")
    inventory, _ = load_hosts(hosts_file, only)
    places = select_places(inventory, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)

    report = asyncio.run(command.stop(inventory, places, ssh, run_id=run_id, timeout_s=timeout))
    results, stopped, cancelled = report.hosts, report.stopped, report.cancelled
    if as_json:
        stop_json: dict[str, Any] = {
            "stopped": [dict(s.to_json(), host=h) for h, s in stopped],
            "errors": host_errors(results, report.clusters),
        }
        if report.clusters:
            stop_json["cancelled"] = [job_json(c, job) for c, job in cancelled]
        print_json(stop_json)
    else:
        for host, s in stopped:
            gpu = {
                True: "GPU memory released",
                False: "GPU memory NOT released",
                None: "GPU memory not checked: no nvidia-smi, or a CPU host",
            }[s.gpu_released]
            out.print(
                f"{escape(host)}: stopped {escape(str(s.run_id))} "
                f"(pid {s.pid}, {'+'.join(s.signals)}; {gpu})"
            )
        for cluster, job in cancelled:
            where = f" on {escape(','.join(job.nodes))}" if job.nodes else ""
            out.print(
                f"{escape(cluster)}: cancelled job {job.job_id} {escape(job.name)} "
                f"({escape(job.describe())}{where})"
            )
        if not stopped and not cancelled:
            out.print(
                "nothing was running"
                + (f" for run {escape(run_id)}" if run_id else "")
                + (" on the hosts that answered" if report.failed else "")
            )
        print_host_errors(results, report.clusters)
    if report.unknown_run:
        err.print(
            f"[red]no server was launched for run {escape(str(run_id))} on "
            f"{', '.join(p.name for p in places)}[/] (see `orch ps`)"
        )
        raise typer.Exit(1)
    if report.failed:
        raise typer.Exit(1)


def size_text(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def clean_json(report: CleanReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "hosts": [
            {
                "host": h.host,
                "also": list(h.also),
                "error": h.error,
                "hint": h.hint,
                **({"note": h.note} if h.note else {}),
                **(h.result.to_json() if h.result else {}),
            }
            for h in report.hosts
        ],
    }


def render_clean(report: CleanReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    for h in report.hosts:
        name = escape(" = ".join([h.host, *h.also]))
        if h.error:
            out.print(f"[red]{name}: {escape(h.error)}[/]")
            if h.hint:
                out.print(f"  hint: {escape(h.hint)}")
            continue
        assert h.result is not None
        for p in h.result.pruned:
            ended = started_text(p.ended_at) if p.ended_at else "end unknown"
            if p.error:
                out.print(f"[red]{name}: could not remove {escape(p.run_id)}: {escape(p.error)}[/]")
            else:
                out.print(
                    f"{name}: {verb} {escape(p.run_id)} (ended {ended}, {size_text(p.bytes)})"
                )
        total = sum(p.bytes for p in h.result.pruned if not p.error)
        specs = len(h.result.specs_removed)
        out.print(
            f"{name}: {verb} {len(h.result.pruned)} run folder(s), {size_text(total)}"
            + (f", {specs} stale spec file(s)" if specs else "")
            + f"; kept {len(h.result.kept)} finished, {len(h.result.live)} live untouched"
        )
        if h.note:
            out.print(f"{name}: [yellow]{escape(h.note)}[/]")


def clean(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than", help="Only runs that ended at least this long ago (90s, 30m, 12h, 7d)."
        ),
    ] = None,
    keep: Annotated[
        int | None,
        typer.Option("--keep", help="Keep the N most recently ended runs on each host.", min=0),
    ] = None,
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    as_json: JsonOpt = False,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Remove finished runs' folders (argv with secrets, engine logs) from the hosts' workdirs.

    A running server's folder is never touched. Without --older-than or --keep every finished
    run goes; your results folder keeps its own copy of each run's files. On Slurm clusters,
    the job folders in the shared workdir whose jobs have left the queue.
    """
    older_than_s = parse_age(older_than) if older_than is not None else None
    inventory, _ = load_hosts(hosts_file, only)
    places = select_places(inventory, only)
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
    report = asyncio.run(
        clean_command.clean(
            inventory, places, ssh, older_than_s=older_than_s, keep=keep, dry_run=dry_run
        )
    )
    if as_json:
        print_json(clean_json(report))
    else:
        render_clean(report)
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Mount `ps`, `stop` and `clean` on the root app."""
    app.command("ps")(ps)
    app.command("stop")(stop)
    app.command("clean")(clean)
