"""What every command shares: consoles, the SSH options, and turning errors into text for people.

This is the only place that formats orch's errors; every other layer raises typed errors.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment

from orchestrator.cli import helpfmt as helpfmt  # typer's help labels, as orch shows them
from orchestrator.commands.session import SshOptions as SshOptions
from orchestrator.errors import ConfigError, EngineError, OrchError, SpecError
from orchestrator.runner.fanout import without_host as without_host


# Progress and messages go to stderr so that `--json` output on stdout stays machine-readable.
# Off a terminal (CI logs, `| tee`) rich would wrap tables at 80 columns; logs are wider than that.
def _width(stream: Any) -> int | None:
    return None if stream.isatty() or os.environ.get("COLUMNS") else 160


# C0 controls but newline and tab, DEL, C1: ESC sequences from a host or a file could retitle,
# clear or rewrite the operator's terminal (and a CI log viewer), CR could overwrite a line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """``text`` with every control character but newline and tab made visible: ESC -> ``\\x1b``."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


class SafeConsole(Console):
    """A rich Console that never writes a control character it was given as text.

    Everything orch prints goes through one of the two consoles below (tables, the run display,
    error messages, log lines), so this is the one choke point: the text of each segment is
    sanitized just before rich renders it, after markup was parsed, while rich's own styles and
    cursor controls (segments it marks as control) pass untouched.
    """

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(sanitize(segment.text), segment.style)
            for segment in buffer
        )


out = SafeConsole(highlight=False, width=_width(sys.stdout))
err = SafeConsole(stderr=True, highlight=False, width=_width(sys.stderr))

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
    text = json.dumps(obj, indent=2, ensure_ascii=False, default=str)
    # json escapes C0 controls; DEL and C1 (0x9b is a CSI) only occur inside strings: escape them
    text = re.sub("[\x7f-\x9f]", lambda m: f"\\u{ord(m[0]):04x}", text)
    sys.stdout.write(text + "\n")
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
