"""A run's % of roofline: what it needs before its load starts (the model's decode shape, from
the target's config.json the doctor read on the host, and its GPUs' memory bandwidth), and the
figure from a measurement's request statistics (``metrics.roofline`` has the formula)."""

from __future__ import annotations

from pydantic import JsonValue

from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.engines import engine_for
from orchestrator.metrics.roofline import (
    ROOFLINE_MAX_PCT,
    RooflineInputs,
    RooflinePoint,
    decode_shape,
    roofline_point,
    table_bandwidth,
)
from orchestrator.metrics.summary import RequestStats
from orchestrator.results.validity import RunWarning
from orchestrator.runner.state import RunJob


def roofline_inputs(
    job: RunJob,
    *,
    gpu_name: str | None,
    gpu_count: int | None,
    pipeline: int = 1,
    replicas: int = 1,
) -> RooflineInputs | None:
    """None on a CPU host, without the model's config, for a pipeline-parallel server (its
    stages read in turn), or for a GPU neither hosts.yaml nor the table gives a bandwidth for
    (the result then has no roofline, rather than a guess)."""
    host, run = job.plan.host, job.plan.run
    target: ModelConfig | None = job.target
    if host.cpu_only or target is None or not gpu_count or pipeline > 1:
        return None
    shape = decode_shape(
        target.text, kv_cache_dtype=engine_for(run).run_flag(run, "--kv-cache-dtype")
    )
    if shape is None:
        return None
    declared = host.gpus.bandwidth_gb_s if host.gpus else None
    if declared:
        return RooflineInputs(shape, gpu_count, declared, "hosts.yaml", replicas)
    found = table_bandwidth(gpu_name or (host.gpus.model if host.gpus else None))
    if found is None:
        return None
    bandwidth, key = found
    return RooflineInputs(shape, gpu_count, bandwidth, f"table: {key}", replicas)


def roofline_figure(
    inputs: RooflineInputs | None, requests: RequestStats | None
) -> tuple[RooflinePoint | None, list[RunWarning]]:
    """The decode's % of the memory-bandwidth roofline (``metrics.roofline``); a figure over
    100% is physically impossible, so it is not given: a warning says what to check."""
    if inputs is None or requests is None:
        return None, []
    ttft, e2el = requests.ttft_ms.mean, requests.e2el_ms.mean
    point = roofline_point(
        inputs,
        step_ms=requests.itl_chunk_ms.median,
        completed=requests.completed,
        duration_s=requests.duration_s,
        decode_ms_mean=e2el - ttft if e2el is not None and ttft is not None else None,
        prompt_tokens=requests.total_prompt_tokens,
        output_tokens=requests.total_output_tokens,
    )
    if point is None or point.pct <= ROOFLINE_MAX_PCT:
        return point, []
    message = (
        f"decode steps would have read {point.achieved_gb_s:.0f} GB/s, {point.pct:.0f}% of the "
        f"GPUs' {point.peak_gb_s:.0f} GB/s ({point.bandwidth_source}): the model's size or "
        "dtype read from its config.json, or that bandwidth, is wrong; no % of roofline is "
        "given (set the host's `gpus: {bandwidth_gb_s: ...}` in hosts.yaml if it is the GPU)"
    )
    details: dict[str, JsonValue] = {
        "pct": round(point.pct, 1),
        "achieved_gb_s": round(point.achieved_gb_s, 1),
        "peak_gb_s": point.peak_gb_s,
        "bytes_per_step": point.bytes_per_step,
        "step_ms": point.step_ms,
        "bandwidth_source": point.bandwidth_source,
    }
    return None, [RunWarning(kind="roofline_implausible", message=message, details=details)]
