"""`orch doctor` on the command line: arguments, the findings tables, the exit code (the work,
for a playbook on its hosts or a local model/drafter pair, is in ``commands/doctor.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.choices import engine_metavar, engine_parser
from orchestrator.cli.common import (
    DEFAULT_HOSTS_FILE,
    EXIT_FAILURE,
    AcceptNewOpt,
    HostsFileOpt,
    KnownHostsOpt,
    OnlyOpt,
    SshOptions,
    out,
    print_json,
)
from orchestrator.commands import doctor as command
from orchestrator.commands.doctor import RunCheck, doctor_local
from orchestrator.doctor import Finding, has_errors, to_json
from orchestrator.doctor.findings import by_severity
from orchestrator.doctor.reference import known_method_names
from orchestrator.errors import ConfigError

STYLES = {"error": "bold red", "warning": "yellow", "ok": "green"}


def render_findings(findings: list[Finding], *, title: str = "orch doctor") -> None:
    """A table, errors first, then a one-line count."""
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("finding")
    for finding in by_severity(findings):
        style = STYLES[finding.severity]
        table.add_row(f"[{style}]{finding.severity}[/]", finding.check, escape(finding.message))
    out.print(table)
    counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "ok")}
    out.print(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['ok']} passed")


def _parse_kwargs(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"not valid JSON: {exc}",
            path="--chat-template-kwargs",
            hint="write it as JSON, e.g. '{\"enable_thinking\": false}'",
        ) from exc
    if not isinstance(value, dict):
        raise ConfigError(
            "must be a JSON object",
            path="--chat-template-kwargs",
            hint="e.g. '{\"enable_thinking\": false}'",
        )
    return value


def doctor_command(
    playbook: Annotated[
        Path | None,
        typer.Argument(
            help="Playbook to check on its hosts (model files read there).", show_default=False
        ),
    ] = None,
    target: Annotated[
        Path | None,
        typer.Option(
            "--target", help="Target model directory (config.json, tokenizer_config.json)."
        ),
    ] = None,
    drafter: Annotated[
        Path | None, typer.Option("--drafter", help="Drafter model directory.")
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="Engine the pair will run on.",
            parser=engine_parser(),
            metavar=engine_metavar(),
        ),
    ] = "vllm",
    num_draft_tokens: Annotated[
        int | None,
        typer.Option(
            "--num-draft-tokens",
            min=1,
            help="Tokens drafted per step (vLLM num_speculative_tokens).",
        ),
    ] = None,
    method: Annotated[
        str, typer.Option("--method", help="Speculative method: dflash, eagle3, mtp, ...")
    ] = "dflash",
    chat_template_kwargs: Annotated[
        str | None,
        typer.Option(
            "--chat-template-kwargs",
            help="JSON the workload sends, e.g. '{\"enable_thinking\": false}'.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help='Print {"findings": [...]} on stdout.')
    ] = False,
    hosts_file: HostsFileOpt = Path(DEFAULT_HOSTS_FILE),
    only: OnlyOpt = None,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = None,
) -> None:
    """Catch speculative-decoding misconfiguration (mask token, layer ids, block size ...).

    `orch doctor PLAYBOOK` checks every run on its hosts; `orch doctor --target DIR --drafter DIR`
    checks a pair of local directories. Exit 1 when any finding is an error.
    """
    if playbook is not None:
        ssh = SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new_host_keys)
        doctor_playbook(
            playbook, hosts_file=hosts_file, only=only, ssh=ssh, json_output=json_output
        )
        return
    if target is None:
        raise ConfigError(
            "give a PLAYBOOK, or --target DIR (and usually --drafter DIR)",
            path="orch doctor",
            hint="orch doctor playbooks/demo.yaml  |  orch doctor --target DIR --drafter DIR",
        )
    known = known_method_names()
    if method.strip().lower() not in known:
        raise ConfigError(
            f"{method!r} is not a speculative method the doctor knows",
            path="--method",
            hint=f"use one of: {', '.join(sorted(known))}",
        )
    findings = doctor_local(
        target,
        drafter,
        engine=engine,
        num_draft_tokens=num_draft_tokens,
        method=method,
        chat_template_kwargs=_parse_kwargs(chat_template_kwargs),
    )
    if json_output:
        print_json(to_json(findings))
    else:
        render_findings(findings)
    if has_errors(findings):
        raise typer.Exit(EXIT_FAILURE)


def doctor_playbook(
    playbook_file: Path,
    *,
    hosts_file: Path,
    only: list[str] | None,
    ssh: SshOptions,
    json_output: bool,
) -> None:
    """Every run of a playbook, checked on the host it would run on (no server is started)."""
    checked = asyncio.run(
        command.doctor_playbook(playbook_file, hosts_file=hosts_file, only=only, ssh=ssh)
    )
    if json_output:
        report = [run_check_json(c) for c in checked]
        print_json({"runs": report, "findings": [f.to_json() for c in checked for f in c.findings]})
    else:
        for c in checked:
            if c.error:
                out.print(
                    f"[bold red]{escape(c.run)} on {escape(c.host)}:[/] {escape(str(c.error))}"
                )
            else:
                render_findings(c.findings, title=escape(f"{c.run} on {c.host}"))
    if any(c.failed for c in checked):
        raise typer.Exit(EXIT_FAILURE)


def run_check_json(c: RunCheck) -> dict[str, Any]:
    return {
        "run": c.run,
        "host": c.host,
        "doctor": c.doctor,
        "error": str(c.error) if c.error else None,
        "findings": [f.to_json() for f in c.findings],
    }
