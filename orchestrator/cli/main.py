"""The `orch` command line: one typer app, sub-commands mounted lazily from their own modules."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from orchestrator import __version__
from orchestrator.cli import helpfmt as helpfmt  # before any help is shown
from orchestrator.cli.interrupts import Interrupts, given

EPILOG = """\
Examples:

  orch hosts check                        # probe every host in hosts.yaml

  orch hosts check --only a6000 --json    # hosts tagged a6000, as JSON

  orch run playbooks/demo.yaml --dry-run  # exact argv and env per run

  orch run playbooks/demo.yaml            # launch, load, measure

  orch doctor playbooks/demo.yaml         # catch drafter mistakes first

  orch logs parse server.log --json       # metrics from a saved log

  orch loadgen http://127.0.0.1:8000 -m Qwen/Qwen3-8B -c 8   # any OpenAI server, no playbook

  orch report results/STAMP-demo         # report.html and report.md of a run

  orch compare results/A results/B        # two runs side by side

  orch results --csv > runs.csv           # a row per measurement, as CSV

  orch nightly playbooks/nightly.yaml     # tonight's run, judged; exit 0/1/2/3

  orch history nightly                    # its nights and their verdicts

  orch ps  /  orch stop --all             # servers orch started

  orch clean --older-than 7d --dry-run    # finished runs' folders on the hosts

  orch schema playbook                    # JSON Schema for editors
"""


@dataclass(frozen=True)
class Lazy:
    """A sub-command mounted on first use: ``attr`` of ``module`` is its function, its typer
    app, or ``register`` (a function mounting several on an app). ``help`` is what `orch
    --help` lists (the first paragraph of the command's own help; a test holds them equal),
    so listing the commands imports none of them (pydantic, asyncssh, pandas, rich tables)."""

    module: str
    attr: str
    help: str


# In `orch --help` order: commands, then schema (defined here), then the groups.
LAZY: dict[str, Lazy] = {
    "run": Lazy(
        "orchestrator.cli.run",
        "run_command",
        "Run a playbook: start each run's server, drive its workload, write results and a plot.",
    ),
    "doctor": Lazy(
        "orchestrator.cli.doctor",
        "doctor_command",
        "Catch speculative-decoding misconfiguration (mask token, layer ids, block size ...).",
    ),
    "report": Lazy(
        "orchestrator.cli.report",
        "report_command",
        "Print the results table of earlier orch runs again (from their summary.json files) "
        "and write their report: report.html (self-contained, plots embedded) and report.md "
        "(plots in report-files/). Only the report files are written; measurements are never "
        "touched.",
    ),
    "results": Lazy(
        "orchestrator.cli.results",
        "results_command",
        "Print the results as data: one row per measurement (run x load point x repeat), the "
        "DataFrame orchestrator.results.load() returns in Python.",
    ),
    "compare": Lazy(
        "orchestrator.cli.compare",
        "compare_command",
        "Compare results folders (across days and machines): each figure side by side with "
        "its relative difference to the first folder's, and the plots overlaid (compare.html, "
        ".md).",
    ),
    "loadgen": Lazy(
        "orchestrator.cli.loadgen",
        "loadgen_command",
        "Drive an OpenAI-compatible server with orch's load generator, from this machine (no "
        "playbook, no SSH), and write a run's files: requests.jsonl, summary.json, "
        "manifest.json. Exits 1 when the measurement failed, by the policy orch run uses: "
        "failed requests past --max-failed-fraction, a client that fell behind, lost records, "
        "contradicted token counts.",
    ),
    "ps": Lazy(
        "orchestrator.cli.servers",
        "register",
        "List the engine servers orch started on the hosts that are running (--all: every "
        "run's), with their start time and uptime. Host entries reaching one workdir are shown "
        "once. On Slurm clusters, orch's jobs in the queue (pending or running).",
    ),
    "stop": Lazy(
        "orchestrator.cli.servers",
        "register",
        "Stop engine servers: SIGTERM, then SIGKILL, and wait until their GPU memory is free. "
        "On Slurm clusters, cancel (scancel) the run's job, or with --all every orch job: the "
        "job holds the engine, which stops with it.",
    ),
    "clean": Lazy(
        "orchestrator.cli.servers",
        "register",
        "Remove finished runs' folders (argv with secrets, engine logs) from the hosts' workdirs.",
    ),
    "nightly": Lazy(
        "orchestrator.cli.nightly",
        "register",
        "Run a playbook as tonight's night of its nightly history and judge it.",
    ),
    "history": Lazy(
        "orchestrator.cli.nightly",
        "register",
        "List a playbook's nights, oldest first, with their verdicts and decisions.",
    ),
    "hosts": Lazy("orchestrator.cli.hosts", "app", "Inspect the hosts in the inventory."),
    "logs": Lazy(
        "orchestrator.cli.logs",
        "app",
        "Parse saved engine logs (vLLM, SGLang) into metric events and a summary.",
    ),
    "baseline": Lazy(
        "orchestrator.cli.nightly",
        "register",
        "Mark a night by hand: accept an intended change as the new baseline, or reject a "
        "broken night so no baseline counts it.",
    ),
}
_GROUPS = list(LAZY).index("hosts")  # typer lists the commands first, then the groups
LISTING = (*list(LAZY)[:_GROUPS], "schema", *list(LAZY)[_GROUPS:])


class LazyGroup(TyperGroup):
    """The root group: sub-commands are imported when one is run (or its own --help shown);
    `orch --help` lists them from ``LAZY`` without importing any."""

    listing = False  # True while this group's help is rendered: list, do not load

    def list_commands(self, ctx: Any) -> list[str]:
        return [*LISTING, *(name for name in self.commands if name not in LISTING)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return self.commands.get(cmd_name)
        if self.listing:
            return TyperCommand(cmd_name, help=LAZY[cmd_name].help)
        self.commands[cmd_name] = command = load(cmd_name, self.rich_markup_mode)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


def load(name: str, markup_mode: Any) -> Any:
    """The click command ``name`` exactly as mounting it on the root app would build it: its
    module's command, app or ``register`` on a bare app with the root's markup mode."""
    spec = LAZY[name]
    target = getattr(importlib.import_module(spec.module), spec.attr)
    holder = typer.Typer(rich_markup_mode=markup_mode, add_completion=False)
    if spec.attr == "register":
        target(holder)
    elif isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    return typer.main.get_group(holder).commands[name]


app = typer.Typer(
    name="orch",
    cls=LazyGroup,
    help="Benchmark LLM serving engines (vLLM, SGLang) and speculative decoding on GPU hosts over SSH.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,  # locals may hold secrets
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"orch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Benchmark LLM serving engines (vLLM, SGLang) and speculative decoding on GPU hosts over SSH."""


class SchemaKind(str, Enum):
    hosts = "hosts"
    playbook = "playbook"


@app.command("schema")
def schema(kind: Annotated[SchemaKind, typer.Argument(help="hosts or playbook")]) -> None:
    """Print the JSON Schema of hosts.yaml or of a playbook (for editor completion)."""
    from orchestrator.cli.common import print_json
    from orchestrator.config import json_schema

    print_json(json_schema(kind.value))


def run(argv: list[str] | None = None, *, interrupts: Interrupts | None = None) -> int:
    """Run the CLI and return its exit code; OrchError becomes one message, never a traceback.

    In-process callers (tests) pass ``interrupts`` (e.g. ``ManualInterrupts``): a playbook
    run then takes its stop requests from it and leaves the process's signal handlers alone.
    """
    try:
        with given(interrupts):
            app(args=argv, prog_name="orch")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        from orchestrator.cli.common import EXIT_INTERRUPTED, err

        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except Exception as exc:
        from orchestrator.errors import OrchError

        if not isinstance(exc, OrchError):
            raise
        from orchestrator.cli.common import report_error

        return report_error(exc)
    return 0


def main() -> None:
    sys.exit(run())
