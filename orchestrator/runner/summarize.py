"""A run's ``summary.json``: request statistics, acceptance three ways, collapse verdict, times,
and warnings about the client itself.

Pure apart from reading the job's fields: everything it needs was collected while the run went
on (request records, the log followers, the two /metrics scrapes of the load generator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from orchestrator.doctor import detect_collapse, engine_silent_changes
from orchestrator.doctor.collapse import flag_value
from orchestrator.doctor.findings import problems
from orchestrator.doctor.runspec import causes_for_run
from orchestrator.loadgen.records import LoadgenResult, RequestRecord
from orchestrator.metrics.acceptance import combine_acceptance
from orchestrator.metrics.prom import Scrape, SpecDelta, sglang_spec_delta, vllm_spec_delta
from orchestrator.metrics.summary import summarize
from orchestrator.results.store import safe_name

if TYPE_CHECKING:
    from orchestrator.runner.execute import LiveState, RunJob

SPEC_DELTAS = {"vllm": vllm_spec_delta, "sglang": sglang_spec_delta}
VLLM_STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL's default
SGLANG_DECODE_LOG_INTERVAL = 40  # --decode-log-interval's default
# A saturated client sets the pace instead of the server (issue 4: make it visible).
LOOP_DELAY_WARN_MS = 20.0  # p99 of how late the load generator's 20 ms ticker woke up
SEND_LAG_WARN_MS = 100.0  # p99 of how late requests were sent versus due
RATE_SHORTFALL = 0.8  # open loop: requests sent at under 80% of the scheduled rate


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class RunTimes:
    """When a run's phases happened (epoch seconds; None for a phase it never reached)."""

    started_at: float
    ended_at: float
    ready_at: float | None = None  # the server answered /health and /v1/models
    measure_started_at: float | None = None  # first measured request sent
    measure_ended_at: float | None = None  # last measured response ended

    def to_json(self) -> dict[str, Any]:
        def span(a: float | None, b: float | None) -> float | None:
            return round(b - a, 3) if a is not None and b is not None else None

        return {
            "started_at": iso_time(self.started_at),
            "ready_at": iso_time(self.ready_at) if self.ready_at is not None else None,
            "measure_started_at": iso_time(self.measure_started_at)
            if self.measure_started_at is not None else None,
            "measure_ended_at": iso_time(self.measure_ended_at)
            if self.measure_ended_at is not None else None,
            "ended_at": iso_time(self.ended_at),
            "duration_s": span(self.started_at, self.ended_at),
            "server_start_s": span(self.started_at, self.ready_at),
            "measure_s": span(self.measure_started_at, self.measure_ended_at),
        }


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def prometheus_delta(engine: str, loadgen: LoadgenResult) -> tuple[SpecDelta | None, str | None]:
    if not (loadgen.metrics_before and loadgen.metrics_after):
        return None, "no /metrics scrape around the window (is --enable-metrics on?)"
    before = Scrape.parse(loadgen.metrics_before)
    after = Scrape.parse(loadgen.metrics_after)
    delta = SPEC_DELTAS[engine](before, after)
    return delta, delta.note


def requested_settings(run: Any) -> dict[str, Any]:
    """What the run asked of the engine, to spot settings the engine silently changed."""
    args = [str(a) for a in run.extra_args]
    page = flag_value(args, "--page-size")
    return {
        "attention_backend": flag_value(args, "--attention-backend"),
        "page_size": int(page) if page and page.isdigit() else None,
    }


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


def log_missing_note(engine: str, *, window_s: float | None, env: Mapping[str, str],
                     argv: Sequence[str]) -> str:
    """Why the log gave no acceptance figure, and what to change so that it does.

    Engines print their spec-decode stats once per interval; a measured window shorter than
    that (or one that ended before the next line) holds no such line at all.
    """
    window = f"the measured window ({window_s:.1f} s)" if window_s else "the measured window"
    if engine == "sglang":
        value = flag_value(list(argv), "--decode-log-interval")
        steps = value or str(SGLANG_DECODE_LOG_INTERVAL)
        return (f"log: no Decode batch line with an accept len fell in {window}: SGLang prints "
                f"one every {steps} decode steps (--decode-log-interval); lower it in the run's "
                "extra_args, or measure longer (more num_prompts or duration_s)")
    interval = env.get("VLLM_LOG_STATS_INTERVAL") or f"{VLLM_STATS_INTERVAL_S:g}"
    return (f"log: no SpecDecoding metrics line fell in {window}: vLLM prints one every "
            f"VLLM_LOG_STATS_INTERVAL = {interval} s; set it lower in the run's env (e.g. "
            "env: {VLLM_LOG_STATS_INTERVAL: \"1\"}), or measure longer (more num_prompts or "
            "duration_s)")


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


def client_warnings(*, client_lag: Mapping[str, Any] | None, request_rate: float | None,
                    achieved_rate: float | None, scheduled_rate: float | None) -> list[str]:
    """Signs that the load generator, not the server, set the pace (so latencies are inflated)."""
    lag = client_lag or {}
    out = []
    loop = (lag.get("loop_delay_ms") or {}).get("p99")
    if loop is not None and loop > LOOP_DELAY_WARN_MS:
        out.append(f"client saturated: event-loop delay p99 {loop:.1f} ms > {LOOP_DELAY_WARN_MS:g} "
                   "ms: the load generator's host is busy (CPU-bound client, or the engine "
                   "starving it); latencies include client time")
    send = (lag.get("send_lag_ms") or {}).get("p99")
    if send is not None and send > SEND_LAG_WARN_MS:
        out.append(f"client saturated: send lag p99 {send:.1f} ms > {SEND_LAG_WARN_MS:g} ms: "
                   "requests left later than due")
    if (request_rate is not None and achieved_rate is not None and scheduled_rate is not None
            and achieved_rate < RATE_SHORTFALL * scheduled_rate):
        out.append(f"client saturated: sent {achieved_rate:.2f} req/s against a schedule of "
                   f"{scheduled_rate:.2f} req/s (request_rate {request_rate:g}): the open loop "
                   "fell behind; lower request_rate or raise the concurrency cap")
    return out


def build_summary(
    job: RunJob,
    *,
    state: LiveState,
    loadgen: LoadgenResult | None,
    error: dict[str, Any] | None,
    times: RunTimes,
) -> dict[str, Any]:
    run, host = job.plan.run, job.plan.host
    engine = str(_value(run.engine))
    method = str(_value(run.speculative.method))
    summary: dict[str, Any] = {
        "run": run.name,
        "host": host.name,
        "folder": safe_name(job.run_dir.name),
        "order": job.order,
        "run_id": job.run_id,
        "engine": engine,
        "model": run.model,
        "method": method,
        "draft_model": run.speculative.draft_model,
        "num_draft_tokens": run.speculative.num_draft_tokens,
        "started_at": iso_time(times.started_at),
        "ended_at": iso_time(times.ended_at),
        "times": times.to_json(),
        "error": error,
        "requests": None,
        "acceptance": None,
        "engine_metrics": None,
        "loadgen": None,
        "collapse": None,
        "engine_changes": [],
        "doctor": [f.to_json() for f in problems(job.doctor)],
        "warnings": [],
    }
    if state.records:
        window = loadgen.duration_s if loadgen else None
        lag = (loadgen.client_lag or {}).get("loop_delay_ms") if loadgen else None
        summary["requests"] = summarize(state.records, window_s=window, loop_delay_ms=lag).to_dict()
    whole_log = state.follower.summary() if state.follower.engine else None
    window_log = state.window.summary() if state.window and state.window.engine else None
    summary["engine_metrics"] = {
        "generation_throughput_mean": (window_log or whole_log).mean_generation_throughput
        if (window_log or whole_log) else None,
        "log_events": whole_log.events if whole_log else {},
        "malformed_log_lines": whole_log.malformed if whole_log else 0,
    }
    summary["engine_changes"] = [
        f.to_json() for f in engine_silent_changes(state.head_lines, requested_settings(run))
    ]
    if loadgen is None:
        return summary
    achieved, scheduled = send_rates(state.records) if loadgen.mode == "open" else (None, None)
    summary["loadgen"] = {**{k: v for k, v in loadgen.to_json().items()
                             if k not in ("metrics_before", "metrics_after")},
                          "achieved_request_rate": achieved, "scheduled_request_rate": scheduled}
    summary["warnings"] = client_warnings(
        client_lag=(summary["requests"] or {}).get("client_lag"), request_rate=loadgen.request_rate,
        achieved_rate=achieved, scheduled_rate=scheduled)
    prom, note = prometheus_delta(engine, loadgen)
    speculative = method != "none"
    log_src = window_log or whole_log
    notes = [note] if note else []
    if speculative and (log_src is None or log_src.acceptance_length is None):
        notes.append(log_missing_note(engine, window_s=loadgen.duration_s, env=job.plan.env,
                                      argv=job.plan.argv))
    acc = combine_acceptance(
        prometheus=prom.acceptance_length if prom else None,
        log=log_src.acceptance_length if log_src else None,
        client=(summary["requests"] or {}).get("tokens_per_chunk"),
        per_position_prometheus=(prom.per_position or None) if prom else None,
        per_position_log=log_src.per_position_acceptance if log_src else None,
        speculative=speculative,
        notes=notes,
    )
    summary["acceptance"] = {**acc.to_dict(), "log_lines": log_lines(state),
                             "prometheus_delta": prom.to_dict() if prom else None}
    collapse = detect_collapse(method=method, num_draft_tokens=run.speculative.num_draft_tokens,
                               acceptance_length=acc.length, per_position=acc.per_position)
    if collapse is not None:
        causes = causes_for_run(run, list(job.doctor), drafter=job.drafter, env=job.plan.env)
        summary["collapse"] = {
            **collapse.to_json(),
            "findings": [f.to_json() for f in problems(job.doctor)],
            "likely_causes": [c.to_json() for c in causes],
        }
    return summary
