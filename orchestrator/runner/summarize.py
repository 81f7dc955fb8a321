"""A run's ``summary.json``: request statistics, acceptance three ways, collapse verdict.

Pure apart from reading the job's fields: everything it needs was collected while the run went
on (request records, the log followers, the two /metrics scrapes of the load generator).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from orchestrator.doctor import detect_collapse, engine_silent_changes
from orchestrator.doctor.collapse import flag_value
from orchestrator.doctor.findings import problems
from orchestrator.doctor.runspec import causes_for_run
from orchestrator.loadgen.records import LoadgenResult
from orchestrator.metrics.acceptance import combine_acceptance
from orchestrator.metrics.prom import Scrape, SpecDelta, sglang_spec_delta, vllm_spec_delta
from orchestrator.metrics.summary import summarize
from orchestrator.results.store import safe_name

if TYPE_CHECKING:
    from orchestrator.runner.execute import LiveState, RunJob

SPEC_DELTAS = {"vllm": vllm_spec_delta, "sglang": sglang_spec_delta}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


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


def build_summary(
    job: RunJob,
    *,
    state: LiveState,
    loadgen: LoadgenResult | None,
    error: dict[str, Any] | None,
    started_at: float,
    ended_at: float,
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
        "started_at": _iso(started_at),
        "ended_at": _iso(ended_at),
        "error": error,
        "requests": None,
        "acceptance": None,
        "engine_metrics": None,
        "loadgen": None,
        "collapse": None,
        "engine_changes": [],
        "doctor": [f.to_json() for f in problems(job.doctor)],
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
    summary["loadgen"] = {k: v for k, v in loadgen.to_json().items()
                          if k not in ("metrics_before", "metrics_after")}
    prom, note = prometheus_delta(engine, loadgen)
    speculative = method != "none"
    log_src = window_log or whole_log
    acc = combine_acceptance(
        prometheus=prom.acceptance_length if prom else None,
        log=log_src.acceptance_length if log_src else None,
        client=(summary["requests"] or {}).get("tokens_per_chunk"),
        per_position_prometheus=(prom.per_position or None) if prom else None,
        per_position_log=log_src.per_position_acceptance if log_src else None,
        speculative=speculative,
        notes=[note] if note else [],
    )
    summary["acceptance"] = {**acc.to_dict(), "log_lines": log_lines(state),
                             "prometheus_delta": prom.to_dict() if prom else None}
    collapse = detect_collapse(method=method, num_draft_tokens=run.speculative.num_draft_tokens,
                               acceptance_length=acc.length, per_position=acc.per_position)
    if collapse is not None:
        causes = causes_for_run(run, list(job.doctor), drafter=job.drafter)
        summary["collapse"] = {
            **collapse.to_json(),
            "findings": [f.to_json() for f in problems(job.doctor)],
            "likely_causes": [c.to_json() for c in causes],
        }
    return summary
