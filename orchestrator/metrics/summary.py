"""A run's request statistics (``RequestStats``) from the load generator's records (pure).

Definitions (as vLLM's and SGLang's benchmark tools use them; times from the client):

- A request is *completed* when its record has no failure (``RequestRecord.ok``: the engine
  ended it with a completion, its counts reconciled, see ``orchestrator.remote.completion``);
  anything else is *failed*, and no failed request enters any statistic here, its timings
  included. Warm-up requests are left out entirely.
- *Token chunk*: an SSE chunk that adds output tokens. The usage-only chunk after the last
  token and ``[DONE]`` are not token chunks, so they never extend a latency.
- TTFT = first token chunk arrival - request sent. E2EL = last token chunk arrival - request
  sent. Hence E2EL - TTFT = the sum of the gaps between consecutive token chunks.
- ``output_tokens`` = ``usage.completion_tokens`` of the response (the count the server did).
- TPOT = (E2EL - TTFT) / (output_tokens - 1), requests with output_tokens > 1.
- Per-request decode speed = (output_tokens - 1) / (E2EL - TTFT) tok/s: the single-stream
  tok/s people quote; mean, median, p10, p90 over requests.
- Per-chunk ITL: every gap between consecutive token chunks, pooled over requests. Under
  speculative decoding one chunk is one verify step, so this is a per-*step* latency.
- Per-token ITL: each gap divided by the tokens of the chunk that ends it, counted once per
  token (a 4-token chunk after 40 ms adds four values of 10 ms), so the mean is
  sum(gaps) / sum(tokens after the first chunk); computed from (value, count) pairs, never one
  list entry per token. Only from records whose per-chunk token counts
  are known (``usage`` or ``tokenizer`` counting); ``None`` when there are none.
- Tokens per chunk (client-side acceptance length): for a request with chunks c1..cn, the
  tokens after the first chunk divided by n - 1, i.e. tokens per decode step, the first chunk
  (the prefill's token) left out. Tokens after the first chunk = output_tokens - tokens(c1),
  where tokens(c1) is the counted value with ``usage`` counting and 1 otherwise. Reported per
  request (mean of the requests' ratios) and overall (sum of tokens / sum of steps, the way
  the servers compute acceptance length). The last chunk of a request that ended at
  ``max_tokens`` is left out with its tokens (when per-chunk counts are known): that step was
  cut short. It equals the
  acceptance length only when the server sends one chunk per step (vLLM ``--stream-interval
  1``, the default) and drafts at every step: n-gram speculation, which drafts only where the
  text repeats, gives steps of one token between its drafts, so its figure is lower.
- Duration: the measured window, first measured request sent -> last measured response ended.
  Request throughput = completed / duration; output throughput = total output tokens of the
  completed requests / duration.
- Client lag: send lag = time a request was sent - time it was due (open loop: its arrival
  time; closed loop: when its worker became free); event-loop delay = how late the load
  generator's 20 ms ticker woke up. Large values mean the client, not the server, set the pace.
  Shared reads = % of token chunks (each request's first left out) that arrived in the same
  read as the chunk before them: the client read them late, and the earlier one's time is wrong.
- Percentiles: linear interpolation between closest ranks (numpy's default ``linear``, equal to
  ``statistics.quantiles(method="inclusive")``): for sorted x0..x(n-1), p -> h = (n-1)p/100,
  x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]).
- Standard deviation (``std``): the population one (numpy's ``np.std`` default, as
  ``vllm bench serve`` reports it): sqrt(mean((x - mean)^2)).
- Times are reported in ms, speeds in tok/s.

The statistics are pydantic models because they are part of the run result written as
``summary.json`` (``orchestrator.results.model``): frozen, unknown keys rejected.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.remote.stats import percentile
from orchestrator.remote.wire import RequestRecord

PER_CHUNK_COUNTS = ("usage", "tokenizer")  # methods whose per-chunk token counts are meaningful


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Stats(_Frozen):
    """Distribution of one metric; every field None when there were no values."""

    n: int = 0
    mean: float | None = None
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None  # population standard deviation; None in results before v2

    @classmethod
    def of(cls, values: Iterable[float], *, scale: float = 1.0) -> Stats:
        xs = [v * scale for v in values]
        if not xs:
            return cls()
        mean = math.fsum(xs) / len(xs)
        return cls(
            n=len(xs),
            mean=mean,
            median=percentile(xs, 50),
            p10=percentile(xs, 10),
            p90=percentile(xs, 90),
            p99=percentile(xs, 99),
            min=min(xs),
            max=max(xs),
            std=math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs)),
        )

    @classmethod
    def weighted(cls, pairs: Iterable[tuple[float, int]], *, scale: float = 1.0) -> Stats:
        """``of`` over each value repeated its count of times, without making that list: a
        per-token figure must cost memory per chunk received, not per token a server claims."""
        xs = sorted((v * scale, k) for v, k in pairs if k > 0)
        n = sum(k for _, k in xs)
        if not n:
            return cls()
        mean = math.fsum(v * k for v, k in xs) / n
        return cls(
            n=n,
            mean=mean,
            median=weighted_percentile(xs, n, 50),
            p10=weighted_percentile(xs, n, 10),
            p90=weighted_percentile(xs, n, 90),
            p99=weighted_percentile(xs, n, 99),
            min=xs[0][0],
            max=xs[-1][0],
            std=math.sqrt(math.fsum(k * (v - mean) ** 2 for v, k in xs) / n),
        )


def weighted_percentile(xs: Sequence[tuple[float, int]], n: int, p: float) -> float:
    """``percentile`` of the expanded values, from sorted (value, count) pairs totalling ``n``."""
    h = (n - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return _at(xs, lo) + (h - lo) * (_at(xs, hi) - _at(xs, lo))


def _at(xs: Sequence[tuple[float, int]], rank: int) -> float:
    """The value at ``rank`` (0-based) of the expanded values."""
    seen = 0
    for v, k in xs:
        seen += k
        if rank < seen:
            return v
    return xs[-1][0]


class LagStats(_Frozen):
    """How late the client was (ms). The load generator reports n, mean, p50, p99 and max;
    the per-request send lag computed here keeps p50, p99 and max."""

    n: int | None = None
    mean: float | None = None
    p50: float | None = None
    p99: float | None = None
    max: float | None = None


class ClientLag(_Frozen):
    """Signs of a client that set the pace: send lag per request, the event loop's delay."""

    send_lag_ms: LagStats = Field(default_factory=LagStats)
    loop_delay_ms: LagStats | None = None
    # % of token chunks read together with the one before them (``shared_read_pct``)
    shared_read_pct: float | None = None
    # % of requests whose first token chunk was read with their second (``first_read_shared_pct``)
    first_read_shared_pct: float | None = None


class RequestStats(_Frozen):
    """What the measured requests saw, from the client (see the module docstring)."""

    completed: int
    failed: int
    duration_s: float
    request_throughput: float | None
    output_throughput: float | None  # tok/s over the measured window
    total_output_tokens: int
    total_prompt_tokens: int
    decode_tok_s: Stats
    ttft_ms: Stats
    tpot_ms: Stats
    e2el_ms: Stats
    itl_chunk_ms: Stats
    itl_token_ms: Stats
    tokens_per_chunk: float | None  # overall: sum(tokens after first chunk) / sum(steps)
    tokens_per_chunk_request_mean: float | None
    token_count_method: str | None
    client_lag: ClientLag = Field(default_factory=ClientLag)


def measured_window(records: Sequence[RequestRecord]) -> float:
    """First measured request sent -> last measured response ended, in seconds."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return 0.0
    return max(r.end for r in measured) - min(r.start for r in measured)


def _first_chunk_tokens(record: RequestRecord) -> int:
    return record.chunks[0].tokens if record.token_count_method == "usage" else 1


def chunk_steps(record: RequestRecord) -> tuple[int, int]:
    """(tokens after the first chunk, decode steps) of one record; see the module docstring.

    A request that ended at ``max_tokens`` (``finish_reason`` length) had its last step cut
    to what was left: that chunk is left out with its tokens where they are known (per-chunk
    counts), or every such request would pull the figure below the engine's acceptance length.
    """
    chunks = record.chunks
    cut = (
        record.finish_reason == "length"
        and record.token_count_method in PER_CHUNK_COUNTS
        and len(chunks) > 2
    )
    steps = len(chunks) - 1 - cut
    if steps <= 0:
        return 0, 0
    if record.usage_reported and record.output_tokens is not None:
        after = record.output_tokens - _first_chunk_tokens(record)
    else:
        after = sum(c.tokens for c in chunks[1:])
    if cut:
        after -= chunks[-1].tokens
    return max(0, after), steps


def merged_chunks(records: Sequence[RequestRecord], num_draft_tokens: int) -> int:
    """Chunks (after each request's first) carrying more tokens than one decode step can make,
    ``num_draft_tokens`` + 1: the engine's server fell behind its engine and sent several
    steps as one delta. Tokens per chunk then counts fewer steps than were run and overstates
    the acceptance length. Only records whose per-chunk counts are exact are read."""
    most = num_draft_tokens + 1
    return sum(
        1
        for r in records
        if r.token_count_method in PER_CHUNK_COUNTS
        for c in r.chunks[1:]
        if c.tokens > most
    )


def _gaps(record: RequestRecord) -> list[tuple[float, int]]:
    """(gap before chunk i, tokens of chunk i) for the chunks after the first."""
    c = record.chunks
    return [(c[i].t - c[i - 1].t, c[i].tokens) for i in range(1, len(c))]


def shared_read_pct(records: Sequence[RequestRecord]) -> float | None:
    """Of the token chunks after each request's first, the % that came in the same read as the
    chunk before them (the same arrival time, to the microsecond); None without such chunks.

    The direct sign of a client too late to time a stream: the server sends each chunk apart
    (one per decode step), so two in one read waited in the socket until the client got to it,
    and the earlier one carries the later one's time (TTFT up, TPOT down). A late event loop or
    a late send alone does not move a figure; this does.
    """
    shared = total = 0
    for r in records:
        c = r.chunks
        total += len(c) - 1 if c else 0
        shared += sum(1 for i in range(1, len(c)) if c[i].t == c[i - 1].t)
    return shared / total * 100.0 if total else None


def first_read_shared_pct(records: Sequence[RequestRecord]) -> float | None:
    """Of the requests with two token chunks or more, the % whose first chunk came in the same
    read as their second; None without such requests.

    The TTFT's own share of ``shared_read_pct``: such a request's first token carries the
    second's time, so its TTFT is a decode step too long. At a wave's start a busy client sends
    every request before it reads, so this is where a late client shows first.
    """
    shared = total = 0
    for r in records:
        c = r.chunks
        if len(c) > 1:
            total += 1
            shared += c[1].t == c[0].t
    return shared / total * 100.0 if total else None


def request_stats(
    records: Sequence[RequestRecord],
    *,
    window_s: float | None = None,
    loop_delay_ms: LagStats | None = None,
) -> RequestStats:
    """The run's request statistics; ``window_s`` is the loadgen result's ``duration_s`` when
    known, ``loop_delay_ms`` its client lag's ``loop_delay_ms``.

    Warm-up records are dropped here, so callers can pass everything the verb emitted.
    """
    measured = [r for r in records if not r.warmup]
    done = [r for r in measured if r.ok]
    window = measured_window(measured) if window_s is None else window_s
    out_tokens = sum(r.output_tokens or 0 for r in done)
    decode: list[float] = []
    tpot: list[float] = []
    chunk_itl: list[float] = []
    token_itl: list[tuple[float, int]] = []  # (gap / tokens, tokens): one per chunk
    ratios, after_sum, steps_sum = [], 0, 0
    for r in done:
        n, span = r.output_tokens or 0, (r.e2el or 0.0) - (r.ttft or 0.0)
        if n > 1 and span > 0:
            decode.append((n - 1) / span)
            tpot.append(span / (n - 1))
        gaps = _gaps(r)
        chunk_itl.extend(g for g, _ in gaps)
        if r.token_count_method in PER_CHUNK_COUNTS:
            token_itl.extend((g / k, k) for g, k in gaps if k > 0)
        after, steps = chunk_steps(r)
        if steps:
            ratios.append(after / steps)
            after_sum += after
            steps_sum += steps
    methods = sorted({r.token_count_method for r in done if r.token_count_method})
    lags = [lag for lag in (r.send_lag for r in measured) if lag is not None]
    send = Stats.of(lags, scale=1000.0)
    client_lag = ClientLag(
        send_lag_ms=LagStats(p50=send.median, p99=send.p99, max=send.max),
        loop_delay_ms=loop_delay_ms,
        shared_read_pct=shared_read_pct(done),
        first_read_shared_pct=first_read_shared_pct(done),
    )
    return RequestStats(
        completed=len(done),
        failed=len(measured) - len(done),
        duration_s=window,
        request_throughput=len(done) / window if window > 0 else None,
        output_throughput=out_tokens / window if window > 0 else None,
        total_output_tokens=out_tokens,
        total_prompt_tokens=sum(r.prompt_tokens or 0 for r in done),
        decode_tok_s=Stats.of(decode),
        ttft_ms=Stats.of((r.ttft for r in done if r.ttft is not None), scale=1000.0),
        tpot_ms=Stats.of(tpot, scale=1000.0),
        e2el_ms=Stats.of((r.e2el for r in done if r.e2el is not None), scale=1000.0),
        itl_chunk_ms=Stats.of(chunk_itl, scale=1000.0),
        itl_token_ms=Stats.weighted(token_itl, scale=1000.0),
        tokens_per_chunk=after_sum / steps_sum if steps_sum else None,
        tokens_per_chunk_request_mean=math.fsum(ratios) / len(ratios) if ratios else None,
        token_count_method=methods[0] if len(methods) == 1 else ("mixed" if methods else None),
        client_lag=client_lag,
    )
