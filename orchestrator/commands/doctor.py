"""`orch doctor`: catch speculative-decoding misconfiguration before a server starts.

Two modes: a playbook's runs checked on the hosts they would run on (model files read there by
the agent, through the same preflight `orch run` uses), or a target/drafter pair of local
directories (read by the same code the agent runs on a host, ``read_model``, so a local check
and a remote one see the same facts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.base import open_hosts
from orchestrator.commands.run import plan_run
from orchestrator.commands.session import SshOptions, open_pool
from orchestrator.doctor import Finding, ModelConfig, has_errors, run_checks
from orchestrator.errors import ConfigError, OrchError
from orchestrator.remote.modelfiles import read_model
from orchestrator.runner.preflight import doctor_plans


def load_local_model(directory: Path | str, *, option: str) -> ModelConfig:
    """A ModelConfig from a local checkpoint directory; ConfigError naming the file otherwise."""
    path = Path(directory).expanduser()
    entry = read_model(str(path), str(path), [])
    if not entry.found:
        raise ConfigError(
            "no such directory",
            file=str(path),
            path=option,
            hint="give the model's directory (the one holding config.json)",
        )
    if entry.config is None:
        raise ConfigError(
            f"config.json could not be read: {entry.error}",
            file=str(path / "config.json"),
            path=option,
            hint="point at a Hugging Face checkpoint directory with a valid config.json",
        )
    return ModelConfig.from_json(
        entry.config, entry.tokenizer_config, name=str(path), chat_template=entry.chat_template
    )


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
    return run_checks(
        target=target,
        drafter=drafter,
        engine=engine,
        method=method,
        num_draft_tokens=num_draft_tokens,
        chat_template_kwargs=chat_template_kwargs,
    )


@dataclass(frozen=True)
class RunCheck:
    """One run of a playbook, checked on its host; ``error``: why its host could not be asked."""

    run: str
    host: str
    doctor: str  # the run's `doctor:` setting, "error" or "warn"
    findings: list[Finding]
    error: OrchError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or has_errors(self.findings)


async def doctor_playbook(
    playbook_file: Path, *, hosts_file: Path, only: list[str] | None, ssh: SshOptions
) -> list[RunCheck]:
    """Every run of a playbook, checked on the host it would run on (no server is started)."""
    plan = plan_run(playbook_file, hosts_file, only)
    async with open_pool(plan.inventory, ssh) as pool:
        sessions = await open_hosts(pool, plan.plans)
        results = await doctor_plans(sessions, plan.plans)
    return [
        RunCheck(
            run=p.run_name,
            host=p.host.name,
            doctor=str(p.run.doctor),
            findings=list(r.findings),
            error=sessions[p.host.name].error,
        )
        for p, r in zip(plan.plans, results, strict=True)
    ]
