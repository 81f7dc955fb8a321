"""`orch run PLAYBOOK` on the command line: the plan or the results table, stop signals and
exit codes (the work is in ``commands/run.py``). `--dry-run` shows what would be launched."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.common import (
    DEFAULT_HOSTS_FILE,
    EXIT_INTERRUPTED,
    AcceptNewOpt,
    HostsFileOpt,
    JsonOpt,
    KnownHostsOpt,
    SshOptions,
    err,
    out,
    print_json,
    without_host,
)
from orchestrator.cli.display import Display
from orchestrator.cli.interrupts import STOP_SIGNALS as STOP_SIGNALS
from orchestrator.cli.interrupts import Interrupts, from_context
from orchestrator.commands.run import (
    PlaybookOutcome,
    RunPlan,
    plan_resume,
    plan_run,
    prompt_notes,
)
from orchestrator.commands.run import run as execute_plan
from orchestrator.engines.plan import PlannedLaunch, to_json
from orchestrator.errors import ConfigError, OrchError
from orchestrator.metrics import catalogue
from orchestrator.results.document import Value
from orchestrator.results.model import RunResult
from orchestrator.runner.estimate import (
    DECODE_TOK_S,
    MEASUREMENT_OVERHEAD_S,
    SERVER_START_S,
    HostPlan,
    PlaybookPlan,
    ServerPlan,
    duration_text,
    estimate,
    plan_json,
    read_past,
)

STOP_GRACE_S = 60.0  # how long the clean-up may still take after a second stop signal
STOP_GRACE_ENV = "ORCH_STOP_GRACE_S"

# Exit status of `orch run` (also in its --help and the README's "Exit status"):
EXIT_OK = 0  # every run measured; none failed, none collapsed
EXIT_RUN_FAILED = 1  # a run failed (no trustworthy figure), or orch itself could not go on
EXIT_COLLAPSE = 3  # every run completed, but one's speculative decoding collapsed


class FailOn(str, Enum):
    COLLAPSE = "collapse"
    FAILED = "failed"
    NEVER = "never"


def exit_status(verdicts: Sequence[str], fail_on: FailOn = FailOn.COLLAPSE) -> int:
    """The exit status of a finished playbook from its runs' verdicts and ``--fail-on``:
    ``collapse`` (default) fails on failed runs (1) and collapsed ones (3); ``failed`` on
    failed runs only; ``never`` on neither (scripts reading summary.json themselves)."""
    if fail_on is FailOn.NEVER:
        return EXIT_OK
    if "failed" in verdicts:
        return EXIT_RUN_FAILED
    if fail_on is FailOn.COLLAPSE and "collapse" in verdicts:
        return EXIT_COLLAPSE
    return EXIT_OK


PlaybookArg = Annotated[
    Path | None,
    typer.Argument(help="Playbook file (playbooks/*.yaml); not with --resume.", show_default=False),
]
RunOnlyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--only",
        help="Limit to these host names, tags or groups, or to runs whose name matches (a "
        "shell pattern: 'vllm-*'). Repeatable.",
    ),
]
ResumeOpt = Annotated[
    Path | None,
    typer.Option(
        "--resume",
        help="Finish an interrupted playbook run in its results folder: complete points are "
        "kept, the others measured again; nothing is overwritten.",
        show_default=False,
    ),
]


def run_command(
    playbook_file: PlaybookArg = None,
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: RunOnlyOpt = None,
    resume: ResumeOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan and touch nothing: per host, each server's exact argv and "
            "environment (secrets as ***), GPUs, load points, repeats, SLO search, and an "
            "estimated duration.",
        ),
    ] = False,
    as_json: JsonOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Launch runs the doctor found errors in.")
    ] = False,
    results: Annotated[
        Path, typer.Option("--results", help="Folder that receives the results.")
    ] = Path("results"),
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
    fail_on: Annotated[
        FailOn,
        typer.Option(
            "--fail-on",
            help="Which outcomes make the exit status non-zero: 'collapse' (failed runs: 1, "
            "collapsed runs: 3), 'failed' (failed runs only), 'never'.",
        ),
    ] = FailOn.COLLAPSE,
) -> None:
    """Run a playbook: start each run's server, drive its workload, write results and a plot.

    Hosts work in parallel; the runs on one host go one after another. The doctor checks
    every run first and refuses one with errors (unless --force or `doctor: warn`).

    Exit status: 0 every run measured, none collapsed; 1 a run failed (or orch could not go
    on); 2 bad playbook or hosts file, nothing launched; 3 every run completed but one
    collapsed (with --fail-on collapse, the default); 128+N stopped by signal N (130: Ctrl-C).
    """
    run_plan = _plan(playbook_file, hosts_file, only, resume, force=force)
    plans = run_plan.plans
    for note in prompt_notes(plans, run_plan.prompts):
        err.print(f"[yellow]note:[/] {escape(note)}")
    for note in run_plan.notes:
        err.print(f"[yellow]warning:[/] {escape(note)}")
    if dry_run:
        schedule = estimate(plans, share_gpus=run_plan.playbook.share_gpus, past=read_past(results))
        if as_json:
            print_json({**to_json(plans), "plan": plan_json(schedule)})
        else:
            render_plan(plans, schedule, results)
        return
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
    outcome = launch(run_plan, ssh=ssh, results=results, force=force, hosts_file=hosts_file)
    if as_json:
        print_json(outcome_json(outcome))
    else:
        render_outcome(outcome)
    code = exit_status([r.verdict for r in outcome.results], fail_on)
    if code != EXIT_OK:
        raise typer.Exit(code)


def launch(
    run_plan: RunPlan,
    *,
    ssh: SshOptions,
    results: Path,
    force: bool,
    hosts_file: Path,
    interrupts: Interrupts | None = None,
) -> PlaybookOutcome:
    """Run a planned playbook with its progress on stderr; the first stop signal stops every
    server it started and ends the command with 128+N (``typer.Exit``).

    ``interrupts``: where stop requests come from; by default the command's (``main.run``'s
    ``interrupts=``), else the process's signals. In-process callers pass their own so the
    run never touches the process's signal handlers."""
    plans = run_plan.plans
    source = interrupts if interrupts is not None else from_context()
    display = Display(err)
    stop = StopSignals(
        grace_s=stop_grace_s(),
        give_up=lambda sig: give_up(
            sig, grace_s=stop.grace_s, display=display, plans=plans, hosts_file=hosts_file
        ),
    )
    try:
        outcome = asyncio.run(
            _run(run_plan, ssh, results, display, force, stop=stop, interrupts=source)
        )
    except KeyboardInterrupt:
        # A SIGINT that came before the handlers were in place or after the loop closed.
        # typer would turn this into a silent exit 130; say what happened.
        err.print("[yellow]interrupted:[/] the servers this run started were stopped")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except asyncio.CancelledError:
        if not stop.received:
            raise
        first = stop.received[0]
        label = "interrupted" if first == signal.SIGINT else first.name
        err.print(f"[yellow]{label}:[/] the servers this run started were stopped")
        raise typer.Exit(128 + first) from None
    finally:
        stop.cancel_timer()
    return outcome


def _plan(
    playbook_file: Path | None,
    hosts_file: Path,
    only: list[str] | None,
    resume: Path | None,
    *,
    force: bool,
) -> RunPlan:
    if resume is None and playbook_file is None:
        raise ConfigError(
            "give a playbook to run, or --resume RESULTS_DIR to finish one",
            hint="orch run playbooks/demo.yaml",
        )
    if resume is not None:
        if playbook_file is not None or only:
            raise ConfigError(
                "--resume runs the playbook and --only that its folder recorded: give neither",
                hint=f"orch run --resume {resume}",
            )
        given = hosts_file if hosts_file != Path(DEFAULT_HOSTS_FILE) else None
        return plan_resume(resume, given)
    assert playbook_file is not None
    return plan_run(playbook_file, hosts_file, only, force=force)


def outcome_json(outcome: PlaybookOutcome) -> dict[str, object]:
    return {"results_dir": str(outcome.results_dir), "runs": [r.to_json() for r in outcome.results]}


@dataclass
class StopSignals:
    """The stop signals a run received, and the countdown that bounds its clean-up.

    The first signal cancels the run, whose clean-up stops every server it started. Later ones
    only ask to wait: cutting the clean-up short (asyncio's answer to a second Ctrl-C) would
    leave servers holding the GPUs with nobody to stop them, and hung orch in asyncio's own
    shutdown. From the second signal on, the clean-up has ``grace_s`` left: one stuck on a host
    that stopped answering must not hold the terminal forever. ``give_up`` is then called from
    a timer thread, so even a wedged event loop cannot delay it.
    """

    grace_s: float
    give_up: Callable[[signal.Signals], object]
    received: list[signal.Signals] = field(default_factory=list)
    deadline: float | None = None
    timer: threading.Timer | None = None

    def on_signal(self, sig: signal.Signals, cancel: Callable[[], object]) -> None:
        self.received.append(sig)
        if len(self.received) == 1:
            cancel()
            return
        if self.timer is None:
            self.deadline = time.monotonic() + self.grace_s
            self.timer = threading.Timer(self.grace_s, self.give_up, args=(self.received[0],))
            self.timer.daemon = True
            self.timer.start()
        left = max(0.0, (self.deadline or 0.0) - time.monotonic())
        err.print(
            f"[yellow]{sig.name}:[/] stopping the servers this run started, please wait "
            f"(giving up in {left:.0f} s)"
        )

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


def stop_grace_s() -> float:
    raw = os.environ.get(STOP_GRACE_ENV)
    if raw is None:
        return STOP_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise OrchError(
            f"{STOP_GRACE_ENV}={raw!r} is not a number of seconds",
            hint=f"unset it, or give e.g. {STOP_GRACE_ENV}=60",
        )
    return value


def give_up(
    sig: signal.Signals,
    *,
    grace_s: float,
    display: Display,
    plans: Sequence[PlannedLaunch],
    hosts_file: Path,
) -> NoReturn:
    """Exit now, naming the hosts whose servers may outlive orch and how to stop them.

    ``os._exit``: the clean-up is stuck in tasks that do not finish; unwinding them through
    asyncio (or joining their threads at interpreter exit) is exactly the wait being given up.
    """
    display.close()  # a live table would leave the terminal's cursor hidden
    hosts = busy_hosts(display, plans)
    where = (
        "" if hosts_file == Path(DEFAULT_HOSTS_FILE) else f" --hosts {shlex.quote(str(hosts_file))}"
    )
    where += "".join(f" --only {shlex.quote(h)}" for h in hosts)
    err.print(
        f"[bold red]gave up:[/] the clean-up still ran {grace_s:.0f} s after the second "
        f"signal; engine servers may still run on {escape(', '.join(hosts))}"
    )
    for what, command in (
        ("list them", f"orch ps{where}"),
        ("stop them", f"orch stop --all{where}"),
    ):
        err.print(f"  {what}: {escape(command)}", soft_wrap=True)  # unwrapped: to copy and paste
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + sig)


def busy_hosts(display: Display, plans: Sequence[PlannedLaunch]) -> list[str]:
    """Hosts with a run between launch and its end (every planned host if none is known yet)."""
    busy = [row.host for row in display.rows.values() if row.phase.under_way]
    return list(dict.fromkeys(busy or [p.host.name for p in plans]))


async def _run(
    run_plan: RunPlan,
    ssh: SshOptions,
    results: Path,
    display: Display,
    force: bool,
    *,
    stop: StopSignals,
    interrupts: Interrupts,
) -> PlaybookOutcome:
    """The playbook, cancelled by the first stop request (Ctrl-C, SIGTERM or SIGHUP from the
    CLI's ``interrupts``): servers left running would hold the GPUs with nobody to stop them.
    """
    task = asyncio.current_task()
    assert task is not None
    interrupts.install(asyncio.get_running_loop(), lambda sig: stop.on_signal(sig, task.cancel))
    return await execute_plan(
        run_plan, ssh=ssh, results_root=results, observer=display, force=force
    )


def render_plan(plans: Sequence[PlannedLaunch], schedule: PlaybookPlan, results_root: Path) -> None:
    """Per host, in order: each server (engine, method, port, GPUs, placement), its argv and
    env, load points, repeats, SLO search and estimate; then the playbook's total."""
    by_key = {f"{p.run_name}@{p.host.name}": p for p in plans}
    for host in schedule.hosts:
        out.print(
            f"[bold]{host.noun} {escape(host.host)}[/]: "
            f"{escape(host_line(host, schedule.share_gpus))}"
            f", about {duration_text(host.total_s)}"
        )
        for server in host.servers:
            plan = by_key[server.key]
            placement = placement_line(server, host.shared, cpu=host.gpu_count == 0)
            out.print(
                f"  [bold]{escape(server.run)}[/] ({escape(config_label(server))}, port "
                f"{server.port}): {escape(placement)}"
            )
            out.print("    argv: " + escape(shlex.join(plan.argv)))
            for key, value in plan.env_masked.items():
                out.print(f"    env:  {escape(key)}={escape(value)}")
            for line in server_lines(server):
                out.print(f"    {escape(line)}")
    count = sum(len(h.servers) for h in schedule.hosts)
    out.print(
        f"total: {count} server{'s' * (count != 1)}, {schedule.measurements} measurement"
        f"{'s' * (schedule.measurements != 1)}, about {duration_text(schedule.total_s)} "
        f"(hosts in parallel{', runs sharing a host at once' * schedule.share_gpus})"
    )
    out.print(f"[dim]{escape(estimate_note(results_root))}[/]")


def config_label(server: ServerPlan) -> str:
    return server.engine if server.method == "none" else f"{server.engine} {server.method}"


def host_line(host: HostPlan, share_gpus: bool) -> str:
    if host.gpu_count == 0:
        return "CPU host (gpus: none), one run after another"
    gpus = "GPU count not in hosts.yaml" if host.gpu_count is None else f"{host.gpu_count} GPUs"
    if host.placement:
        return host.placement.format(gpus=gpus)
    if host.shared:
        return f"{gpus}, runs share them at once (share_gpus)"
    if share_gpus:
        return f"{gpus}; runs share them once the probe counts them (share_gpus)"
    return f"{gpus}, one run after another"


def placement_line(server: ServerPlan, shared: bool, *, cpu: bool = False) -> str:
    """``GPUs 0,1, beside vllm-plain, from 0 s to 3 min 20 s``; ``cpu``: on a CPU host."""
    ids = server.gpu_ids
    if cpu:
        gpus = "on the CPU"
    elif ids is not None:
        gpus = f"GPU{'s' * (len(ids) != 1)} {','.join(str(i) for i in ids)}"
    else:
        gpus = f"{server.gpus} GPU{'s' * (server.gpus != 1)}"
    if ids is None and shared:
        gpus += ", alone on the host" + (
            " (its env sets CUDA_VISIBLE_DEVICES)" if server.alone else ""
        )
    parts = [gpus]
    if server.beside:
        parts.append(f"beside {', '.join(server.beside)}")
    if shared and server.waits_for:
        parts.append(f"after {', '.join(server.waits_for)}")
    span = f"from {duration_text(server.begins_s)} to {duration_text(server.ends_s)}"
    return ", ".join([*parts, span])


def server_lines(server: ServerPlan) -> list[str]:
    """Load points, repeats, the SLO search and the estimate, a line each."""
    values = ", ".join(_number(v) for v in server.load_values)
    kind = "concurrency" if server.load_kind == "concurrency" else "request rate (req/s)"
    repeats = f" x {server.repeat} repeats" if server.repeat > 1 else ""
    n = server.measurements
    lines = [f"load: {kind} {values}{repeats}: {n} measurement{'s' * (n != 1)}"]
    search = server.search
    if search is not None:
        lines.append(
            f"SLO search: {search.kind} in [{_number(search.low)}, {_number(search.high)}], "
            f"up to {search.measurements} more measurements (at most "
            f"{duration_text(search.seconds)}, guess)"
        )
    total = server.total_s
    lines.append(
        f"estimate: server start {duration_text(server.start_s)} ({server.start_source}) + "
        f"measurements {duration_text(server.measure_s)} ({server.measure_source})"
        + (" + SLO search" if search is not None else "")
        + f" = {'at most ' if search is not None else ''}{duration_text(total)}"
    )
    return lines


def estimate_note(results_root: Path) -> str:
    return (
        "estimates are rough: 'history' is the median of earlier results of the same run and "
        f"host under {results_root}; 'guess' assumes {DECODE_TOK_S:g} tok/s per stream at any "
        f"load (no prefill), {SERVER_START_S:g} s to start a server and "
        f"{MEASUREMENT_OVERHEAD_S:g} s between measurements"
    )


def _number(value: float) -> str:
    return f"{value:g}"


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


VERDICTS = {
    "failed": "[red]failed[/]",
    "collapse": "[bold red]COLLAPSE[/]",
    "disagree": "[yellow]sources disagree[/]",
    "ok": "[green]ok[/]",
}


def render_outcome(outcome: PlaybookOutcome) -> None:
    """The results table (a sweep's: one table per configuration, a row per load point), then
    each failure, collapse and warning in words."""
    sweep = any(
        r.point is not None and (r.point.index or r.point.repeats > 1) for r in outcome.results
    )
    if sweep:
        render_sweep(outcome)
    else:
        out.print(measurements_table(outcome))
        out.print(
            "[dim]decode tok/s, TTFT and TPOT: medians over requests; accept: acceptance length "
            "(tokens per step)"
            + (
                "; % roofline: the decode's memory reads over the GPUs' peak bandwidth"
                if any(r.roofline is not None for r in outcome.results)
                else ""
            )
            + (
                "; J/out tok and out tok/s/W: the run's GPUs' energy over the window"
                if any(r.energy is not None for r in outcome.results)
                else ""
            )
            + "[/]"
        )
    _render_slo_answers(outcome)
    _render_not_run(outcome.results)
    for r in outcome.results:
        if not r.not_run:
            _render_error(r)
    collapsed: set[str] = set()
    for r in outcome.results:  # a sweep's collapse once per run: every point shows it
        if r.collapse is not None and r.run.key not in collapsed:
            collapsed.add(r.run.key)
            _render_collapse(r)
    changes: set[tuple[str, str]] = set()
    for r in outcome.results:
        for change in r.engine_changes:
            if (r.run.key, change.message) not in changes:
                changes.add((r.run.key, change.message))
                out.print(f"[yellow]{escape(r.run.name)}: {escape(change.message)}[/]")
    for (name, host), warning, points in grouped_warnings(outcome.results):
        where = f" (at {', '.join(points)})" if points else ""
        out.print(
            f"[yellow]warning: {escape(name)} on {escape(host)}{escape(where)}: "
            f"{escape(warning)}[/]"
        )
    out.print(f"summary: {outcome.csv_path}")
    if outcome.plot_path:
        out.print(f"plot:    {outcome.plot_path}")


def measurements_table(outcome: PlaybookOutcome) -> Table:
    """One row per measurement."""
    table = Table(
        title=f"results: {outcome.results_dir}", title_justify="left", box=box.SIMPLE_HEAD
    )
    sweep = any(
        r.point is not None and (r.point.index or r.point.repeats > 1) for r in outcome.results
    )
    energy = [catalogue.get("j_per_output_token"), catalogue.get("output_tok_s_per_w")]
    with_energy = any(r.energy is not None for r in outcome.results)
    roofline = catalogue.get("roofline_pct")
    with_roofline = any(r.roofline is not None for r in outcome.results)
    for col in (
        "run",
        "host",
        "engine",
        "method",
        *(("load",) if sweep else ()),
        "done",
        "failed",
        "out tok/s",
        "decode tok/s",
        *((roofline.header,) if with_roofline else ()),
        "TTFT ms",
        "TPOT ms",
        "accept",
        *((m.header for m in energy) if with_energy else ()),
        "verdict",
    ):
        table.add_column(
            col,
            no_wrap=col in ("run", "host", "engine", "method", "verdict"),
            min_width=max(len(word) for word in col.split()),  # a header wraps, never cut
        )
    for r in outcome.results:
        req, acc = r.requests, r.acceptance
        table.add_row(
            escape(r.run.name),
            escape(r.run.host),
            escape(r.settings.engine),
            escape(r.settings.speculative.method),
            *((escape(point_label(r)),) if sweep else ()),
            str(req.completed if req else 0),
            str(req.failed if req else 0),
            _fmt(req.output_throughput if req else None),
            _fmt(req.decode_tok_s.median if req else None),
            *((_fmt(roofline.value(r), roofline.spec),) if with_roofline else ()),
            _fmt(req.ttft_ms.median if req else None),
            _fmt(req.tpot_ms.median if req else None, ".2f"),
            _fmt(acc.length if acc else None, ".2f"),
            *((_fmt(m.value(r), m.spec) for m in energy) if with_energy else ()),
            "not run" if r.not_run else VERDICTS[r.verdict],
        )
    return table


def render_sweep(outcome: PlaybookOutcome) -> None:
    """Per configuration, a row per load point: the mean over its repeats ± the 95% interval's
    half-width, in bold red where noisy (the tables of `orch report`)."""
    from orchestrator.results.document import NOISY_LEGEND
    from orchestrator.results.frame import frame_of
    from orchestrator.results.report_doc import COLUMNS_NOTE, sweep_tables

    out.print(f"[bold]results: {escape(str(outcome.results_dir))}[/]")
    frame = frame_of((str(outcome.results_dir), r) for r in outcome.results)
    for doc_table in sweep_tables(frame):
        table = Table(title=doc_table.title, title_justify="left", box=box.SIMPLE_HEAD)
        for i, col in enumerate(doc_table.columns):
            table.add_column(col, justify="right" if doc_table.numeric(i) else "left")
        for row in doc_table.rows:
            table.add_row(*(_cell(v) for v in row))
        out.print(table)
    out.print(f"[dim]{escape(COLUMNS_NOTE)} {escape(NOISY_LEGEND)}[/]")


def _render_slo_answers(outcome: PlaybookOutcome) -> None:
    """Each run's SLO search answer (what slo-search.json says), one line a run, the answer in
    bold: the figure a search is run for, shown where the run ends."""
    from orchestrator.results.slo_answer import slo_answers

    answers = slo_answers(outcome.results_dir, outcome.results)
    if not answers:
        return
    # only now: report_doc imports pandas and the figures (1.5 s), for one sentence
    from orchestrator.results.report_doc import SLO_VERDICT_NOTE

    targets = ", ".join(dict.fromkeys(t for a in answers for t in a.targets))
    out.print(f"[bold]SLO search[/]{escape(f' ({targets})' if targets else '')}:")
    for a in answers:
        answer = f"[bold green]{escape(a.label)}[/]" if a.best is not None else "[bold red]none[/]"
        out.print(f"  {escape(a.run)} on {escape(a.host)}: {answer}  [dim]{escape(a.detail)}[/]")
    out.print(f"[dim]{escape(SLO_VERDICT_NOTE)}[/]")


def _cell(value: Value) -> str:
    if value.spread is None:
        return escape(value.text)
    spread = f"±{value.spread}"
    return escape(value.text) + (f" [bold red]{spread}[/]" if value.noisy else f" [dim]{spread}[/]")


def point_label(r: RunResult) -> str:
    """``c=8 #2``: the load point, and the repeat when there are several."""
    if r.point is None:
        return "-"
    return r.point.label + (f" #{r.point.repeat}" if r.point.repeats > 1 else "")


def grouped_warnings(
    results: Sequence[RunResult],
) -> list[tuple[tuple[str, str], str, list[str]]]:
    """Each run's warnings once, with the points that gave them when a sweep repeats one (a
    warning that failed its measurement is told with the failure, not again here)."""
    found: dict[tuple[str, str, str], list[str]] = {}
    sweeps = {r.run.key for r in results if r.point and (r.point.index or r.point.repeats > 1)}
    for r in results:
        for warning in r.warnings:
            if r.error is not None and warning.message in r.error.message:
                continue
            points = found.setdefault((r.run.name, r.run.host, warning.message), [])
            if r.run.key in sweeps:
                points.append(point_label(r))
    return [((name, host), text, pts) for (name, host, text), pts in found.items()]


def _render_not_run(results: Sequence[RunResult]) -> None:
    """Measurements never made, once per run and cause."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        if r.not_run and r.error is not None:
            found.setdefault((r.run.name, r.run.host, r.error.message), []).append(point_label(r))
    for (name, host, why), points in found.items():
        what = "" if points == ["-"] else f" {len(points)} point(s) ({', '.join(points)})"
        out.print(f"[bold red]{escape(name)} on {escape(host)}{escape(what)}:[/] {escape(why)}")


def _render_error(r: RunResult) -> None:
    error = r.error
    if error is None:
        return
    message = without_host(error.message, r.run.host)
    out.print(
        f"[bold red]{escape(r.run.name)} on {escape(r.run.host)} failed:[/] {escape(message)}"
    )
    if error.hint:
        out.print(f"  hint: {escape(error.hint)}")
    if error.log_tail:
        out.print(f"  last log lines (all in {escape(r.run.folder)}/server.log):")
        for line in error.log_tail[-8:]:
            out.print(f"  [dim]|[/] {escape(line)}")


def _render_collapse(r: RunResult) -> None:
    collapse = r.collapse
    if collapse is None:
        return
    out.print(
        f"[bold red]{escape(r.run.name)} on {escape(r.run.host)}:[/] {escape(collapse.message)}"
    )
    for cause in collapse.likely_causes[:4]:
        out.print(f"  {cause.rank}. [bold]{escape(cause.cause)}[/] ({escape(cause.source)})")
        for evidence in cause.evidence:
            out.print(f"     - {escape(evidence)}")
        if cause.fix and not any("Fix:" in e for e in cause.evidence):
            out.print(f"     fix: {escape(cause.fix)}")
