"""Service-level targets at a measurement: each target's check, and goodput.

The targets' grammar (``ttft_ms_p99 <= 2000``, which metrics, which way each is bounded) is
``orchestrator.config.slo``'s, where the playbook model validates them.

Goodput follows ``vllm bench serve --goodput``: a latency target, whatever its statistic,
becomes the same bound on every request's own value (``ttft_ms_p99 <= 2000`` -> each request's
TTFT <= 2000 ms), and goodput is the measured requests that completed and met every such bound,
per second of the measured window. Throughput targets bound the run, not a request, so they do
not enter goodput. A request's own values (ms), as ``orchestrator.metrics.summary`` defines them:

- ttft, e2el: the record's;
- tpot: (e2el - ttft) / (output_tokens - 1); 0 for a one-token request (nothing after the first
  token to be late: vLLM counts it as 0 too);
- itl: the request's mean per-token gap, sum of the gaps between token chunks / tokens after the
  first chunk (the request's share of ``itl_token_ms``), known only when per-chunk token counts
  are (``usage``/``tokenizer`` counting); 0 for a one-chunk request.

A completed request whose value for a latency target cannot be known (no per-chunk counts for
an itl target, no output token count for tpot) makes goodput unknown (None), never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.config.slo import SloTarget
from orchestrator.loadgen.records import RequestRecord
from orchestrator.metrics import catalogue
from orchestrator.metrics.summary import PER_CHUNK_COUNTS, RequestStats
from orchestrator.results.model import SloCheck, SloResult

LATENCIES = ("ttft", "tpot", "itl", "e2el")


def figure(target: SloTarget, stats: RequestStats) -> float | None:
    """The measured figure ``target`` bounds; None when the measurement has none (no completed
    request, no per-chunk token counts for itl, an empty window for a throughput)."""
    read = catalogue.get(target.metric).of_requests
    return read(stats) if read is not None else None


def request_value(latency: str, record: RequestRecord) -> float | None:
    """One request's own ``ttft``/``tpot``/``itl``/``e2el`` in ms (see the module docstring);
    None for a failed request or one whose value cannot be known."""
    if latency not in LATENCIES:
        raise ValueError(f"unknown latency {latency!r}: one of {', '.join(LATENCIES)}")
    if not record.ok or record.ttft is None or record.e2el is None:
        return None
    if latency == "ttft":
        return record.ttft * 1000.0
    if latency == "e2el":
        return record.e2el * 1000.0
    span = max(0.0, record.e2el - record.ttft)
    if latency == "tpot":
        n = record.output_tokens
        if n is None:
            return None
        return span / (n - 1) * 1000.0 if n > 1 else 0.0
    chunks = record.chunks
    if len(chunks) < 2:
        return 0.0  # no gap between token chunks to be late
    if record.token_count_method not in PER_CHUNK_COUNTS:
        return None
    tokens = sum(c.tokens for c in chunks[1:])
    gaps = chunks[-1].t - chunks[0].t  # the sum of the gaps between consecutive chunks
    return gaps / tokens * 1000.0 if tokens > 0 else None


def _meets_all(bounds: Sequence[tuple[str, float]], record: RequestRecord) -> bool | None:
    """Whether a completed request meets every per-request bound; None when one is unknown."""
    for latency, bound in bounds:
        value = request_value(latency, record)
        if value is None:
            return None
        if value > bound:
            return False
    return True


def _goodput(
    targets: Sequence[SloTarget], records: Sequence[RequestRecord], window_s: float
) -> tuple[float | None, float | None]:
    """(goodput req/s, fraction of the measured requests); None where it cannot be known."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return None, None
    bounds = [(t.latency, t.bound) for t in targets if t.latency is not None]
    good = 0
    for record in measured:
        if not record.ok:
            continue  # a failed request never meets a target
        meets = _meets_all(bounds, record)
        if meets is None:
            return None, None
        if meets:
            good += 1
    goodput = good / window_s if window_s > 0 else None
    return goodput, good / len(measured)


def evaluate(
    targets: Sequence[SloTarget],
    stats: RequestStats | None,
    records: Sequence[RequestRecord],
    window_s: float,
) -> SloResult:
    """The targets at one measurement: a check per target (an unmeasured figure is not met),
    met when every check is, and goodput over ``window_s`` (the measured window, seconds)."""
    checks = []
    for target in targets:
        value = None if stats is None else figure(target, stats)
        met = value is not None and target.met_by(value)
        checks.append(SloCheck(target=str(target), value=value, met=met))
    goodput, fraction = _goodput(targets, records, window_s)
    return SloResult(
        checks=checks,
        met=all(c.met for c in checks),
        goodput=goodput,
        goodput_fraction=fraction,
    )
