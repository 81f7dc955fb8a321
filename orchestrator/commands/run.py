"""`orch run PLAYBOOK`: a whole playbook, hosts in parallel, each host's runs one after another.

Order of events: plan and validate every run, prompt files included (no host touched yet) -> open
every host and probe it -> doctor every run on its host, refusing errors unless forced -> create
the results folder -> execute runs (each creates its folder and manifest as it starts) ->
``summary.csv`` and ``comparison.png``. Every server started is registered so that an exception
or a cancellation (Ctrl-C) anywhere stops them all before this returns.

What happens meanwhile is told to an ``Observer`` (``runner/progress.py``) as typed events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.agent.client import AgentClient
from orchestrator.backends.base import backend_of, open_hosts
from orchestrator.backends.hostrun import HostRun
from orchestrator.commands.session import SshOptions, load_hosts, open_pool
from orchestrator.config import Inventory, Playbook, RunSpec, load_playbook
from orchestrator.config.errors import did_you_mean
from orchestrator.config.places import place_kind
from orchestrator.doctor.findings import Finding
from orchestrator.engines.plan import (
    PlannedLaunch,
    gpu_shortfalls,
    plan_launches,
    port_collisions,
)
from orchestrator.errors import AgentError, ConfigError, OrchError, ResultsWriteError
from orchestrator.loadgen.prompts import PromptSet, load_prompts
from orchestrator.remote.wire import ErrorKind, StopSpec
from orchestrator.results.model import RunResult
from orchestrator.results.plot import write_comparison
from orchestrator.results.report import write_summary_csv
from orchestrator.results.store import new_results_dir, safe_name
from orchestrator.runner.manifest import manifest
from orchestrator.runner.preflight import (
    DoctorResult,
    HostSession,
    check_requirements,
    doctor_plans,
)
from orchestrator.runner.progress import (
    Connecting,
    DoctorNotice,
    ExecutionEnded,
    ExecutionStarted,
    Observer,
    PhaseChanged,
    RunAdded,
    RunPhase,
)
from orchestrator.runner.server import ServerRegistry
from orchestrator.runner.state import RunJob
from orchestrator.sweep.pins import check_resume, pin_inputs
from orchestrator.sweep.points import searched
from orchestrator.sweep.resume import (
    PLAN_FILE,
    PlanRecord,
    RunRecord,
    decide,
    set_aside,
    sha256,
    survey,
)

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


@dataclass(frozen=True)
class RunPlan:
    """Everything `orch run` works out before touching a host. ``record`` goes into the
    results folder as plan.json, for ``--resume``; ``resume_dir`` is the folder resumed."""

    playbook: Playbook
    inventory: Inventory
    plans: list[PlannedLaunch]
    prompts: list[PromptSet]  # one per plan
    record: PlanRecord | None = None
    resume_dir: Path | None = None
    notes: tuple[str, ...] = ()  # warnings to show before anything starts


@dataclass
class PlaybookOutcome:
    """A playbook run's results folder, its runs' results in run order, and the files made
    from them."""

    results_dir: Path
    results: list[RunResult]
    csv_path: Path
    plot_path: Path | None

    @property
    def failed(self) -> bool:
        return any(r.error is not None for r in self.results)


class DoctorRefused(OrchError):
    """The doctor found errors in runs that did not opt out (``doctor: warn``) and no --force."""

    def __init__(self, refused: list[tuple[PlannedLaunch, list[Finding]]]) -> None:
        lines = []
        for plan, errors in refused:
            for f in errors:
                lines.append(f"run {plan.run.name!r} on {plan.host.name}: [{f.check}] {f.message}")
        checks = {f.check for _, errors in refused for f in errors}
        super().__init__(
            "the doctor refused to launch:\n  " + "\n  ".join(lines), hint=refusal_hint(checks)
        )
        self.refused = refused


PORT_HINT = (
    "free the port (`orch ps` / `orch stop RUN_ID` when orch's own server holds it, else stop "
    "the process named) or set the run's `port` to a free one; --force cannot launch on a "
    "taken port"
)
FORCE_HINT = (
    "fix the configuration; or pass --force, or set `doctor: warn` on the run, to launch "
    "anyway (e.g. to measure the collapse on purpose)"
)


def refusal_hint(checks: set[str]) -> str:
    """The hint fitting what was refused: a taken port is freed or moved, never forced."""
    if checks == {"port"}:
        return PORT_HINT
    if "port" in checks:
        return f"{PORT_HINT}. Other errors: {FORCE_HINT}"
    return FORCE_HINT


# -- planning (no host touched) ---------------------------------------------------------------


def plan_run(
    playbook_file: Path,
    hosts_file: Path,
    only: list[str] | None,
    *,
    force: bool = False,
) -> RunPlan:
    """Validate the playbook, place its runs and read their prompt files (no host touched).

    ``only``: host names, tags or groups, or run names (shell patterns: ``vllm-*``); a run is
    kept when its host is selected (if any host selector is given) and its name matches (if
    any run pattern is).
    """
    playbook = load_playbook(playbook_file)
    inventory, _ = load_hosts(hosts_file, None)
    host_sel, run_pats = split_only(only or [], inventory, playbook)
    plans = plan_launches(playbook, inventory, host_filter=host_sel or None)
    if run_pats:
        plans = [p for p in plans if any(run_matches(p, pat) for pat in run_pats)]
    if not plans:
        raise OrchError(
            f"no run of {playbook_file} matches a host",
            hint="check the playbook's `hosts` and --only against hosts.yaml",
        )
    refuse_port_collisions(playbook, plans)
    # a shared host's runs wait for its GPUs, a cluster's get one node each, a CPU host
    # serves on one device: never more
    refuse_gpu_shortfalls(
        playbook,
        [
            p
            for p in plans
            if playbook.share_gpus or place_kind(p.host).bounded_gpus or p.host.cpu_only
        ],
    )
    data = playbook_file.read_bytes()
    prompts = load_run_prompts(playbook, plans)
    hosts = {p.host.name: p.host for p in plans}
    record = PlanRecord(
        playbook=str(playbook_file.resolve()),
        playbook_sha256=sha256(data),
        hosts_file=str(hosts_file.resolve()),
        only=list(only or []),
        force=force,
        runs=[],
        inputs=pin_inputs(prompts, list(hosts.values())),
    )
    return RunPlan(playbook, inventory, plans, prompts, record)


def split_only(
    only: Sequence[str], inventory: Inventory, playbook: Playbook
) -> tuple[list[str], list[str]]:
    """``--only`` values as (host selectors, run name patterns). A value naming a host, tag or
    group selects hosts; one matching a run's name (a shell pattern) picks runs; one that does
    neither is an error naming both lists."""
    hosts: list[str] = []
    runs: list[str] = []
    names = [r.name for r in playbook.expand()]
    for value in only:
        places = (*inventory.hosts, *inventory.tags, *inventory.clusters, *inventory.cluster_tags)
        if value == "all" or value in places:
            hosts.append(value)
        elif any(fnmatch.fnmatchcase(n, value) or _base(n) == value for n in names):
            runs.append(value)
        else:
            raise ConfigError(
                f"--only {value!r} names no host, tag or group and matches no run"
                f"{did_you_mean(value, [*inventory.hosts, *inventory.tags, *names])}",
                hint=f"hosts: {', '.join(inventory.hosts)}; runs: {', '.join(names)}"
                " (run names may be shell patterns: 'vllm-*')",
            )
    return hosts, runs


def _base(name: str) -> str:
    return name.split("[", 1)[0]


def run_matches(plan: PlannedLaunch, pattern: str) -> bool:
    name = plan.run.name
    return (
        fnmatch.fnmatchcase(name, pattern)
        or _base(name) == pattern
        or fnmatch.fnmatchcase(f"{name}@{plan.host.name}", pattern)
    )


def plan_resume(results_dir: Path, hosts_file: Path | None) -> RunPlan:
    """The plan of an interrupted playbook run, from the plan.json in its folder: the same
    playbook (unchanged since), runs, filter and folders (``hosts_file`` may be another)."""
    record = PlanRecord.read(results_dir)
    playbook = Path(record.playbook)
    try:
        data = playbook.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the playbook {playbook} that {results_dir} was run with: "
            f"{exc.strerror or exc}",
            hint="resume from where the playbook is, with the file as it was",
        ) from exc
    if sha256(data) != record.playbook_sha256:
        raise ConfigError(
            f"{playbook} changed since {results_dir.name} began: a resume measures the runs "
            "that playbook asked for, and it no longer asks for the same ones",
            file=str(playbook),
            hint="restore the playbook as it was (git shows it), or start a new run",
        )
    hosts = hosts_file or Path(record.hosts_file)
    plan = plan_run(playbook, hosts, record.only, force=record.force)
    missing = [_job_key(p) for p in plan.plans if record.folder_of(_job_key(p)) is None]
    if missing:
        raise OrchError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in {PLAN_FILE} of "
            f"{results_dir}: the hosts changed since the run began",
            hint=f"resume with the hosts file the run used ({record.hosts_file})",
        )
    assert plan.record is not None and plan.record.inputs is not None
    notes = check_resume(
        record.inputs,
        plan.record.inputs,
        folder=str(results_dir),
        plan_file=str(results_dir / PLAN_FILE),
    )
    return dataclasses.replace(plan, record=record, resume_dir=results_dir, notes=tuple(notes))


def and_more(more: int, noun: str) -> str:
    """`` (and 2 more such runs)`` after the first of several located errors told at once."""
    return f" (and {more} more such {noun}{'s' * (more > 1)})" if more else ""


def refuse_port_collisions(playbook: Playbook, plans: Sequence[PlannedLaunch]) -> None:
    """A ConfigError (exit 2, nothing touched) when two runs would listen on one machine's
    port at the same time, located at the second run's ``port`` (or the run itself)."""
    collisions = port_collisions(plans)
    if not collisions:
        return
    first = collisions[0]
    message = first.message() + and_more(len(collisions) - 1, "pair")
    raise playbook.error_at(
        first.second.run,
        ["port"],
        message,
        hint="give runs that share a machine distinct `port:` values, or let one host entry run "
        "them one after another; a run sent to two host entries on one machine cannot "
        "have a port of its own on each: send it to one (its `hosts:`)",
    )


def refuse_gpu_shortfalls(playbook: Playbook, plans: Sequence[PlannedLaunch]) -> None:
    """With ``share_gpus`` (or on a cluster, or a CPU host): a ConfigError (exit 2, nothing
    touched) for a run that needs more GPUs than hosts.yaml says its host has, located at the
    run's ``tensor_parallel``."""
    shortfalls = gpu_shortfalls(plans)
    if not shortfalls:
        return
    first = shortfalls[0]
    message = first.message() + and_more(len(shortfalls) - 1, "run")
    raise playbook.error_at(
        first.plan.run,
        ["tensor_parallel"],
        message,
        hint=f"lower the run's GPUs (tensor_parallel x the pipeline and data parallel sizes in "
        f"extra_args) to {first.host_gpus} or less, send the run to a host with "
        "more GPUs (its `hosts:`), or correct the host's `gpus:` (a cluster's "
        "`gpus_per_node:`) in hosts.yaml",
    )


def prompt_notes(plans: Sequence[PlannedLaunch], prompts: Sequence[PromptSet]) -> list[str]:
    """One line per prompt source that had entries without a usable prompt (ShareGPT entries
    with no human turn): the run sends fewer distinct prompts than the file holds."""
    notes: dict[str, str] = {}
    for plan, prompt_set in zip(plans, prompts, strict=True):
        if prompt_set.skipped and prompt_set.source not in notes:
            notes[prompt_set.source] = (
                f"prompts {prompt_set.source.removeprefix('file:')}: {prompt_set.skipped} "
                f"entr{'y' if prompt_set.skipped == 1 else 'ies'} skipped (no usable prompt, e.g. "
                f"a ShareGPT conversation without a human turn); {len(prompt_set.items)} used "
                f"(run {plan.run.name})"
            )
    return list(notes.values())


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


def prompt_error(playbook: Playbook, run: RunSpec, exc: ConfigError) -> ConfigError:
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
    return playbook.error_at(
        run, list(dict.fromkeys(fields)), message, hint=exc.hint, name_matrix_run=False
    )


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


def _job_key(plan: PlannedLaunch) -> str:
    return f"{plan.run.name}@{plan.host.name}"


# -- execution --------------------------------------------------------------------------------


def refused_runs(
    plans: Sequence[PlannedLaunch], doctor: Sequence[DoctorResult], *, force: bool
) -> list[tuple[PlannedLaunch, list[Finding]]]:
    if force:
        return []
    return [
        (p, d.errors)
        for p, d in zip(plans, doctor, strict=True)
        if d.errors and str(p.run.doctor) == "error"
    ]


def _doctor_notices(
    plans: Sequence[PlannedLaunch], doctor: Sequence[DoctorResult], *, force: bool
) -> list[DoctorNotice]:
    notices = []
    for plan, result in zip(plans, doctor, strict=True):
        why = "--force" if force else f"doctor: {plan.run.doctor}"
        notices += [
            DoctorNotice(
                run=plan.run.name,
                host=plan.host.name,
                finding=f,
                overridden_by=why if f.severity == "error" else None,
            )
            for f in result.findings
            if f.severity != "ok"
        ]
    return notices


async def run_playbook(
    playbook: Playbook,
    plans: Sequence[PlannedLaunch],
    *,
    pool: ConnectionPool,
    results_root: Path,
    observer: Observer,
    force: bool = False,
    prompts: Sequence[PromptSet] | None = None,
    record: PlanRecord | None = None,
    resume_dir: Path | None = None,
) -> PlaybookOutcome:
    """``prompts``: one per plan, as ``load_run_prompts`` returns (loaded here when None).
    ``record``: written as plan.json so the run can be resumed;
    ``resume_dir``: the results folder of an interrupted run to finish instead of a new one."""
    if prompts is None:
        prompts = load_run_prompts(playbook, plans)
    observer.on_event(Connecting(hosts=len({p.host.name for p in plans})))
    sessions = await open_hosts(pool, plans)
    check_requirements(sessions, plans)  # aiohttp, the engine: before any model is loaded
    # a controller killed outright left its servers up, on their ports and GPUs: stopped
    # before the doctor looks at those
    if (
        resume_dir is not None
        and record is not None
        and await stop_leftovers(sessions, leftover_run_ids(resume_dir, record, plans))
    ):
        sessions = await open_hosts(pool, plans)  # facts as they are now: ports, GPUs
    doctor = await doctor_plans(sessions, plans)
    refused = refused_runs(plans, doctor, force=force)
    if refused:
        raise DoctorRefused(refused)
    for notice in _doctor_notices(plans, doctor, force=force):
        observer.on_event(notice)
    keys = [_job_key(p) for p in plans]
    if resume_dir is not None:
        assert record is not None
        results_dir = resume_dir
        folders = [record.folder_of(k) or safe_name(k) for k in keys]
    else:
        results_dir = new_results_dir(results_root, playbook.name)
        folders = run_folders(keys)
        if record is not None:
            runs = [RunRecord(k, f) for k, f in zip(keys, folders, strict=True)]
            dataclasses.replace(record, runs=runs).write(results_dir)
    jobs = []
    for order, (plan, doc, prompt_set) in enumerate(zip(plans, doctor, prompts, strict=True)):
        key = _job_key(plan)
        job = RunJob(
            key=key,
            order=order,
            plan=plan,
            run_dir=results_dir / folders[order],
            prompts=prompt_set,
            run_id=f"{safe_name(plan.run.name)}-{uuid.uuid4().hex[:8]}",
            doctor=doc.findings,
            drafter=doc.drafter,
            target=doc.target,
        )
        job.manifest = manifest(job, playbook, sessions[plan.host.name], doc)
        jobs.append(job)
    results: dict[str, list[RunResult]] = {}
    if resume_dir is not None:
        results = prepare_resume(jobs)
    for job in jobs:
        w = job.plan.run.workload
        observer.on_event(
            RunAdded(
                job.key,
                run=job.plan.run.name,
                host=job.plan.host.name,
                total=None if w.duration_s else w.num_prompts,
                points=job.total,
                kept=len(job.kept),
            )
        )
    todo = [j for j in jobs if j.key not in results]
    async with ServerRegistry(observer) as registry:
        observer.on_event(ExecutionStarted())
        # each place's runs as its backend places them: a host's one after another, or on GPU
        # slots with share_gpus (backends/hostrun.py); a cluster's in allocations of their own
        # (backends/clusterrun.py)
        workers: list[asyncio.Future[None]] = []
        for name in dict.fromkeys(j.plan.host.name for j in todo):
            host_run = HostRun(sessions[name], pool, registry, observer, results)
            mine = [j for j in todo if j.plan.host.name == name]
            work = backend_of(mine[0].plan.host).execute(host_run, mine, playbook, force=force)
            workers.append(asyncio.ensure_future(work))
        try:
            await asyncio.gather(*workers)
        except ResultsWriteError as exc:
            # every later run would fail the same way after loading its model: stop them all
            # (their servers are stopped by their own clean-up, then by the registry)
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise results_write_stopped(exc, jobs, results, results_dir, observer) from exc
        finally:
            observer.on_event(ExecutionEnded())
    ordered = [r for j in jobs for r in results[j.key]]
    csv_path = write_summary_csv(fresh_path(results_dir / "summary.csv"), ordered)
    if any(j.plan.run.workload.is_sweep for j in jobs):
        # a bar per measurement says nothing: the fronts of throughput vs interactivity do
        # (pandas and scipy: imported for a sweep only)
        from orchestrator.results.figures.pareto import write_pareto

        plot_path = write_pareto(fresh_path(results_dir / "pareto.png"), results_dir, ordered)
    else:
        plot_path = write_comparison(
            fresh_path(results_dir / "comparison.png"),
            ordered,
            title=f"{playbook.name}: {results_dir.name}",
        )
    return PlaybookOutcome(results_dir, ordered, csv_path, plot_path)


def fresh_path(path: Path) -> Path:
    """``path``, or ``summary-2.csv`` ... when a resumed run's folder already has it."""
    n = 1
    candidate = path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def leftover_run_ids(
    results_dir: Path, record: PlanRecord, plans: Sequence[PlannedLaunch]
) -> dict[str, list[str]]:
    """Per host, the server run ids the earlier sessions of these runs launched."""
    out: dict[str, list[str]] = {}
    for plan in plans:
        folder = record.folder_of(_job_key(plan))
        if folder is not None:
            found = survey(results_dir / folder, [])
            out.setdefault(plan.host.name, []).extend(found.run_ids)
    return out


def prepare_resume(jobs: Sequence[RunJob]) -> dict[str, list[RunResult]]:
    """Survey each run's folder, set aside what is in the way, and mark what is kept. Returns
    the results of the runs already complete."""
    done: dict[str, list[RunResult]] = {}
    for job in jobs:
        planned_folders = [m.folder for m in job.measurements()]
        found = survey(job.run_dir, planned_folders)
        decision = decide(found.statuses, planned_folders, sessions=found.sessions)
        for rel, status in decision.aside:
            set_aside(job.run_dir, rel, status)
        job.kept = {rel: found.results[rel] for rel in decision.keep}
        job.session = decision.session
        search_done = any(job.run_dir.glob("slo-search*.json"))
        if decision.complete and (search_done or not searched(job.plan.run)):
            done[job.key] = sorted(
                job.kept.values(),
                key=lambda r: (r.point.index, r.point.repeat) if r.point else (0, 0),
            )
    return done


async def stop_run_id(agent: AgentClient, run_id: str, timeout_s: float = 30.0) -> bool:
    """Stop the server ``run_id`` if it still runs; whether it was running."""
    spec = StopSpec(
        workdir=await agent.workdir(),
        run_id=run_id,
        timeout_s=timeout_s,
        wait_gpus=not agent.host.cpu_only,
    )
    try:
        result = await agent.stop(spec, timeout=timeout_s + 120)
    except AgentError as exc:
        if exc.kind is not ErrorKind.NOT_FOUND:
            raise
        return False
    return any(outcome.was_running for outcome in result.stopped)


async def stop_leftovers(sessions: dict[str, HostSession], leftovers: dict[str, list[str]]) -> int:
    """Stop the servers an interrupted session of these runs may have left running; how many
    were still running."""
    stopped = 0
    for host, run_ids in leftovers.items():
        session = sessions.get(host)
        if session is None or session.agent is None:
            continue
        for run_id in run_ids:
            stopped += await stop_run_id(session.agent, run_id)
    return stopped


def results_write_stopped(
    exc: ResultsWriteError,
    jobs: Sequence[RunJob],
    results: dict[str, list[RunResult]],
    results_dir: Path,
    observer: Observer,
) -> ResultsWriteError:
    """The playbook stopped because a results file could not be written: ``exc`` with what
    became of the runs (the ones left are told as failed, not started)."""
    left = [j for j in jobs if j.key not in results]
    for job in left:
        observer.on_event(
            PhaseChanged(job.key, RunPhase.FAILED, reason=f"not finished: {exc.reason}")
        )
    done = len(results)
    what = [
        "the playbook stopped and every server it started was stopped",
        f"{done} run{'' if done == 1 else 's'} finished (their files are in {results_dir})",
    ]
    if left:
        what.append(f"{len(left)} did not finish: {', '.join(j.key for j in left)}")
    hint = "; ".join([*what, exc.hint or "make the results folder writable and run again"])
    stopped = ResultsWriteError(exc.path, exc.reason, errno=exc.errno, hint=hint)
    return stopped


async def run(
    plan: RunPlan, *, ssh: SshOptions, results_root: Path, observer: Observer, force: bool = False
) -> PlaybookOutcome:
    """`orch run`: ``plan`` executed over one SSH pool (closed, servers stopped, on return)."""
    async with open_pool(plan.inventory, ssh) as pool:
        return await run_playbook(
            plan.playbook,
            plan.plans,
            pool=pool,
            results_root=results_root,
            observer=observer,
            force=force,
            prompts=plan.prompts,
            record=plan.record,
            resume_dir=plan.resume_dir,
        )
