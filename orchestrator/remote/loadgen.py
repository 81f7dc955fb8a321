"""``loadgen``: drive an OpenAI-compatible server from its own host and stream per-request records.

It runs next to the engine so the network between client and server is loopback, on its own
small HTTP/1.1 client (``httpconn``, standard library only): a streamed chunk is parsed in the
read callback and stamped with the time its bytes reached the socket (the kernel's receive
timestamp on Linux), so a busy client delays its own bookkeeping, not the latencies it
measures. uvloop and orjson are used when the host has them. Request bodies are serialised
once per prompt. The client measures its own lag (send lag, event-loop delay), so a saturated
client shows up in the results instead of inflating latencies silently.

Spec (``wire.LoadgenSpec``; ``?`` marks optional keys, defaults in brackets)::

    base_url | port          "http://127.0.0.1:8000" | 8000 (then http://127.0.0.1:<port>)
    api?                     "chat" | "completions"                         ["chat"]
    model                    served model name sent in every request
    prompts                  {"kind": "list", "items": [str | {"messages": [...]}, ...]}
                             | {"kind": "random", "input_len": N, "num": M,
                                "tokenizer"?: id or path, "range_ratio"?: 0.0}
    num_prompts?, duration_s?  stop after this many measured requests / seconds (one needed)
    concurrency?             closed loop with this many workers; with request_rate: a cap
    ramp_s?                  closed loop: the workers' first requests go out evenly over this
                             many seconds, worker i at i*ramp_s/concurrency; 0 sends them at
                             once  [concurrency / 500: a start rate of 500 requests/s]
    request_rate?            open loop: requests/s, gamma inter-arrivals (shape=burstiness)
    burstiness?              [1.0] (1 = Poisson; < 1 burstier, > 1 more regular)
    max_tokens?, temperature?, ignore_eos? [false], chat_template_kwargs?
    warmup?                  [0] requests sent first and waited for, flagged, not measured
    seed?                    [0] seeds the arrivals, the random prompts and, unless
                             temperature is 0, each request's sampling (see below)
    timeout_s?               [600] per request, whole stream
    api_key?                 sent as "Authorization: Bearer ..."
    tokenizer?               id or path: random prompts in exact tokens, and the fallback
                             token count when the server gives no per-chunk usage
    continuous_usage_stats?  [true] ask for usage in every chunk (vLLM, recent SGLang)
    metrics_path?            e.g. "/metrics": scraped right before the first measured request
                             and right after the last one ends (result: metrics_before/after)
    progress_interval_s?     [2.0]
    cache_reset?             {"path": "/reset_prefix_cache", "method"?: "POST",
                              "timeout_s"?: 30, "retry_interval_s"?: 0.2}: empty the engine's
                             prefix cache before anything is sent (see below)

A closed loop's first wave is ramped rather than sent in one burst: a burst makes the client
open and write hundreds of connections in one tick and the server parse them in one queue, which
shows as TTFT the server's own clock never sees, and it keeps every later wave in lockstep
(requests of equal length end, and restart, together). Each phase (warm-up, measure) ramps.

Times in a record (``wire.RequestRecord``), all on the load generator's monotonic clock:
``due`` when the schedule wanted the request out (open loop: the arrival process; closed loop:
its place in the ramp, then when the worker's previous request ended), ``begun`` when the
client took it up, ``start`` when its last byte was handed to the kernel (a new connection is
opened in between when none is idle), ``end`` when the response's last byte arrived. Chunk
times, ``ttft`` and ``e2el`` count from ``start``, so they hold the server's latency and the
network's, not the client's: send lag (``start - due``) is the client's.

Request ``k`` (0-based, warm-up first) uses ``items[k % len(items)]`` and, unless temperature
is 0 (greedy: nothing to seed), carries ``"seed": request_seed(seed, k)`` in its body (vLLM and
SGLang take a per-request ``seed``), so a sampled run is reproduced by the same seed. Warm-up
requests are sent the same way (closed or open loop) and all finish before the measured ones
start. With ``cache_reset`` the engine's prefix cache is emptied before the first request (warm-up
included), so that the prompts of an earlier load point on the same server are not cache hits
here. An engine refuses while requests hold cache blocks (SGLang: HTTP 400; vLLM: 200 with
``{"success": false}``): it is asked again every ``retry_interval_s`` until ``timeout_s``. The
outcome is the result's ``cache_reset`` and never stops the run; the controller decides what a
failed reset means. Events (``wire``):

- ``PhaseEvent`` when a phase (warmup, measure) starts;
- ``RequestRecord`` per finished request, failed ones too; only chunks that carry tokens;
  ``finish_reason`` as the engine said it and ``failure`` (a ``wire.RequestFailure`` kind;
  None: completed): a request is completed only when the engine said so and its token counts
  agree (``completion``'s rules);
- ``ProgressEvent`` every ``progress_interval_s`` (``tok_s``: tokens streamed over the last
  interval).

Result (``wire.LoadgenResult``): ``requests``/``completed``/``failed`` (measured), ``warmup``, ``output_tokens``,
``mode``, ``concurrency``, ``request_rate``, ``burstiness``, ``ramp_s`` (closed loop),
``started_at``/``ended_at`` (epoch s) and ``duration_s`` (first measured request sent -> last
measured response ended), ``client_lag`` (``send_lag_ms`` and ``loop_delay_ms``: n, mean, p50,
p99, max), ``event_loop`` (e.g. ``asyncio, json``; ``uvloop, orjson``), ``arrival_clock``
(``kernel``: chunk times are the kernel's receive timestamps; ``loop``: when the client read
them, e.g. over https or on another OS; ``mixed``),
``token_count_method`` (``usage``/``tokenizer``/``chunk``/``mixed``), ``token_count_methods``,
``prompt_source`` (``list``/``random:tokens``/``random:words``), ``input_len_exact`` (random
prompts: true when every one has its length in tokens exactly, false when the host had no
tokenizer and lengths are in words, or when some missed; null for a list),
``random_prompts``/``random_prompts_exact`` (how many random prompts, how many exact in tokens),
``request_seeds`` (whether requests carried a ``seed``), ``reconciled`` (completed requests
whose usage was checked against the client's count and ``max_tokens``) and
``token_count_mismatches`` (requests failed as ``token_count_mismatch``), with ``metrics_path``,
``metrics_before``/``metrics_after`` and, with ``cache_reset``, ``cache_reset`` (``ok`` or
``failed: <why>``).

Token counts per chunk: the cumulative ``usage.completion_tokens`` the server sends in each
chunk when asked with ``continuous_usage_stats`` (method ``usage``: exact, also under
speculative decoding where one chunk carries several tokens); else the host tokenizer on the
chunk's text (``tokenizer``: approximate at token boundaries); else 1 per non-empty chunk
(``chunk``: wrong under speculative decoding, so the summary then relies only on the final
usage total and the number of chunks).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

from .protocol import AgentFailure, parse_spec
from .sse import StreamParser
from .stats import percentile
from .wire import CacheResetSpec, ErrorKind, LagStats, LoadgenSpec

__all__ = ["StreamParser"]

DEFAULT_TIMEOUT_S = 600.0
START_RATE = 500.0  # closed loop: first-wave requests per second unless ramp_s says otherwise
REASON_TEXT_MAX = 200  # an engine's answer quoted in a failed cache reset's reason


# ---------------------------------------------------------------- pure helpers (unit-tested)


def arrival_offsets(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Due times (s from the phase start) of an open-loop arrival process: 0, then gamma gaps.

    Gamma with shape k = burstiness and scale 1/(rate*k) keeps the mean gap at 1/rate while the
    coefficient of variation is 1/sqrt(k): k = 1 is a Poisson process (exponential gaps).
    """
    if math.isinf(rate):
        while True:
            yield 0.0
    scale = 1.0 / (rate * burstiness)
    due = 0.0
    while True:
        yield due
        due += rng.gammavariate(burstiness, scale)


def ramp_offsets(concurrency: int, ramp_s: float) -> List[float]:
    """Due times (s from the phase start) of a closed loop's first requests, one per worker.

    Evenly spaced, worker i at ``i * ramp_s / concurrency``: the start rate is
    ``concurrency / ramp_s`` whatever the concurrency.
    """
    if ramp_s <= 0:
        return [0.0] * concurrency
    step = ramp_s / concurrency
    return [i * step for i in range(concurrency)]


def default_ramp_s(concurrency: int) -> float:
    """The ramp of a closed loop that names none: its first wave at ``START_RATE``/s."""
    return concurrency / START_RATE if concurrency > 1 else 0.0


def lag_stats_ms(values_s: List[float]) -> LagStats:
    """p50/p99/max/mean in milliseconds of lags given in seconds (None when there are none)."""
    ms = [v * 1000.0 for v in values_s]
    return LagStats(
        n=len(ms),
        mean=(sum(ms) / len(ms)) if ms else None,
        p50=percentile(ms, 50),
        p99=percentile(ms, 99),
        max=max(ms) if ms else None,
    )


def request_seed(seed: Any, index: int) -> int:
    """The sampling ``seed`` sent with request ``index`` of a workload seeded with ``seed``.

    One per request, not the workload seed itself: a prompt sent twice would otherwise sample
    the same text twice. sha256 (not ``hash()``, salted per process) keeps it the same on every
    host and Python; 31 bits fit every engine's integer type.
    """
    digest = hashlib.sha256(f"{seed}:request:{index}".encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def request_body(item: Any, cfg: "LoadSpec", seed: Optional[int] = None) -> Dict[str, Any]:
    """The JSON body for one prompt; chat wraps a plain string, completions flattens messages."""
    body: Dict[str, Any] = {"model": cfg.model, "stream": True}
    options: Dict[str, Any] = {"include_usage": True}
    if cfg.continuous_usage_stats:
        options["continuous_usage_stats"] = True
    body["stream_options"] = options
    messages = item.get("messages") if isinstance(item, dict) else None
    if cfg.api == "chat":
        body["messages"] = messages if messages is not None else [{"role": "user", "content": item}]
        if cfg.chat_template_kwargs:
            body["chat_template_kwargs"] = cfg.chat_template_kwargs
    else:
        body["prompt"] = _flatten(messages) if messages is not None else item
    if cfg.max_tokens is not None:
        body["max_tokens"] = cfg.max_tokens
    if cfg.temperature is not None:
        body["temperature"] = cfg.temperature
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    if seed is not None:
        body["seed"] = seed
    return body


def reset_answer(status: int, body: str) -> Tuple[str, str]:
    """What an engine's answer to a cache reset means: ("ok" | "retry" | "failed", why).

    vLLM answers 200 (with ``{"success": bool}`` in recent releases: false while running
    requests hold blocks) and 404 without ``VLLM_SERVER_DEV_MODE=1``; SGLang 200, or 400 while
    requests are running or waiting. Both refusals pass once the last request has ended.
    """
    text = " ".join(body.split())[:REASON_TEXT_MAX]
    if status == 400:
        return "retry", f"HTTP 400: {text}" if text else "HTTP 400"
    if status != 200:
        return "failed", f"HTTP {status}: {text}" if text else f"HTTP {status}"
    try:
        said = json.loads(body) if body.strip() else None
    except ValueError:
        said = None  # SGLang's plain "Cache flushed."
    if isinstance(said, dict) and said.get("success") is False:
        return "retry", "the engine answered success: false (cache blocks still in use)"
    return "ok", ""


def _flatten(messages: List[Dict[str, Any]]) -> str:
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content:
            out.append(content)
    return "\n\n".join(out)


# ---------------------------------------------------------------- spec


class LoadSpec:
    """The spec checked beyond its types (one ``bad_spec`` failure naming the key), plus what a
    run changes on the way (``continuous_usage_stats`` falls back on an older server)."""

    def __init__(self, spec: LoadgenSpec) -> None:
        def at_least(key: str, minimum: float) -> None:
            value = getattr(spec, key)
            if value is not None and value < minimum:
                raise AgentFailure(
                    ErrorKind.BAD_SPEC, f"loadgen: {key!r} must be >= {minimum}, got {value!r}"
                )

        for key, minimum in (
            ("port", 1),
            ("num_prompts", 1),
            ("duration_s", 0),
            ("request_rate", 1e-9),
            ("concurrency", 1),
            ("burstiness", 1e-9),
            ("max_tokens", 1),
            ("temperature", 0),
            ("warmup", 0),
            ("timeout_s", 1e-3),
            ("progress_interval_s", 0.05),
            ("ramp_s", 0),
        ):
            at_least(key, minimum)
        port = spec.port
        self.base_url = (spec.base_url or (f"http://127.0.0.1:{port}" if port else "")).rstrip("/")
        if not self.base_url:
            raise AgentFailure(ErrorKind.BAD_SPEC, "loadgen: give 'base_url' or 'port'")
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise AgentFailure(
                ErrorKind.BAD_SPEC,
                f"loadgen: 'base_url' must be http://host[:port] or https://..., got "
                f"{self.base_url!r}",
            )
        self.api = spec.api
        if self.api not in ("chat", "completions"):
            raise AgentFailure(
                ErrorKind.BAD_SPEC, f"loadgen: 'api' must be chat or completions, got {self.api!r}"
            )
        self.model = spec.model
        if not self.model:
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: 'model' (the served model name) is required"
            )
        self.num_prompts = spec.num_prompts
        self.duration_s = spec.duration_s
        if self.num_prompts is None and self.duration_s is None:
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: give 'num_prompts' or 'duration_s' (or both)"
            )
        self.request_rate = spec.request_rate
        self.concurrency = spec.concurrency
        if self.request_rate is None and self.concurrency is None:
            self.concurrency = 1
        if (
            self.request_rate is not None
            and math.isinf(self.request_rate)
            and self.num_prompts is None
        ):
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: an infinite request_rate needs 'num_prompts'"
            )
        self.burstiness = spec.burstiness
        self.ramp_s = (
            spec.ramp_s if spec.ramp_s is not None else default_ramp_s(self.concurrency or 1)
        )
        self.max_tokens = spec.max_tokens
        self.temperature = spec.temperature
        self.ignore_eos = spec.ignore_eos
        self.chat_template_kwargs = spec.chat_template_kwargs or None
        self.warmup = spec.warmup
        self.seed = spec.seed
        # greedy ignores a seed; unset, the server's default (the model's generation config,
        # often 0.6-1.0) may well sample, so only an explicit 0 goes without one
        self.request_seeds = self.temperature != 0
        self.timeout_s = spec.timeout_s
        self.api_key = spec.api_key
        self.continuous_usage_stats = spec.continuous_usage_stats
        self.metrics_path = spec.metrics_path
        self.progress_interval_s = spec.progress_interval_s
        self.cache_reset = _checked_reset(spec.cache_reset)
        self.telemetry = spec.telemetry
        if self.telemetry is not None and not 0.01 <= self.telemetry.interval_s <= 10:
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: telemetry.interval_s must be in [0.01, 10] s"
            )
        self.prompts = spec.prompts
        if self.prompts.kind not in ("list", "random"):
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: 'prompts' must be {'kind': 'list'|'random', ...}"
            )
        self.tokenizer = spec.tokenizer or self.prompts.tokenizer

    @classmethod
    def parse(cls, raw: Dict[str, Any]) -> "LoadSpec":
        return cls(parse_spec(LoadgenSpec, raw))

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None


def _checked_reset(reset: Optional[CacheResetSpec]) -> Optional[CacheResetSpec]:
    if reset is None:
        return None
    if not reset.path.startswith("/"):
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            f"loadgen: 'cache_reset.path' must start with '/', got {reset.path!r}",
        )
    if reset.method not in ("GET", "POST"):
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            f"loadgen: 'cache_reset.method' must be GET or POST, got {reset.method!r}",
        )
    for key in ("timeout_s", "retry_interval_s"):
        value = getattr(reset, key)
        if value <= 0:
            raise AgentFailure(
                ErrorKind.BAD_SPEC, f"loadgen: 'cache_reset.{key}' must be > 0, got {value!r}"
            )
    return reset
