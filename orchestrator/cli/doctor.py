"""`orch doctor --target DIR --drafter DIR`: check a model/drafter pair on local directories.

The files are read by the same code the agent runs on a host (``read_model_configs``), so a
local check and a remote one see the same facts. The playbook mode (``orch doctor PLAYBOOK``)
reuses ``orchestrator.doctor.check_run`` through the agent and is mounted by the main app.
"""

from __future__ import annotations

import asyncio
import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

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
from orchestrator.cli.session import open_pool
from orchestrator.doctor import Finding, ModelConfig, has_errors, run_checks, to_json
from orchestrator.doctor.findings import by_severity
from orchestrator.doctor.reference import METHOD_ALIASES, NO_SPECULATION
from orchestrator.errors import ConfigError
from orchestrator.remote.modelfiles import read_model

STYLES = {"error": "bold red", "warning": "yellow", "ok": "green"}


class EngineName(str, Enum):
    vllm = "vllm"
    sglang = "sglang"


def load_local_model(directory: Path | str, *, option: str) -> ModelConfig:
    """A ModelConfig from a local checkpoint directory; ConfigError naming the file otherwise."""
    path = Path(directory).expanduser()
    entry = read_model(str(path), str(path), [])
    if not entry.found:
        raise ConfigError("no such directory", file=str(path), path=option,
                          hint="give the model's directory (the one holding config.json)")
    if entry.config is None:
        raise ConfigError(f"config.json could not be read: {entry.error}",
                          file=str(path / "config.json"), path=option,
                          hint="point at a Hugging Face checkpoint directory with a valid config.json")
    return ModelConfig.from_json(entry.config, entry.tokenizer_config, name=str(path),
                                 chat_template=entry.chat_template)


def doctor_local(
    target_dir: Path | str,
    drafter_dir: Path | str | None,
    *,
    engine: str = "vllm",
    num_draft_tokens: int | None = None,
    method: str = "dflash",
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[Finding]:
    """Run the model checks on a target directory and an optional drafter directory."""
    target = load_local_model(target_dir, option="--target")
    drafter = load_local_model(drafter_dir, option="--drafter") if drafter_dir is not None else None
    return run_checks(target=target, drafter=drafter, engine=engine, method=method,
                      num_draft_tokens=num_draft_tokens, chat_template_kwargs=chat_template_kwargs)


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
        raise ConfigError(f"not valid JSON: {exc}", path="--chat-template-kwargs",
                          hint='write it as JSON, e.g. \'{"enable_thinking": false}\'') from exc
    if not isinstance(value, dict):
        raise ConfigError("must be a JSON object", path="--chat-template-kwargs",
                          hint='e.g. \'{"enable_thinking": false}\'')
    return value


def doctor_command(
    playbook: Annotated[Path | None, typer.Argument(
        help="Playbook to check on its hosts (model files read there).", show_default=False)] = None,
    target: Annotated[Path | None, typer.Option("--target", help="Target model directory (config.json, tokenizer_config.json).")] = None,
    drafter: Annotated[Path | None, typer.Option("--drafter", help="Drafter model directory.")] = None,
    engine: Annotated[EngineName, typer.Option("--engine", help="Engine the pair will run on.")] = EngineName.vllm,
    num_draft_tokens: Annotated[int | None, typer.Option("--num-draft-tokens", min=1,
                                help="Tokens drafted per step (vLLM num_speculative_tokens).")] = None,
    method: Annotated[str, typer.Option("--method", help="Speculative method: dflash, eagle3, mtp, ...")] = "dflash",
    chat_template_kwargs: Annotated[str | None, typer.Option(
        "--chat-template-kwargs", help='JSON the workload sends, e.g. \'{"enable_thinking": false}\'.')] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print {\"findings\": [...]} on stdout.")] = False,
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
        doctor_playbook(playbook, hosts_file=hosts_file, only=only, ssh=ssh, json_output=json_output)
        return
    if target is None:
        raise ConfigError("give a PLAYBOOK, or --target DIR (and usually --drafter DIR)", path="orch doctor",
                          hint="orch doctor playbooks/demo.yaml  |  orch doctor --target DIR --drafter DIR")
    known = set(METHOD_ALIASES) | NO_SPECULATION
    if method.strip().lower() not in known:
        raise ConfigError(f"{method!r} is not a speculative method the doctor knows",
                          path="--method", hint=f"use one of: {', '.join(sorted(known))}")
    findings = doctor_local(target, drafter, engine=engine.value, num_draft_tokens=num_draft_tokens,
                            method=method, chat_template_kwargs=_parse_kwargs(chat_template_kwargs))
    if json_output:
        print_json(to_json(findings))
    else:
        render_findings(findings)
    if has_errors(findings):
        raise typer.Exit(EXIT_FAILURE)


def doctor_playbook(playbook_file: Path, *, hosts_file: Path, only: list[str] | None, ssh: SshOptions,
                    json_output: bool) -> None:
    """Every run of a playbook, checked on the host it would run on (no server is started)."""
    from orchestrator.cli.run import load_plan
    from orchestrator.runner.preflight import doctor_plans, open_hosts

    _, inventory, plans = load_plan(playbook_file, hosts_file, only)

    async def check() -> list:
        async with open_pool(inventory, ssh) as pool:
            sessions = await open_hosts(pool, plans)
            results = await doctor_plans(sessions, plans)
            return [(plan, sessions[plan.host.name], r) for plan, r in zip(plans, results, strict=True)]

    checked = asyncio.run(check())
    failed = False
    report = []
    for plan, session, result in checked:
        findings = list(result.findings)
        entry = {"run": plan.run_name, "host": plan.host.name, "doctor": str(plan.run.doctor),
                 "error": str(session.error) if session.error else None,
                 "findings": [f.to_json() for f in findings]}
        report.append(entry)
        failed = failed or bool(session.error) or has_errors(findings)
        if not json_output:
            if session.error:
                out.print(f"[bold red]{escape(plan.run_name)} on {escape(plan.host.name)}:[/] {escape(str(session.error))}")
            else:
                render_findings(findings, title=escape(f"{plan.run_name} on {plan.host.name}"))
    if json_output:
        print_json({"runs": report, "findings": [f for r in report for f in r["findings"]]})
    if failed:
        raise typer.Exit(EXIT_FAILURE)
