"""The request statistics under the key names of ``vllm bench serve``'s result JSON.

A view of a ``RunResult``, computed from it (never stored apart from it): ``RunResult.to_json``
writes it at the top level of summary.json, so that scripts written for vLLM's files read
orch's, and loading drops and recomputes it. Names, units and definitions follow
``vllm/benchmarks/serve.py``: ITL is per chunk (one per engine step under speculation), ``std``
the population one, times in ms, ``spec_decode_acceptance_rate`` in percent.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from orchestrator.metrics.acceptance import Acceptance
from orchestrator.metrics.summary import RequestStats


# What the view reads of a ``RunResult`` (results/model.py), by attribute: the model imports
# this module to write the view, so the view names the attributes rather than the model.
class _Workload(Protocol):
    @property
    def request_rate(self) -> float | None: ...
    @property
    def burstiness(self) -> float: ...
    @property
    def concurrency(self) -> int | None: ...


class _Speculative(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def num_draft_tokens(self) -> int | None: ...


class _Settings(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def workload(self) -> _Workload | None: ...
    @property
    def speculative(self) -> _Speculative: ...


class Measured(Protocol):
    """A measurement as the view reads it: a ``RunResult``."""

    @property
    def requests(self) -> RequestStats | None: ...
    @property
    def settings(self) -> _Settings: ...
    @property
    def acceptance(self) -> Acceptance | None: ...


class VllmBench(BaseModel):
    """``spec_decode_acceptance_rate`` = 100 (acceptance_length - 1) / num_draft_tokens, which
    is vLLM's 100 accepted / draft_tokens when every draft proposes num_draft_tokens tokens;
    the ``spec_decode_`` counts are vLLM's Prometheus counters over the window (None for
    SGLang). None where orch does not know a figure, where vLLM would write 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str
    num_prompts: int
    request_rate: float | Literal["inf"] | None
    burstiness: float | None
    max_concurrency: int | None
    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p99_itl_ms: float | None
    mean_e2el_ms: float | None
    median_e2el_ms: float | None
    std_e2el_ms: float | None
    p99_e2el_ms: float | None
    spec_decode_acceptance_length: float | None = None
    spec_decode_acceptance_rate: float | None = None
    spec_decode_num_drafts: int | None = None
    spec_decode_draft_tokens: int | None = None
    spec_decode_accepted_tokens: int | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None


VLLM_BENCH_KEYS: tuple[str, ...] = tuple(VllmBench.model_fields)


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def vllm_bench(result: Measured) -> VllmBench | None:
    """The vLLM-bench view of a result that sent requests (None for one that never did)."""
    req, settings = result.requests, result.settings
    if req is None:
        return None
    workload = settings.workload
    rate = workload.request_rate if workload else None
    duration = req.duration_s
    total = req.total_prompt_tokens + req.total_output_tokens
    acc = result.acceptance
    spec = settings.speculative
    length = acc.length if acc is not None and spec.enabled else None
    k = spec.num_draft_tokens
    delta = acc.prometheus_delta if acc is not None and spec.enabled else None
    counters = delta if delta is not None and delta.source == "counter" else None
    ttft, tpot, itl, e2el = req.ttft_ms, req.tpot_ms, req.itl_chunk_ms, req.e2el_ms
    return VllmBench(
        model_id=settings.model,
        num_prompts=req.completed + req.failed,
        request_rate=rate if rate is not None else ("inf" if workload else None),
        burstiness=workload.burstiness if workload else None,
        max_concurrency=workload.concurrency if workload else None,
        duration=duration,
        completed=req.completed,
        failed=req.failed,
        total_input_tokens=req.total_prompt_tokens,
        total_output_tokens=req.total_output_tokens,
        request_throughput=req.request_throughput,
        output_throughput=req.output_throughput,
        total_token_throughput=total / duration if duration > 0 else None,
        mean_ttft_ms=ttft.mean,
        median_ttft_ms=ttft.median,
        std_ttft_ms=ttft.std,
        p99_ttft_ms=ttft.p99,
        mean_tpot_ms=tpot.mean,
        median_tpot_ms=tpot.median,
        std_tpot_ms=tpot.std,
        p99_tpot_ms=tpot.p99,
        mean_itl_ms=itl.mean,
        median_itl_ms=itl.median,
        std_itl_ms=itl.std,
        p99_itl_ms=itl.p99,
        mean_e2el_ms=e2el.mean,
        median_e2el_ms=e2el.median,
        std_e2el_ms=e2el.std,
        p99_e2el_ms=e2el.p99,
        spec_decode_acceptance_length=length,
        spec_decode_acceptance_rate=(
            100.0 * (length - 1.0) / k
            if length is not None and k and math.isfinite(length)
            else None
        ),
        spec_decode_num_drafts=_int(counters.drafts) if counters else None,
        spec_decode_draft_tokens=_int(counters.draft_tokens) if counters else None,
        spec_decode_accepted_tokens=_int(counters.accepted) if counters else None,
        spec_decode_per_position_acceptance_rates=acc.per_position
        if length is not None and acc
        else None,
    )
