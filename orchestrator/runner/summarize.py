"""The parts of a measurement's result (``RunResult``, written as its ``summary.json``):
the settings it records, acceptance three ways, the collapse verdict, the client's saturation
warnings, the log's notes. ``runner/assemble.py`` puts them together, for ``orch run`` and
``orch loadgen`` alike.

Pure: everything they need was collected while the run went on (request records, the log
followers, the two /metrics scrapes of the load generator).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import pairwise

from orchestrator.config.playbook import RunSpec, WorkloadSpec
from orchestrator.doctor import RequestedSettings
from orchestrator.doctor.collapse import Cause, Collapse
from orchestrator.doctor.findings import Finding
from orchestrator.engines import get_engine
from orchestrator.loadgen.records import LagStats as WireLagStats
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.acceptance import Acceptance
from orchestrator.metrics.prom import Scrape, SpecDelta
from orchestrator.metrics.summary import ClientLag, LagStats
from orchestrator.results.model import (
    LoadgenInfo,
    ParallelSettings,
    RunSettings,
    RunWarning,
    SpeculativeSettings,
    WorkloadSettings,
)
from orchestrator.runner.state import LiveState

# A saturated client sets the pace instead of the server (issue 4: make it visible).
# Calibrated against the simulator's record of every request (benchmarks/saturation.py).
# p99 of how late the load generator's 20 ms ticker woke up: judged only where the loop's own
# time stamps the chunks (``arrival_clock`` not "kernel"); with kernel stamps a late loop moves
# a time only by reading chunks together, which the shared reads below count directly
LOOP_DELAY_WARN_MS = 15.0
# median, not p99, of how late requests were sent versus due: a closed loop's wave of streams
# ending at once is sent one after another, a tail that is no saturation and moves no timing
SEND_LAG_WARN_MS = 50.0
SHARED_READ_WARN_PCT = 20.0  # % of token chunks read together with the one before them
FIRST_READ_SHARED_WARN_PCT = 10.0  # % of requests whose first chunk was read with the second
RATE_SHORTFALL = 0.8  # open loop: requests sent at under 80% of the scheduled rate
# a window of two log intervals surely holds a stats line, whatever the estimate's error
LOG_INTERVALS_WANTED = 2


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def prometheus_delta(engine: str, loadgen: LoadgenResult) -> tuple[SpecDelta | None, str | None]:
    if not (loadgen.metrics_before and loadgen.metrics_after):
        return None, "no /metrics scrape around the window (is --enable-metrics on?)"
    before = Scrape.parse(loadgen.metrics_before)
    after = Scrape.parse(loadgen.metrics_after)
    delta = get_engine(engine).spec_delta(before, after)
    return delta, delta.note


def requested_settings(run: RunSpec) -> RequestedSettings:
    """What the run asked of the engine, to spot settings the engine silently changed."""
    engine = get_engine(run.engine)
    page = engine.run_flag(run, "--page-size")
    return RequestedSettings(
        attention_backend=engine.run_flag(run, "--attention-backend"),
        page_size=int(page) if page and page.isdigit() else None,
    )


def log_lines(state: LiveState) -> list[int] | None:
    """The server.log lines (first, last) the log's acceptance figure was read from.

    Engines log stats per interval (vLLM every VLLM_LOG_STATS_INTERVAL seconds, SGLang every
    --decode-log-interval steps), so the log figure covers whole intervals: the one under way
    when the window opened (warm-up included) up to the last one printed before the server
    stopped. Saying which lines lets anyone recompute or audit it against the log itself.
    """
    if state.window is not None and state.window_first_line is not None:
        first, count = state.window_first_line, state.window.line_no
    else:
        first, count = 1, state.follower.line_no
    return [first, first + count - 1] if count else None


@dataclass(frozen=True)
class DecodeSteps:
    """The engine's decode steps in the measured window, as the client's stream shows them."""

    count: float
    step_s: float  # one step: the mean gap between a request's chunks


def decode_steps(records: Sequence[RequestRecord]) -> DecodeSteps | None:
    """How many decode steps the engine ran while the measured requests were decoding.

    The engine streams every running request one chunk per decode step (SGLang's default
    --stream-interval 1; one verify step under speculative decoding), so the mean gap between
    chunks is the engine's step, and the time at least one request was decoding, divided by it,
    the steps it ran. Prefill passes lengthen gaps, so the count errs low, never high.
    """
    spans: list[tuple[float, float]] = []
    gaps: list[float] = []
    for r in records:
        if r.warmup or not r.ok or len(r.chunks) < 2:
            continue
        spans.append((r.start + r.chunks[0].t, r.start + r.chunks[-1].t))
        gaps += [b.t - a.t for a, b in pairwise(r.chunks)]
    step = math.fsum(gaps) / len(gaps) if gaps else 0.0
    if step <= 0:
        return None
    busy, covered = 0.0, -math.inf
    for first, last in sorted(spans):
        busy += max(0.0, last - max(first, covered))
        covered = max(covered, last)
    return DecodeSteps(busy / step, step)


def log_missing_note(
    engine: str,
    *,
    window_s: float | None,
    env: Mapping[str, str],
    argv: Sequence[str],
    steps: DecodeSteps | None = None,
    completed: int | None = None,
) -> str:
    """Why the log gave no acceptance figure, and what to change so that it does.

    Engines print their spec-decode stats once per interval; a measured window shorter than
    that (or one that ended before the next line) holds no such line at all. vLLM's interval
    is an env variable a run may set; SGLang's is a flag orch passes itself (and refuses in
    extra_args), so there the only remedy is a longer window: ``steps`` (``decode_steps``) and
    ``completed`` (measured requests) size it.
    """
    window = f"the measured window ({window_s:.1f} s)" if window_s else "the measured window"
    found = get_engine(engine)
    stats = found.stats_interval
    interval = found.stats_interval_in_effect(env=env, argv=argv)
    if stats.source == "flag":  # orch's own flag: only a longer window helps
        head = (
            f"log: no {stats.line} fell in {window}: {found.display_name} prints one every "
            f"{interval} {stats.unit} ({stats.setting}: orch sets it, a run cannot)"
        )
        return _longer_window_note(
            head, interval, window_s=window_s, steps=steps, completed=completed
        )
    return (
        f"log: no {stats.line} fell in {window}: {found.display_name} prints one every "
        f"{stats.setting} = {interval} {stats.unit}; set it lower in the run's env (e.g. "
        f'env: {{{stats.setting}: "1"}}), or measure longer'
        + _enough_requests(interval, window_s=window_s, completed=completed)
    )


def _enough_requests(interval: str, *, window_s: float | None, completed: int | None) -> str:
    """`` (num_prompts N or duration_s S at the measured rate)``: a window of
    ``LOG_INTERVALS_WANTED`` stats intervals, sized from this run's own request rate."""
    try:
        need_s = LOG_INTERVALS_WANTED * float(interval)
    except ValueError:
        need_s = 0.0
    if not (window_s and completed and need_s > 0):
        return " (more num_prompts or duration_s)"
    rate = completed / window_s
    return (
        f": at the measured {rate:.2f} requests/s, num_prompts {_ceil(rate * need_s)} (or "
        f"duration_s {_ceil(need_s)}) would hold {LOG_INTERVALS_WANTED} intervals"
    )


def short_window_warning(
    engine: str,
    *,
    window_s: float | None,
    env: Mapping[str, str],
    argv: Sequence[str],
    completed: int | None,
) -> str | None:
    """A warning when the measured window is shorter than the engine's stats interval (in
    seconds): the log's acceptance figure, whole intervals, then mostly covers time outside
    the window (warm-up, idle), or is missing altogether."""
    stats = get_engine(engine).stats_interval
    if stats.unit != "s" or not window_s:
        return None
    interval = get_engine(engine).stats_interval_in_effect(env=env, argv=argv)
    try:
        seconds = float(interval)
    except ValueError:
        return None
    if window_s >= seconds:
        return None
    return (
        f"short measuring window: {window_s:.1f} s is shorter than {stats.setting} = "
        f"{interval} s, so the log's acceptance figure covers mostly time outside it; measure "
        "longer" + _enough_requests(interval, window_s=window_s, completed=completed)
    )


def _longer_window_note(
    head: str,
    interval: str,
    *,
    window_s: float | None,
    steps: DecodeSteps | None,
    completed: int | None,
) -> str:
    """An interval in decode steps that a run cannot change: how much longer to measure."""
    try:
        need = LOG_INTERVALS_WANTED * float(interval)
    except ValueError:
        need = 0.0
    if steps is None or steps.count < 1 or need <= 0:
        return head + "; measure longer (more num_prompts or duration_s)"
    held = (
        f"the window held about {steps.count:.0f} decode steps ({steps.step_s * 1000:.1f} ms each)"
    )
    if steps.count >= need:
        return head + f"; {held}, enough for a line: check that server.log holds them"
    factor = need / steps.count
    longer = [
        f"num_prompts {_ceil(completed * factor)}" if completed else "",
        f"duration_s {_ceil(window_s * factor)}" if window_s else "",
    ]
    example = " or ".join(x for x in longer if x)
    return (
        head + f"; {held}: measure at least {need:g} steps, {factor:.1f}x longer at this "
        f"load" + (f" ({example})" if example else "")
    )


def _ceil(x: float) -> int:
    """Round up, but not for float noise: 8.0000000001 s of window is 8 s."""
    return math.ceil(round(x, 6))


def send_rates(records: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    """(achieved, scheduled) request rates of the measured requests, in requests/s.

    Achieved: from when they were really sent; scheduled: from when they were due. Both come
    from the same random arrival draw, so a client that keeps up has them equal whatever the
    draw, and a shortfall is the client's (or the concurrency cap's) doing, not chance.
    """
    pairs = [(r.start, r.due) for r in records if not r.warmup and r.due is not None]
    if len(pairs) < 2:
        return None, None
    starts, dues = [p[0] for p in pairs], [p[1] for p in pairs]
    sent, due = max(starts) - min(starts), max(dues) - min(dues)
    n = len(pairs) - 1
    return (n / sent if sent > 0 else None), (n / due if due > 0 else None)


def client_warnings(
    *,
    client_lag: ClientLag | None,
    request_rate: float | None,
    achieved_rate: float | None,
    scheduled_rate: float | None,
    arrival_clock: str | None = None,
) -> list[RunWarning]:
    """Signs that the load generator, not the server, set the pace (so latencies are inflated):
    ``client_saturated`` warnings, each of which fails the measurement (``results.validity``).

    A loop later than a stream's gap between chunks reads several of its chunks at once, and
    they share the time of the last: the shared reads say how often that moved a time (any
    chunk: the ITL; a request's first: its TTFT). Where the kernel stamps every read
    (``arrival_clock`` "kernel") that is the only way a late loop moves a time, so its delay is
    judged only where the loop stamps the chunks itself. How late a busy client sends is the
    send lag (a closed loop's request is due when the previous one's response ended).
    """
    lag = client_lag or ClientLag()
    out: list[RunWarning] = []
    loop = lag.loop_delay_ms.p99 if lag.loop_delay_ms else None
    if arrival_clock != "kernel" and loop is not None and loop > LOOP_DELAY_WARN_MS:
        out.append(
            _saturated(
                f"client saturated: event-loop delay p99 {loop:.1f} ms > {LOOP_DELAY_WARN_MS:g} "
                "ms: the load generator's host is busy (CPU-bound client, or the engine "
                "starving it); latencies include client time",
                signal="loop_delay_p99_ms",
                value=loop,
                limit=LOOP_DELAY_WARN_MS,
            )
        )
    shared = lag.shared_read_pct
    if shared is not None and shared > SHARED_READ_WARN_PCT:
        out.append(
            _saturated(
                f"client saturated: {shared:.1f}% of token chunks were read together with the "
                f"one before them (> {SHARED_READ_WARN_PCT:g}%): the client read its streams "
                "later than the server sent them, so their times (TTFT, ITL) are wrong",
                signal="shared_read_pct",
                value=shared,
                limit=SHARED_READ_WARN_PCT,
            )
        )
    first = lag.first_read_shared_pct
    if first is not None and first > FIRST_READ_SHARED_WARN_PCT:
        out.append(
            _saturated(
                f"client saturated: {first:.1f}% of requests had their first token chunk read "
                f"together with the second (> {FIRST_READ_SHARED_WARN_PCT:g}%): their TTFT is "
                "a decode step late",
                signal="first_read_shared_pct",
                value=first,
                limit=FIRST_READ_SHARED_WARN_PCT,
            )
        )
    send = lag.send_lag_ms.p50
    if send is not None and send > SEND_LAG_WARN_MS:
        out.append(
            _saturated(
                f"client saturated: send lag median {send:.1f} ms > {SEND_LAG_WARN_MS:g} "
                "ms: requests left later than due",
                signal="send_lag_p50_ms",
                value=send,
                limit=SEND_LAG_WARN_MS,
            )
        )
    if (
        request_rate is not None
        and achieved_rate is not None
        and scheduled_rate is not None
        and achieved_rate < RATE_SHORTFALL * scheduled_rate
    ):
        out.append(
            _saturated(
                f"client saturated: sent {achieved_rate:.2f} req/s against a schedule of "
                f"{scheduled_rate:.2f} req/s (request_rate {request_rate:g}): the open loop "
                "fell behind; lower request_rate or raise the concurrency cap",
                signal="achieved_rate_fraction",
                value=achieved_rate / scheduled_rate,
                limit=RATE_SHORTFALL,
            )
        )
    return out


def _saturated(message: str, *, signal: str, value: float, limit: float) -> RunWarning:
    """A ``client_saturated`` warning: which signal passed its limit, and by how much."""
    return RunWarning(
        kind="client_saturated",
        message=message,
        details={"signal": signal, "value": round(value, 3), "limit": limit},
    )


def workload_settings(w: WorkloadSpec, prompts_sha256: str | None = None) -> WorkloadSettings:
    """The workload as a result records it: a run's, and `orch loadgen`'s (``prompts_sha256``:
    the content read, so a rewritten prompt file is never taken for the same workload)."""
    return WorkloadSettings(
        prompts=w.prompts,
        prompts_sha256=prompts_sha256,
        num_prompts=w.num_prompts,
        duration_s=w.duration_s,
        concurrency=w.point_concurrency if w.request_rate is None else w.open_loop_cap,
        request_rate=w.point_rate,
        burstiness=w.burstiness,
        max_tokens=w.max_tokens,
        input_len=w.input_len,
        ignore_eos=w.ignore_eos,
        warmup=w.warmup,
        api=w.api,
        temperature=w.temperature,
        seed=w.seed,
        repeat=w.repeat,
        noisy_ci=w.noisy_ci,
        max_failed_fraction=w.max_failed_fraction,
    )


def run_settings(
    run: RunSpec,
    *,
    gpu_name: str | None = None,
    gpu_ids: list[int] | None = None,
    prompts_sha256: str | None = None,
) -> RunSettings:
    """What the run asked for at one load point (``run``'s workload at that point), as its
    result records it (its manifest.json has the whole spec). Its GPUs are the product of
    its parallel sizes, read from the argv the server gets (``Engine.parallelism``)."""
    sizes = get_engine(run.engine).parallelism(run)
    return RunSettings(
        engine=run.engine,
        model=run.model,
        speculative=SpeculativeSettings(
            method=run.speculative.method,
            draft_model=run.speculative.draft_model,
            num_draft_tokens=run.speculative.num_draft_tokens,
        ),
        tensor_parallel=run.tensor_parallel,
        max_model_len=run.max_model_len,
        workload=workload_settings(run.workload, prompts_sha256),
        gpu_name=gpu_name,
        gpu_count=sizes.gpus,
        parallelism=ParallelSettings.model_validate(sizes.to_json()),
        gpu_ids=gpu_ids,
    )


def finding_record(finding: Finding) -> Finding:
    """A finding as written: its free-form details go through JSON as summary.json always
    wrote them (anything JSON cannot hold as its text)."""
    details = json.loads(json.dumps(finding.details, default=str))
    return dataclasses.replace(finding, details=details)


def lag_stats(lag: WireLagStats | None) -> LagStats | None:
    return None if lag is None else LagStats.model_validate(lag, from_attributes=True)


def loadgen_info(
    loadgen: LoadgenResult, *, achieved: float | None, scheduled: float | None
) -> LoadgenInfo:
    """The wire's LoadgenResult as summary.json keeps it, with the open-loop rates worked out
    here."""
    return LoadgenInfo.of(loadgen, achieved=achieved, scheduled=scheduled)


def acceptance_result(acc: Acceptance, prom: SpecDelta | None) -> Acceptance:
    """The combined acceptance with the counters its Prometheus figure came from."""
    return dataclasses.replace(acc, prometheus_delta=prom)


def collapse_verdict(collapse: Collapse, causes: Sequence[Cause]) -> Collapse:
    return dataclasses.replace(collapse, likely_causes=list(causes))
