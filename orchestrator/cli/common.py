"""What every command shares: consoles, the SSH options, and turning errors into text for people.

This is the only place that formats orch's errors; every other layer raises typed errors.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.commands.fanout import without_host as without_host
from orchestrator.commands.session import SshOptions as SshOptions
from orchestrator.errors import ConfigError, EngineError, OrchError, SpecError


# Progress and messages go to stderr so that `--json` output on stdout stays machine-readable.
# Off a terminal (CI logs, `| tee`) rich would wrap tables at 80 columns; logs are wider than that.
def _width(stream: Any) -> int | None:
    return None if stream.isatty() or os.environ.get("COLUMNS") else 160


out = Console(highlight=False, width=_width(sys.stdout))
err = Console(stderr=True, highlight=False, width=_width(sys.stderr))

DEFAULT_HOSTS_FILE = "hosts.yaml"

HostsFileOpt = Annotated[
    Path,
    typer.Option(
        "--hosts",
        envvar="ORCH_HOSTS",
        help="Inventory file (hosts.yaml).",
        show_default=True,
    ),
]
OnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", help="Limit to these host names, tags or groups (repeatable)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
AcceptNewOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="Record host keys not yet in known_hosts (like StrictHostKeyChecking=accept-new). "
        "A changed key is always refused.",
    ),
]
KnownHostsOpt = Annotated[
    Path | None,
    typer.Option(
        "--known-hosts",
        envvar="ORCH_KNOWN_HOSTS",
        help="known_hosts file to verify host keys against (default: the inventory's "
        "`known_hosts`, else ~/.ssh/known_hosts).",
    ),
]


EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def print_json(obj: Any) -> None:
    """Plain print, not rich: JSON on stdout must be byte-exact and never wrapped."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def exit_code_for(exc: OrchError) -> int:
    return EXIT_USAGE if isinstance(exc, ConfigError | SpecError) else EXIT_FAILURE


ERROR_LABELS: dict[type[OrchError], str] = {ConfigError: "config error", SpecError: "invalid run"}


def report_error(exc: OrchError) -> int:
    """One clear message on stderr: what, where, and what to do. Returns the exit code."""
    # isinstance, not the exact type: subclasses (ConfigValidationError ...) keep their label
    kind = next((label for cls, label in ERROR_LABELS.items() if isinstance(exc, cls)), "error")
    err.print(f"[bold red]{kind}:[/] {escape(str(exc))}")
    if isinstance(exc, EngineError):
        if exc.cause:
            err.print(f"  [bold]likely cause:[/] {escape(exc.cause)}")
        if exc.exit_code is not None:
            err.print(f"  exit code: {exc.exit_code}")
        if exc.log_tail:
            err.print(f"  [dim]last {len(exc.log_tail)} log lines:[/]")
            for line in exc.log_tail:
                err.print(f"  [dim]|[/] {escape(line)}")
    if exc.hint:
        err.print(f"  [bold]hint:[/] {escape(exc.hint)}")
    return exit_code_for(exc)
