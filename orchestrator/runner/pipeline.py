"""`orch run`: a whole playbook, hosts in parallel, each host's runs one after another.

Order of events: plan and validate every run, prompt files included (no host touched yet) -> open
every host and probe it -> doctor every run on its host, refusing errors unless forced -> create
the results folder -> execute runs (each creates its folder and manifest as it starts) ->
``summary.csv`` and ``comparison.png``. Every server started is registered so
that an exception or Ctrl-C anywhere stops them all before orch exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from orchestrator import __version__
from orchestrator.config import Inventory, Playbook, mask
from orchestrator.doctor.findings import Finding
from orchestrator.engines import adapter_for
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import ConfigError, OrchError
from orchestrator.loadgen.prompts import PromptSet, load_prompts
from orchestrator.results.model import RunResult
from orchestrator.results.plot import write_comparison
from orchestrator.results.report import write_summary_csv
from orchestrator.results.store import new_results_dir, safe_name
from orchestrator.runner.display import Display
from orchestrator.runner.execute import RunJob, execute_run, failed_result
from orchestrator.runner.preflight import DoctorResult, HostSession, doctor_plans, open_hosts
from orchestrator.runner.server import ServerRegistry, pool_reconnect

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


class DoctorRefused(OrchError):
    """The doctor found errors in runs that did not opt out (``doctor: warn``) and no --force."""

    def __init__(self, refused: list[tuple[PlannedLaunch, list[Finding]]]) -> None:
        lines = []
        for plan, errors in refused:
            for f in errors:
                lines.append(f"run {plan.run.name!r} on {plan.host.name}: [{f.check}] {f.message}")
        super().__init__(
            "the doctor refused to launch:\n  " + "\n  ".join(lines),
            hint="fix the configuration; or pass --force, or set `doctor: warn` on the run, to "
            "launch anyway (e.g. to measure the collapse on purpose)",
        )
        self.refused = refused


@dataclass
class PlaybookOutcome:
    """A playbook run's results folder, its runs' results in run order, and the files made
    from them."""

    results_dir: Path
    results: list[RunResult]
    csv_path: Path
    plot_path: Path | None


def git_commit(path: Path) -> dict[str, Any] | None:
    """The commit (and dirtiness) of the git checkout holding the playbook, if any."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head, "dirty": bool(dirty.strip())}


def refused_runs(plans: Sequence[PlannedLaunch], doctor: Sequence[DoctorResult], *,
                 force: bool) -> list[tuple[PlannedLaunch, list[Finding]]]:
    if force:
        return []
    return [(p, d.errors) for p, d in zip(plans, doctor, strict=True)
            if d.errors and str(p.run.doctor) == "error"]


def masked_run(plan: PlannedLaunch) -> dict[str, Any]:
    """The resolved run spec with its secrets as ``***``, like the argv and env next to it.

    The spec holds the user's own values: a literal under a secret-looking env key, an
    ``--api-key`` in extra_args. (``${VAR}`` references stay unexpanded in it.)
    """
    adapter = adapter_for(plan.run)
    secrets = adapter.secrets(plan.run, plan.host)
    dump = plan.run.model_dump(mode="json")
    dump["env"] = adapter.masked_env(dump.get("env") or {}, secrets)
    return _mask_strings(dump, secrets)


def _mask_strings(value: Any, secrets: Iterable[str]) -> Any:
    if isinstance(value, str):
        return mask(value, secrets)
    if isinstance(value, list):
        return [_mask_strings(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _mask_strings(v, secrets) for k, v in value.items()}
    return value


def manifest(job: RunJob, playbook: Playbook, session: HostSession, doctor: DoctorResult) -> dict[str, Any]:
    plan = job.plan
    facts = session.facts
    source = playbook.source_path
    return {
        "run": masked_run(plan),
        "run_id": job.run_id,
        "host": plan.host.name,
        "host_config": {"address": plan.host.address, "port": plan.host.port, "user": plan.host.user,
                        "python": plan.host.python, "workdir": plan.host.workdir,
                        "transport": plan.host.transport,
                        "gpus": str(plan.host.gpus) if plan.host.gpus else None},
        "argv": plan.argv,
        "env": plan.env_masked,
        "port": plan.port,
        "host_facts": dataclasses.asdict(facts) if facts else None,
        "engine_version": facts.engines.get(str(plan.run.engine)) if facts else None,
        "orch_version": __version__,
        "playbook": {"name": playbook.name, "path": str(source) if source else None,
                     "git": git_commit(source.parent) if source else None},
        "doctor": [f.to_json() for f in doctor.findings],
        "prompts": {"source": job.prompts.source, "count": len(job.prompts.items),
                    "skipped": job.prompts.skipped, "input_len": job.prompts.input_len},
    }


def load_run_prompts(playbook: Playbook, plans: Sequence[PlannedLaunch]) -> list[PromptSet]:
    """Every plan's prompt set, read and validated now, before any host is touched: a bad line
    in a JSONL file must not surface after minutes of connecting and model loading.

    Runs sharing a source (matrix runs, several hosts) share one read. Errors point at the
    playbook's line that names the source (``runs[1].workload.prompts``); one inside a prompt
    file also names that file and line.
    """
    base_dir = playbook.source_path.parent if playbook.source_path else Path.cwd()
    loaded: dict[tuple[str | None, int | None], PromptSet] = {}
    out = []
    for plan in plans:
        workload = plan.run.workload
        key = (workload.prompts, workload.input_len)
        if key not in loaded:
            try:
                loaded[key] = load_prompts(workload, base_dir=base_dir)
            except ConfigError as exc:
                raise prompt_error(playbook, plan.run, exc) from exc
        out.append(loaded[key])
    return out


def prompt_error(playbook: Playbook, run: Any, exc: ConfigError) -> ConfigError:
    """``exc`` from reading ``run``'s prompts, located at the playbook line naming them.

    ``exc.file`` is the prompt file when the problem is inside it: its line goes in the message
    (``data/p.jsonl:3: not valid JSON ...``) while the error's own location is the playbook's.
    """
    message = exc.message
    if exc.file is not None and exc.line is not None:
        message = f"{exc.location}: {message}"
    elif exc.file is not None and exc.file not in message:
        message = f"{exc.file}: {message}"
    fields = [exc.path or "workload.prompts", "workload.prompts", "workload"]
    # matrix runs share their prompts: no combination is to blame (a matrix over prompts is
    # located at its own value)
    return playbook.error_at(run, list(dict.fromkeys(fields)), message, hint=exc.hint,
                             name_matrix_run=False)


def _job_key(plan: PlannedLaunch) -> str:
    return f"{plan.run.name}@{plan.host.name}"


def run_folders(keys: Sequence[str]) -> list[str]:
    """One folder name per run: ``safe_name`` of ``run@host``, numbered when two coincide
    (long matrix names are cut at the same length; ``a[x=1]`` and ``a_x_1`` read alike), so
    that no run ever finds its folder taken mid-playbook."""
    used: set[str] = set()
    out = []
    for key in keys:
        base = name = safe_name(key)
        n = 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        out.append(name)
    return out


async def run_playbook(
    playbook: Playbook,
    inventory: Inventory,
    plans: Sequence[PlannedLaunch],
    *,
    pool: ConnectionPool,
    results_root: Path,
    display: Display,
    force: bool = False,
    prompts: Sequence[PromptSet] | None = None,
) -> PlaybookOutcome:
    """``prompts``: one per plan, as ``load_run_prompts`` returns (loaded here when None)."""
    if prompts is None:
        prompts = load_run_prompts(playbook, plans)
    display.note(f"connecting to {len({p.host.name for p in plans})} host(s) ...")
    sessions = await open_hosts(pool, plans)
    doctor = await doctor_plans(sessions, plans)
    refused = refused_runs(plans, doctor, force=force)
    if refused:
        raise DoctorRefused(refused)
    for plan, result in zip(plans, doctor, strict=True):
        for finding in result.findings:
            if finding.severity != "ok":
                why = "--force" if force else f"doctor: {plan.run.doctor}"
                tail = f"launching anyway: {why}" if finding.severity == "error" else "warning"
                display.note(f"[yellow]doctor {finding.severity}[/] {escape(plan.run.name)} on "
                             f"{escape(plan.host.name)}: {escape(f'[{finding.check}]')} "
                             f"{escape(finding.message.split('. ')[0])} ({escape(tail)})")
    results_dir = new_results_dir(results_root, playbook.name)
    jobs = []
    folders = run_folders([_job_key(p) for p in plans])
    for order, (plan, doc, prompt_set) in enumerate(zip(plans, doctor, prompts, strict=True)):
        key = _job_key(plan)
        job = RunJob(key=key, order=order, plan=plan, run_dir=results_dir / folders[order],
                     prompts=prompt_set, run_id=f"{safe_name(plan.run.name)}-{uuid.uuid4().hex[:8]}",
                     doctor=doc.findings, drafter=doc.drafter)
        job.manifest = manifest(job, playbook, sessions[plan.host.name], doc)
        w = plan.run.workload
        display.add(key, run=plan.run.name, host=plan.host.name,
                    total=None if w.duration_s else w.num_prompts)
        jobs.append(job)
    results: dict[str, RunResult] = {}
    async with ServerRegistry() as registry:
        with display:
            await asyncio.gather(*(
                _host_worker(sessions[name], [j for j in jobs if j.plan.host.name == name],
                             pool=pool, registry=registry, display=display, results=results)
                for name in dict.fromkeys(j.plan.host.name for j in jobs)
            ))
    ordered = [results[j.key] for j in jobs]
    csv_path = write_summary_csv(results_dir / "summary.csv", ordered)
    plot_path = write_comparison(results_dir / "comparison.png", ordered,
                                 title=f"{playbook.name}: {results_dir.name}")
    return PlaybookOutcome(results_dir, ordered, csv_path, plot_path)


async def _host_worker(session: HostSession, jobs: list[RunJob], *, pool: ConnectionPool,
                       registry: ServerRegistry, display: Display,
                       results: dict[str, RunResult]) -> None:
    """One host's runs, in playbook order; a failed run is recorded and the next one goes on."""
    for job in jobs:
        if session.agent is None or session.facts is None:
            error = session.error or OrchError("host not reachable")
            results[job.key] = failed_result(job, error)
            display.update(job.key, phase=f"failed: {error.message[:60]}")
            continue
        results[job.key] = await execute_run(
            job, agent=session.agent, reconnect=pool_reconnect(pool, session.host, session.agent),
            registry=registry, display=display,
        )
