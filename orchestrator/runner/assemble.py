"""The one assembler of a measurement's ``RunResult``, for ``orch run`` and ``orch loadgen``.

Whoever measured (a run's host over SSH, or ``orch loadgen`` in this process) describes what it
saw as a ``Measured``; ``assemble`` turns it into the result: the request statistics, the load
generator's account, the warnings, acceptance three ways, the collapse verdict, the SLO checks,
and the verdict of the one policy (``results.validity.assess``) as the result's ``error``. So a
figure, a warning or a verdict cannot differ between the two commands.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator import __version__
from orchestrator.config.playbook import SloSpec
from orchestrator.doctor import detect_collapse, engine_silent_changes
from orchestrator.doctor.collapse import Cause
from orchestrator.doctor.findings import problems
from orchestrator.doctor.runspec import causes_for_run
from orchestrator.engines import ENGINES
from orchestrator.engines.failures import REQUESTS_FAILED, describe
from orchestrator.errors import OrchError
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.acceptance import combine_acceptance
from orchestrator.metrics.energy import Energy, window_energy
from orchestrator.metrics.logparse import LogSummary
from orchestrator.metrics.roofline import RooflineInputs
from orchestrator.metrics.summary import RequestStats, merged_chunks, request_stats
from orchestrator.results.manifest import Manifest
from orchestrator.results.model import (
    CPU_DEVICE,
    EngineLogFigures,
    FindingRecord,
    LoadPoint,
    Provenance,
    RunError,
    RunIdentity,
    RunResult,
    RunSettings,
    RunTimes,
    RunWarning,
)
from orchestrator.results.store import safe_name
from orchestrator.results.validity import Assessment, Evidence, assess
from orchestrator.runner.roofline import roofline_figure, roofline_inputs
from orchestrator.runner.state import LiveState, RunJob
from orchestrator.runner.summarize import (
    acceptance_result,
    client_warnings,
    collapse_verdict,
    decode_steps,
    finding_record,
    lag_stats,
    loadgen_info,
    log_lines,
    log_missing_note,
    prometheus_delta,
    requested_settings,
    run_settings,
    send_rates,
    short_window_warning,
)
from orchestrator.sweep.points import Measurement, planned
from orchestrator.sweep.slo import evaluate

MEASUREMENT_FAILED = "MeasurementFailed"  # RunError.type of a measurement assess failed
FAILED_HINT = (
    "a failed measurement's figures are not to be trusted: the result's warnings say what was "
    "found, requests.jsonl holds each request's failure, loadgen.client_lag how far the client "
    "fell behind"
)


@dataclass(frozen=True)
class EngineLog:
    """The engine's own log over the measurement, where orch follows it (``orch run``; ``orch
    loadgen`` has none): the window's summary (None: the window was never marked), the whole
    log's, and the launch's env and argv, which set the engine's stats interval."""

    window: LogSummary | None
    whole: LogSummary | None
    env: Mapping[str, str] = field(default_factory=dict)
    argv: Sequence[str] = ()

    @property
    def figures(self) -> LogSummary | None:
        return self.window or self.whole


@dataclass(frozen=True)
class Measured:
    """Everything a measurement's result is made of, whoever measured it.

    ``error``: what stopped the measurement (the engine died, the host was lost), None when it
    ran to its end; ``lost``: the records file lost lines; ``warnings``: the measurer's own
    (a dropped connection, a prefix cache not reset); ``causes``: ranks a collapse's causes.
    """

    run: RunIdentity
    settings: RunSettings
    times: RunTimes
    point: LoadPoint | None
    records: Sequence[RequestRecord] = ()
    loadgen: LoadgenResult | None = None
    slo: SloSpec | None = None
    error: RunError | None = None
    lost: OrchError | None = None
    log: EngineLog | None = None
    warnings: Sequence[RunWarning] = ()
    causes: Callable[[], Sequence[Cause]] = list
    roofline: RooflineInputs | None = None  # the model's decode shape and the GPUs' bandwidth
    engine_changes: Sequence[FindingRecord] = ()
    doctor: Sequence[FindingRecord] = ()
    provenance: Provenance = field(default_factory=Provenance)


@dataclass(frozen=True)
class Assembled:
    """A measurement's result and the policy's assessment of it (None: nothing was measured,
    the result's ``error`` says why)."""

    result: RunResult
    assessment: Assessment | None


def assemble(m: Measured) -> Assembled:
    """The measurement's result (secrets not yet masked: the caller masks what it writes)."""
    requests = _stats(m)
    whole = m.log.whole if m.log else None
    figures = m.log.figures if m.log else None
    result = RunResult(
        run=m.run,
        settings=m.settings,
        times=m.times,
        point=m.point,
        error=m.error,
        requests=requests,
        engine_metrics=EngineLogFigures(
            generation_throughput_mean=figures.mean_generation_throughput if figures else None,
            log_events=dict(whole.events) if whole else {},
            malformed_log_lines=whole.malformed if whole else 0,
        ),
        engine_changes=list(m.engine_changes),
        doctor=list(m.doctor),
        provenance=m.provenance,
        warnings=list(m.warnings),
    )
    if m.loadgen is None:
        return Assembled(result, None)
    return _measured(result, m, m.loadgen)


def _stats(m: Measured) -> RequestStats | None:
    if not m.records:
        return None
    lg = m.loadgen
    loop = lag_stats(lg.client_lag.loop_delay_ms) if lg and lg.client_lag else None
    return request_stats(m.records, window_s=lg.duration_s if lg else None, loop_delay_ms=loop)


def _measured(result: RunResult, m: Measured, loadgen: LoadgenResult) -> Assembled:
    """``result`` with what the load generator's window adds, and the policy's verdict."""
    settings, requests = m.settings, result.requests
    engine, spec = settings.engine, settings.speculative
    achieved, scheduled = send_rates(m.records) if loadgen.mode == "open" else (None, None)
    saturation = client_warnings(
        client_lag=requests.client_lag if requests else None,
        request_rate=loadgen.request_rate,
        achieved_rate=achieved,
        scheduled_rate=scheduled,
        arrival_clock=loadgen.arrival_clock,
    )
    assessment = assess(
        evidence(loadgen, m.records, saturation=saturation, lost=m.lost, error=m.error),
        max_failed_fraction=settings.workload.max_failed_fraction if settings.workload else 0.0,
    )
    energy = _energy(loadgen, requests)
    warnings = [*assessment.findings, *_cap_bound(loadgen, achieved), *_telemetry(loadgen, energy)]
    prom, note = prometheus_delta(engine, loadgen) if engine in ENGINES else (None, None)
    notes = [note] if note else []
    log = m.log.figures if m.log else None
    if m.log is not None:
        warnings += _log_warnings(m, m.log, loadgen, requests, notes)
    acc = combine_acceptance(
        prometheus=prom.acceptance_length if prom else None,
        log=log.acceptance_length if log else None,
        client=_client_acceptance(m, requests, notes),
        per_position_prometheus=(prom.per_position or None) if prom else None,
        per_position_log=log.per_position_acceptance if log else None,
        speculative=spec.enabled,
        notes=notes,
    )
    collapse = detect_collapse(
        method=spec.method,
        num_draft_tokens=spec.num_draft_tokens,
        acceptance_length=acc.length,
        per_position=acc.per_position,
    )
    roofline, roofline_warnings = roofline_figure(m.roofline, requests)
    slo = None
    if m.slo is not None:
        slo = evaluate(m.slo.parsed, requests, list(m.records), loadgen.duration_s)
    result = result.model_copy(
        update={
            "loadgen": loadgen_info(loadgen, achieved=achieved, scheduled=scheduled),
            "energy": energy,
            "roofline": roofline,
            "warnings": [*warnings, *roofline_warnings, *result.warnings],
            "acceptance": acceptance_result(acc, prom),
            "collapse": collapse_verdict(collapse, m.causes()) if collapse else None,
            "error": m.error or measurement_error(assessment),
            "slo": slo,
        }
    )
    return Assembled(result, assessment)


def _energy(loadgen: LoadgenResult, requests: RequestStats | None) -> Energy | None:
    """The window's energy from the GPU samples the load generator took around it."""
    telemetry = loadgen.telemetry
    start, end = loadgen.started_at, loadgen.ended_at
    if telemetry is None or not telemetry.samples or start is None or end is None:
        return None
    out = requests.total_output_tokens if requests else loadgen.output_tokens
    total = out + (requests.total_prompt_tokens if requests else 0)
    energy = window_energy(telemetry.samples, start, end, output_tokens=out, total_tokens=total)
    more = _energy_caveats(loadgen, requests)
    return dataclasses.replace(energy, problems=(*energy.problems, *more)) if more else energy


def _energy_caveats(loadgen: LoadgenResult, requests: RequestStats | None) -> list[str]:
    """What the samples cannot show but makes the energy per token overstate the engine's:
    another process computing on its GPUs, and failed requests' work (their tokens are not
    counted; ``max_failed_fraction`` let the measurement stand)."""
    foreign = loadgen.telemetry.foreign_pids if loadgen.telemetry else None
    out = [
        f"GPU {gpu}: another process than the engine's (pid {', '.join(map(str, pids))}) "
        "computed on it around the window: its energy is counted too"
        for gpu, pids in sorted((foreign or {}).items())
    ]
    failed = requests.failed if requests else loadgen.failed
    if failed:
        sent = failed + (requests.completed if requests else loadgen.completed)
        out.append(
            f"{failed} of {sent} requests failed: the energy includes their work, the "
            "tokens per joule only the completed requests' tokens (J/token is high)"
        )
    return out


def _telemetry(loadgen: LoadgenResult, energy: Energy | None) -> list[RunWarning]:
    """What kept the energy figure from being whole: it informs, it fails nothing."""
    telemetry = loadgen.telemetry
    if telemetry is not None and telemetry.source is None:
        return [
            RunWarning(
                kind="telemetry_missing",
                message=f"no GPU telemetry: {telemetry.error}",
                details={"error": telemetry.error},
            )
        ]
    if energy is not None and energy.problems:
        return [
            RunWarning(
                kind="telemetry_unsound",
                message="energy figures flagged: " + "; ".join(energy.problems),
                details={"problems": list(energy.problems)},
            )
        ]
    return []


def _client_acceptance(
    m: Measured, requests: RequestStats | None, notes: list[str]
) -> float | None:
    """Tokens per chunk, the client's acceptance figure, unless chunks show the engine merged
    decode steps (then it overstates: left out, with a note saying why)."""
    if requests is None or requests.tokens_per_chunk is None:
        return None
    drafts = m.settings.speculative.num_draft_tokens
    merged = merged_chunks(m.records, drafts) if drafts is not None else 0
    if drafts is not None and merged:
        notes.append(
            f"client: {merged} chunk(s) carried more than {drafts + 1} tokens, more than one "
            "decode step makes: the engine's server merged steps (it fell behind), so tokens "
            "per chunk would overstate the acceptance length and is left out"
        )
        return None
    return requests.tokens_per_chunk


def failure_kind(record: RequestRecord) -> str:
    """Why a measured request failed, as the policy counts it (records written before failure
    kinds existed get the kind their status and error imply)."""
    if record.failure is not None:
        return record.failure.value
    if record.status is not None and record.status != 200:
        return "http_status"
    return "connection" if record.error else "no_output"


def evidence(
    loadgen: LoadgenResult,
    records: Sequence[RequestRecord],
    *,
    saturation: Sequence[RunWarning] = (),
    lost: OrchError | None = None,
    error: RunError | None = None,
) -> Evidence:
    """What bears on the verdict, from the load generator's account and the records received."""
    failed = [r for r in records if not r.warmup and not r.ok]
    measured = sum(1 for r in records if not r.warmup)
    truncated = [lost.message] if lost is not None else []
    if measured < loadgen.requests:
        truncated.append(
            f"{loadgen.requests - measured} of the {loadgen.requests} measured requests' records "
            "never arrived: the figures would miss them"
        )
    return Evidence(
        requests=loadgen.requests,
        completed=loadgen.completed,
        failed=loadgen.failed,
        failures=Counter(failure_kind(r) for r in failed),
        errors=Counter(r.error or f"HTTP {r.status}" for r in failed),
        token_count_mismatches=loadgen.token_count_mismatches,
        saturation=saturation,
        truncated=truncated,
        engine_died=error.message if error is not None and error.type == "EngineError" else None,
    )


def measurement_error(assessment: Assessment) -> RunError | None:
    """The result's ``error`` when the policy failed the measurement (None: it stands).

    ``type`` says the measurement was judged failed, ``kind`` which finding failed it first;
    when no request completed, ``cause`` is the engine failure table's ``all_requests_failed``.
    """
    if not assessment.failed:
        return None
    none = assessment.none_completed
    return RunError(
        type=MEASUREMENT_FAILED,
        kind=assessment.reasons[0].kind,
        message=assessment.message(),
        hint=describe(REQUESTS_FAILED)[1] if none else FAILED_HINT,
        cause=REQUESTS_FAILED if none else None,
    )


def _cap_bound(loadgen: LoadgenResult, achieved: float | None) -> list[RunWarning]:
    """An open loop whose concurrency cap held requests back: the server, not the client, set
    the pace, so the load it measured is the cap's, not the schedule's. Not a failure (the
    figures are right for the load that ran, and the client's own lateness is judged apart,
    from when each slot freed), but said, with the rate that was sent."""
    if loadgen.mode != "open" or not loadgen.cap_waits:
        return []
    sent = f"; {achieved:.2f} req/s were sent" if achieved is not None else ""
    return [
        RunWarning(
            kind="cap_bound",
            message=f"{loadgen.cap_waits} of {loadgen.requests} requests waited for one of the "
            f"{loadgen.concurrency} slots of the concurrency cap: the server's pace, not the "
            f"schedule of {loadgen.request_rate:g} req/s, set the load{sent}; raise the cap "
            "to offer the scheduled rate",
            details={
                "cap_waits": loadgen.cap_waits,
                "concurrency": loadgen.concurrency,
                "request_rate": loadgen.request_rate,
                "achieved_rate": achieved,
            },
        )
    ]


def _log_warnings(
    m: Measured,
    log: EngineLog,
    loadgen: LoadgenResult,
    requests: RequestStats | None,
    notes: list[str],
) -> list[RunWarning]:
    """What the engine's log could not say about this window, and why (``notes`` gets the
    acceptance note too: the result's acceptance explains its missing figure)."""
    out: list[RunWarning] = []
    engine, spec = m.settings.engine, m.settings.speculative
    if log.window is None:  # no "measure" phase arrived: the log figures include warm-up
        out.append(
            RunWarning(
                kind="log_window_unmarked",
                message="the load generator never marked its measured window: log figures "
                "were read over the whole server log, warm-up included",
            )
        )
    if not spec.enabled or engine not in ENGINES:
        return out
    figures = log.figures
    completed = requests.completed if requests else None
    if figures is None or figures.acceptance_length is None:
        missing = log_missing_note(
            engine,
            window_s=loadgen.duration_s,
            env=log.env,
            argv=log.argv,
            steps=decode_steps(m.records),
            completed=completed,
        )
        notes.append(missing)
        out.append(RunWarning(kind="acceptance_log_missing", message=missing))
        return out
    short = short_window_warning(
        engine, window_s=loadgen.duration_s, env=log.env, argv=log.argv, completed=completed
    )
    if short is not None:
        out.append(RunWarning(kind="short_log_window", message=short))
    return out


# ---------------------------------------------------------------- orch run's measurements


def build_result(
    job: RunJob,
    *,
    state: LiveState,
    loadgen: LoadgenResult | None,
    error: RunError | None,
    times: RunTimes,
    measurement: Measurement | None = None,
    lost: OrchError | None = None,
    warnings: Sequence[RunWarning] = (),
) -> RunResult:
    """A run's measurement as ``assemble`` takes it, from what was collected while it went on
    (secrets not yet masked); ``measurement`` defaults to the run's first."""
    m = measurement or planned(job.plan.run)[0]
    run, host = m.run, job.plan.host
    base = safe_name(job.run_dir.name)
    settings = run_settings(
        run, gpu_name=_gpu_name(job), gpu_ids=job.gpu_ids, prompts_sha256=job.prompts.sha256
    )
    whole = state.follower.summary() if state.follower.engine else None
    window = state.window.summary() if state.window and state.window.engine else None
    return assemble(
        Measured(
            run=RunIdentity(
                name=run.name,
                key=job.key,
                host=host.name,
                folder=f"{base}/{m.folder}" if m.folder else base,
                order=job.order,
                run_id=job.run_id,
            ),
            settings=settings,
            times=times,
            point=m.point,
            records=state.records,
            loadgen=loadgen,
            slo=run.workload.slo,
            error=error,
            lost=lost,
            log=EngineLog(
                window=window if state.window is not None else None,
                whole=whole,
                env=job.plan.env,
                argv=job.plan.argv,
            ),
            warnings=warnings,
            roofline=roofline_inputs(
                job,
                gpu_name=settings.gpu_name,
                gpu_count=settings.gpu_count,
                pipeline=settings.parallelism.pipeline if settings.parallelism else 1,
                replicas=settings.parallelism.data if settings.parallelism else 1,
            ),
            causes=lambda: causes_for_run(
                run, list(job.doctor), drafter=job.drafter, env=job.plan.env
            ),
            engine_changes=[
                finding_record(f)
                for f in engine_silent_changes(state.head_lines, requested_settings(run))
            ],
            doctor=[finding_record(f) for f in problems(job.doctor)],
            provenance=Provenance(
                orch_version=__version__,
                engine_version=_engine_version(job),
                log_lines=_pair(log_lines(state)),
            ),
        )
    ).result


def _engine_version(job: RunJob) -> str | None:
    return Manifest.model_validate(job.manifest).engine_version


def _gpu_name(job: RunJob) -> str | None:
    """The host's GPU model as its driver names it (from the facts the probe read); ``CPU``
    on a CPU host (``gpus: none``), whatever GPU its nvidia-smi may show."""
    if job.plan.host.cpu_only:
        return CPU_DEVICE
    facts = Manifest.model_validate(job.manifest).host_facts
    return facts.gpus[0].name if facts and facts.gpus else None


def _pair(lines: list[int] | None) -> tuple[int, int] | None:
    return (lines[0], lines[1]) if lines else None
