"""The `orch` command line: one typer app, sub-commands mounted from their own modules."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated

import typer

from orchestrator import __version__
from orchestrator.cli import hosts, logs, nightly, servers
from orchestrator.cli.common import EXIT_INTERRUPTED, err, print_json, report_error
from orchestrator.cli.compare import compare_command
from orchestrator.cli.doctor import doctor_command
from orchestrator.cli.interrupts import Interrupts, given
from orchestrator.cli.loadgen import loadgen_command
from orchestrator.cli.report import report_command
from orchestrator.cli.results import results_command
from orchestrator.cli.run import run_command
from orchestrator.errors import OrchError

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

app = typer.Typer(
    name="orch",
    help="Benchmark LLM serving engines (vLLM, SGLang) and speculative decoding on GPU hosts over SSH.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,  # locals may hold secrets
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(hosts.app, name="hosts")
app.add_typer(logs.app, name="logs")
app.command("run")(run_command)
app.command("doctor")(doctor_command)
app.command("report")(report_command)
app.command("results")(results_command)
app.command("compare")(compare_command)
app.command("loadgen")(loadgen_command)
servers.register(app)
nightly.register(app)


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
    except OrchError as exc:
        return report_error(exc)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    return 0


def main() -> None:
    sys.exit(run())
