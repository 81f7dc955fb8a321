"""`orch nightly PLAYBOOK`, `orch history PLAYBOOK` and `orch baseline accept|reject NIGHT` on the
command line (the work is in ``commands/nightly.py``, the rules in ``nightly/``).

`orch nightly`'s exit status is the night's verdict, so a scheduler or a CI job can act on it:
0 no regression, 1 regression (or an acceptance collapse), 2 suspicious only, 3 could not
measure (a bad playbook or hosts file, hosts down, runs failed, too few nights or repeats). Any
failure to measure is 3, never 1: an infrastructure crash is not a performance regression, and
neither is a usage error (click's 2) nor an exception orch did not expect (Python's 1).
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand

from orchestrator.cli.common import (
    DEFAULT_HOSTS_FILE,
    AcceptNewOpt,
    HostsFileOpt,
    JsonOpt,
    KnownHostsOpt,
    SshOptions,
    err,
    out,
    print_json,
    report_error,
)
from orchestrator.cli.run import RunOnlyOpt, launch, render_outcome
from orchestrator.config.nightly_terms import Decision
from orchestrator.errors import OrchError

if TYPE_CHECKING:  # pandas and scipy take seconds to import: only the nightly pays for them
    from orchestrator.commands.nightly import NightListing, NightOutcome
    from orchestrator.commands.run import PlaybookOutcome
    from orchestrator.config.playbook import Playbook

EXIT_COULD_NOT_MEASURE = 3
DEBUG_ENV = "ORCH_DEBUG"  # set: an unexpected error prints its traceback too
ResultsOpt = Annotated[
    Path, typer.Option("--results", help="Results root: the nights' folders and history/.")
]


def nightly_command(
    playbook_file: Annotated[
        Path, typer.Argument(help="The playbook to run every night.", show_default=False)
    ],
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: RunOnlyOpt = None,
    results: ResultsOpt = Path("results"),
    force: Annotated[
        bool, typer.Option("--force", help="Launch runs the doctor found errors in.")
    ] = False,
    report: Annotated[
        bool,
        typer.Option(
            "--report/--no-report",
            help="Write report.html and report.md (with the trend plots) into the night's folder.",
        ),
    ] = True,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a playbook as tonight's night of its nightly history and judge it.

    Every figure (output and decode tok/s, TTFT and TPOT medians and p99, acceptance length
    and per position, failure rate) of every case is compared with the median of its last 7
    accepted nights: worse by more than a practical threshold (5% throughput and acceptance,
    10% latency) and significant (one-sided Welch t-test over the repeats, p < 0.01) is a
    violation; two nights in a row, a regression. The playbook's `nightly:` section changes
    these. Writes nightly.md, nightly.json and report.html (trend plots) into the night's
    results folder and appends the night to results/history/.

    Exit status: 0 no regression; 1 regression or acceptance collapse; 2 suspicious (one
    violating night); 3 could not measure (bad playbook or usage, hosts down, runs failed, too
    few nights or repeats, a night not recorded in the history, an error in orch itself:
    ORCH_DEBUG=1 shows its traceback); 128+N stopped by signal N (nothing recorded).
    """
    ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
    try:
        night = _nightly(
            playbook_file,
            hosts_file,
            only,
            results,
            force=force,
            report=report,
            ssh=ssh,
            as_json=as_json,
        )
    except typer.Exit:
        raise
    except Exception as exc:  # a bug: said in one message, and never mistaken for a verdict
        report_error(bug(exc))
        err.print("[bold red]nightly:[/] could not measure (exit 3)")
        raise typer.Exit(EXIT_COULD_NOT_MEASURE) from None
    if night.exit_code:
        raise typer.Exit(night.exit_code)


def bug(exc: Exception) -> OrchError:
    """An exception orch did not expect as one message; its traceback only under ORCH_DEBUG
    (a traceback buries the one line a scheduler's mail should show)."""
    if os.environ.get(DEBUG_ENV):
        trace = "".join(traceback.format_exception(exc)).rstrip("\n")
        err.print(trace, markup=False, highlight=False)
    return OrchError(
        f"orch failed: {type(exc).__name__}: {exc}",
        hint=f"this is a bug in orch: please report it; {DEBUG_ENV}=1 shows the traceback",
    )


def _nightly(
    playbook_file: Path,
    hosts_file: Path,
    only: list[str] | None,
    results: Path,
    *,
    force: bool,
    report: bool,
    ssh: SshOptions,
    as_json: bool,
) -> NightOutcome:
    """Plan, run, judge and show one night; OrchError and a failure to write are exit 3."""
    from orchestrator.commands import nightly
    from orchestrator.commands.run import plan_run, prompt_notes

    try:
        run_plan = plan_run(playbook_file, hosts_file, only, force=force)
    except OrchError as exc:
        report_error(exc)
        err.print("[bold red]nightly:[/] could not measure: nothing was launched (exit 3)")
        raise typer.Exit(EXIT_COULD_NOT_MEASURE) from None
    playbook = run_plan.playbook
    for note in [*prompt_notes(run_plan.plans, run_plan.prompts), *nightly.repeat_notes(playbook)]:
        err.print(f"[yellow]note:[/] {escape(note)}")
    try:
        try:
            outcome = launch(run_plan, ssh=ssh, results=results, force=force, hosts_file=hosts_file)
        except OrchError as exc:
            report_error(exc)
            night = nightly.measured_nothing(playbook, results, exc)
        else:
            if not as_json:
                render_outcome(outcome)
            night = _judge(outcome, playbook, results, report=report)
    except OrchError as exc:  # the verdict itself could not be written (disk full ...)
        report_error(exc)
        raise typer.Exit(EXIT_COULD_NOT_MEASURE) from None
    try:  # a CI summary that cannot be appended must not hide the verdict or change its exit
        nightly.step_summary(night.verdict)
    except OrchError as exc:
        err.print(f"[yellow]warning:[/] {escape(str(exc))}")
    show_night(night, as_json=as_json)
    return night


def _judge(
    outcome: PlaybookOutcome, playbook: Playbook, results: Path, *, report: bool
) -> NightOutcome:
    """The night judged; when orch itself fails at it, the night's folder still gets a
    could_not_measure verdict saying so, so the morning's answer is never a missing file."""
    from orchestrator.commands import nightly

    try:
        return nightly.judge(outcome, results_root=results, playbook=playbook, report=report)
    except OrchError:
        raise
    except Exception as exc:
        error = bug(exc)
        report_error(error)
        reason = f"{error} ({error.hint})"
        return nightly.could_not_judge(playbook, outcome.results_dir, reason)


def show_night(night: NightOutcome, *, as_json: bool) -> None:
    from orchestrator.nightly.report import render_markdown

    if as_json:
        doc = night.verdict.to_json()
        doc["files"] = [str(p) for p in night.files]
        doc["report"] = str(night.report) if night.report else None
        print_json(doc)
        return
    out.print(render_markdown(night.verdict), markup=False, highlight=False, soft_wrap=True)
    for path in night.files:
        out.print(f"written: {escape(str(path))}", highlight=False)
    if night.report:
        out.print(f"report:  {escape(str(night.report))}", highlight=False)
    if night.report_problem:
        err.print(f"[yellow]warning:[/] no report.html: {escape(night.report_problem)}")


def history_command(
    playbook: Annotated[
        str,
        typer.Argument(
            help="The playbook file, or its name as its results folders carry it; or `replay`, "
            "followed by a history file.",
            show_default=False,
        ),
    ],
    history_file: Annotated[
        Path | None,
        typer.Argument(
            help="With `replay`: the history file to judge again (results/history/NAME.jsonl).",
            show_default=False,
        ),
    ] = None,
    results: ResultsOpt = Path("results"),
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="Show this figure per night and case (output_tok_s, ttft_ms_p99, "
            "acceptance_length ...) instead of the nights' verdicts.",
            show_default=False,
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="With `replay`: judge under this policy, a playbook's `nightly:` section (the "
            "playbook file itself, or a YAML file of the section alone). Default: orch's.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List a playbook's nights, oldest first, with their verdicts and decisions.

    `orch history replay HISTORY.jsonl [--policy FILE]` judges a history file night by night
    again, as `orch nightly` would have (with the people's decisions made before each night),
    and prints each night's verdict and exit status beside the one recorded: a policy
    back-tested on the team's own past before it is adopted."""
    from orchestrator.commands import nightly

    if playbook == REPLAY:
        _replay(history_file, policy, as_json=as_json)
        return
    if history_file is not None or policy is not None:
        raise OrchError(
            f"unexpected {'--policy' if history_file is None else repr(str(history_file))}: "
            "a history file and --policy go with `orch history replay`",
            hint=f"`orch history {playbook}` lists the nights; `orch history replay "
            "results/history/NAME.jsonl --policy FILE` judges them again",
        )
    name = nightly.playbook_name(playbook)
    if metric is not None:
        _metric_history(results, name, metric, as_json=as_json)
        return
    nights, problems = nightly.list_nights(results, name)
    for problem in problems:
        err.print(f"[yellow]warning:[/] {escape(problem)}")
    if as_json:
        print_json({"playbook": name, "nights": [n.to_json() for n in nights]})
        return
    out.print(nights_table(name, nights))


REPLAY = "replay"


def _replay(history_file: Path | None, policy_path: Path | None, *, as_json: bool) -> None:
    from orchestrator.commands import nightly
    from orchestrator.nightly.verdict import Policy

    if history_file is None:
        raise OrchError(
            "`orch history replay` needs the history file to judge again",
            hint="`orch history replay results/history/NAME.jsonl [--policy FILE]`",
        )
    policy = nightly.policy_file(policy_path) if policy_path is not None else Policy()
    nights, problems = nightly.replay(history_file, policy)
    for problem in problems:
        err.print(f"[yellow]warning:[/] {escape(problem)}")
    if as_json:
        print_json(
            {
                "history": str(history_file),
                "policy": str(policy_path) if policy_path else None,
                "nights": [n.to_json() for n in nights],
            }
        )
        return
    table = Table(
        title=f"{escape(str(history_file))} replayed under "
        f"{escape(str(policy_path)) if policy_path else 'the default policy'}",
        box=box.SIMPLE_HEAD,
    )
    for header in ("night", "verdict", "exit", "recorded", "metrics"):
        table.add_column(header)
    for n in nights:
        v = n.verdict
        counts = ", ".join(f"{count} {verdict}" for verdict, count in v.counts())
        recorded = _verdict_text(n.recorded) if n.recorded else "-"
        table.add_row(
            escape(v.night),
            _verdict_text(v.verdict),
            str(v.exit_code),
            recorded + (" [bold](differs)[/]" if n.differs else ""),
            escape(counts),
        )
    out.print(table)
    differing = sum(n.differs for n in nights)
    out.print(f"{len(nights)} nights replayed; {differing} judged otherwise than recorded")


def nights_table(playbook: str, nights: list[NightListing]) -> Table:
    table = Table(title=f"nights of {escape(playbook)}", box=box.SIMPLE_HEAD)
    for header in ("night", "cases", "verdict", "metrics", "decision"):
        table.add_column(header)
    for n in nights:
        counts = ", ".join(f"{count} {verdict}" for verdict, count in n.counts)
        table.add_row(
            escape(n.night),
            str(n.cases),
            _verdict_text(n.verdict),
            escape(counts or (n.note or "")),
            n.decision or "",
        )
    return table


VERDICT_STYLE = {
    "failure": "bold red",
    "regression": "bold red",
    "drift": "bold red",
    "suspicious": "yellow",
    "could_not_measure": "magenta",
    "insufficient_data": "dim",
    "inconclusive": "yellow",
    "recovered": "green",
    "improvement": "green",
    "ok": "green",
}


def _verdict_text(verdict: str | None) -> str:
    if verdict is None:
        return "not judged"
    return f"[{VERDICT_STYLE[verdict]}]{verdict}[/]"


def _metric_history(results: Path, playbook: str, metric: str, *, as_json: bool) -> None:
    from orchestrator.config.nightly_terms import metric as known_metric
    from orchestrator.nightly.history import History

    try:
        known_metric(metric)
    except ValueError as exc:
        raise OrchError(f"--metric: {exc}") from None
    history = History(results, playbook)
    if not history.path.exists():
        raise OrchError(
            f"no nightly history of playbook {playbook!r} under {results}",
            hint=f"expected {history.path}",
        )
    decisions = {n: d.decision for n, d in history.decisions().items()}
    rows = [r for r in history.rows() if r.metric == metric]
    for problem in dict.fromkeys(history.problems):
        err.print(f"[yellow]warning:[/] {escape(problem)}")
    if as_json:
        print_json(
            {
                "playbook": playbook,
                "metric": metric,
                "rows": [{**r.to_json(), "decision": decisions.get(r.night)} for r in rows],
            }
        )
        return
    table = Table(title=f"{escape(metric)} of {escape(playbook)}", box=box.SIMPLE_HEAD)
    for header in ("night", "case", "value", "± sd", "n", "baseline", "verdict", "decision"):
        table.add_column(header, justify="right" if header in ("value", "± sd", "n") else "left")
    for r in rows:
        table.add_row(
            escape(r.night),
            escape(r.case.label),
            _num(r.value),
            _num(r.spread),
            str(r.n),
            _num(r.baseline),
            _verdict_text(r.verdict),
            decisions.get(r.night) or "",
        )
    out.print(table)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


baseline_app = typer.Typer(
    help="Mark a night by hand: accept an intended change as the new baseline, or reject a "
    "broken night so no baseline counts it.",
    no_args_is_help=True,
)
NightArg = Annotated[
    str,
    typer.Argument(
        help="The night: its results folder, or the folder's name (`orch history` lists them).",
        show_default=False,
    ),
]
NoteOpt = Annotated[
    str | None, typer.Option("--note", help="Why (kept with the decision).", show_default=False)
]


@baseline_app.command("accept")
def accept_command(
    night: NightArg, results: ResultsOpt = Path("results"), note: NoteOpt = None
) -> None:
    """Accept a night: it counts in baselines whatever its verdict, and the baseline starts again
    from it (nights before it no longer count; accept every night of a change, they all count),
    e.g. a new engine version slower on purpose. A night that measured no case is refused
    (exit 1); a case the night could not measure keeps its baseline."""
    _decide(night, "accept", results, note)


@baseline_app.command("reject")
def reject_command(
    night: NightArg, results: ResultsOpt = Path("results"), note: NoteOpt = None
) -> None:
    """Reject a night: no baseline counts it (a broken machine, a bad driver that night)."""
    _decide(night, "reject", results, note)


def _decide(night: str, decision: Decision, results: Path, note: str | None) -> None:
    from orchestrator.commands import nightly

    playbook, history = nightly.decide(night, decision, results, note=note)
    name = Path(night).name
    if decision == "accept":
        what = "counts in every later baseline, which starts again from it"
    else:
        what = "is left out of every baseline"
    out.print(f"night {escape(name)} of {escape(playbook)}: {decision}ed; it {what}")
    unmeasured = nightly.unmeasured_cases(history, name)[1] if decision == "accept" else []
    if unmeasured:
        out.print(
            f"except for the {len(unmeasured)} case(s) it could not measure, whose baselines "
            f"are unchanged: {escape('; '.join(unmeasured))}",
            highlight=False,
        )
    out.print(f"recorded in {escape(str(history.decisions_path))}", highlight=False)


class NightlyCommand(TyperCommand):
    """`orch nightly`, whose usage errors exit 3 (could not measure) after the usual usage
    text: a scheduler reads 1 and 2 as verdicts, and a typo in a crontab is neither."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as exc:  # click's UsageError, BadParameter ...
            exc.exit_code = EXIT_COULD_NOT_MEASURE
            raise


def register(app: typer.Typer) -> None:
    app.command("nightly", cls=NightlyCommand)(nightly_command)
    app.command("history")(history_command)
    app.add_typer(baseline_app, name="baseline")
