"""``loadgen``: drive an OpenAI-compatible server from its own host and stream per-request records.

It runs next to the engine so the network between client and server is loopback, and in the
engine's interpreter because vLLM and SGLang both ship aiohttp (imported lazily: the rest of the
agent stays standard library only). One ClientSession with a connector sized to the
concurrency serves every request; request bodies are serialised once per prompt. The client
measures its own lag, so a saturated client shows up in the results instead of inflating
latencies silently.

Spec (``wire.LoadgenSpec``; ``?`` marks optional keys, defaults in brackets)::

    base_url | port          "http://127.0.0.1:8000" | 8000 (then http://127.0.0.1:<port>)
    api?                     "chat" | "completions"                         ["chat"]
    model                    served model name sent in every request
    prompts                  {"kind": "list", "items": [str | {"messages": [...]}, ...]}
                             | {"kind": "random", "input_len": N, "num": M,
                                "tokenizer"?: id or path, "range_ratio"?: 0.0}
    num_prompts?, duration_s?  stop after this many measured requests / seconds (one needed)
    concurrency?             closed loop with this many workers; with request_rate: a cap
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
- ``ProgressEvent`` every ``progress_interval_s`` (``tok_s``: tokens streamed over the last
  interval).

Result (``wire.LoadgenResult``): ``requests``/``completed``/``failed`` (measured), ``warmup``, ``output_tokens``,
``mode``, ``concurrency``, ``request_rate``, ``burstiness``, ``started_at``/``ended_at`` (epoch
s) and ``duration_s`` (first measured request sent -> last measured response ended),
``client_lag`` (``send_lag_ms`` and ``loop_delay_ms``: n, mean, p50, p99, max),
``token_count_method`` (``usage``/``tokenizer``/``chunk``/``mixed``), ``token_count_methods``,
``prompt_source`` (``list``/``random:tokens``/``random:words``), ``input_len_exact`` (random
prompts: true when every one has its length in tokens exactly, false when the host had no
tokenizer and lengths are in words, or when some missed; null for a list),
``random_prompts``/``random_prompts_exact`` (how many random prompts, how many exact in tokens),
``request_seeds`` (whether requests carried a ``seed``), with ``metrics_path``,
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

import asyncio
import dataclasses
import hashlib
import json
import math
import random
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .protocol import AgentFailure, Emit, parse_spec
from .sse import StreamParser
from .stats import percentile
from .tokens import load_tokenizer, random_prompts
from .wire import (
    CacheResetSpec,
    Chunk,
    ClientLag,
    ErrorKind,
    LagStats,
    LoadgenResult,
    LoadgenSpec,
    PhaseEvent,
    ProgressEvent,
    RequestRecord,
)

__all__ = ["StreamParser", "run"]

DEFAULT_TIMEOUT_S = 600.0
TICK_S = 0.02  # event-loop ticker period: fine enough to see a stalled loop, cheap enough
ERROR_TEXT_MAX = 500
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
        ):
            at_least(key, minimum)
        port = spec.port
        self.base_url = (spec.base_url or (f"http://127.0.0.1:{port}" if port else "")).rstrip("/")
        if not self.base_url:
            raise AgentFailure(ErrorKind.BAD_SPEC, "loadgen: give 'base_url' or 'port'")
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


# ---------------------------------------------------------------- the run (I/O)


def run(raw: Dict[str, Any], emit: Emit) -> LoadgenResult:
    cfg = LoadSpec.parse(raw)
    try:
        import aiohttp
    except ImportError as exc:
        raise AgentFailure(
            ErrorKind.MISSING_DEPENDENCY,
            "loadgen needs aiohttp in the agent's interpreter (vLLM and SGLang ship it)",
            {"error": str(exc)},
        ) from exc
    tokenizer = load_tokenizer(cfg.tokenizer)
    if cfg.prompts.kind == "random":
        items, source, exact = random_prompts(cfg.prompts, tokenizer, cfg.seed)
    else:
        items, source, exact = list(cfg.prompts.items), "list", 0
        if not all(
            isinstance(i, str) or (isinstance(i, dict) and isinstance(i.get("messages"), list))
            for i in items
        ):
            raise AgentFailure(
                ErrorKind.BAD_SPEC, "loadgen: prompt items must be strings or {'messages': [...]}"
            )
    if not items:
        raise AgentFailure(ErrorKind.BAD_SPEC, "loadgen: the prompt list is empty")
    runner = _Runner(cfg, items, tokenizer, emit, aiohttp)
    result = asyncio.run(runner.main())
    return dataclasses.replace(
        result, request_seeds=cfg.request_seeds, **prompt_fields(source, len(items), exact)
    )


def prompt_fields(source: str, count: int, exact: int) -> Dict[str, Any]:
    """What the result says about the prompts: above all whether random prompts really have
    ``input_len`` tokens, or fell back to words because the host could not tokenize."""
    if not source.startswith("random:"):
        return {"prompt_source": source, "input_len_exact": None}
    return {
        "prompt_source": source,
        "input_len_exact": source == "random:tokens" and exact == count,
        "random_prompts": count,
        "random_prompts_exact": exact,
    }


class _Runner:
    def __init__(
        self, cfg: LoadSpec, items: List[Any], tokenizer: Any, emit: Emit, aiohttp: Any
    ) -> None:
        self.cfg, self.items, self.emit, self.aiohttp = cfg, items, emit, aiohttp
        self.count_text = tokenizer.count if tokenizer is not None else None
        self.url = cfg.base_url + (
            "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
        )
        self.bodies: Dict[int, bytes] = {}
        self.phase = "warmup"
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.measure_start: Optional[float] = None
        self.measure_end: Optional[float] = None
        self.sent = self.done = self.failed = self.in_flight = self.output_tokens = 0
        self.warmup_sent = 0
        self.streamed_tokens = 0
        self.send_lags: List[float] = []
        self.loop_delays: List[float] = []
        self.methods: Dict[str, int] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def main(self) -> LoadgenResult:
        cfg, aiohttp = self.cfg, self.aiohttp
        headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        connector = aiohttp.TCPConnector(limit=cfg.concurrency or 0, limit_per_host=0)
        timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, headers=headers
        ) as session:
            self.session = session
            helpers = [
                asyncio.ensure_future(self._ticker()),
                asyncio.ensure_future(self._progress()),
            ]
            try:
                cache_reset = await self._reset_cache()
                if cfg.warmup:
                    self.emit(PhaseEvent(phase="warmup"))
                    await self._phase(first=0, count=cfg.warmup, duration=None, warmup=True)
                metrics_before = await self._scrape()
                self.phase = "measure"
                self.emit(PhaseEvent(phase="measure"))
                await self._phase(
                    first=cfg.warmup, count=cfg.num_prompts, duration=cfg.duration_s, warmup=False
                )
                self.phase = "done"
                metrics_after = await self._scrape()
            finally:
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
        return dataclasses.replace(
            self._result(metrics_before, metrics_after), cache_reset=cache_reset
        )

    async def _reset_cache(self) -> Optional[str]:
        """Empty the engine's prefix cache, asking again while it refuses: "ok" or "failed: ..."."""
        reset = self.cfg.cache_reset
        if reset is None:
            return None
        url = self.cfg.base_url + reset.path
        deadline = time.perf_counter() + reset.timeout_s
        while True:
            left = deadline - time.perf_counter()
            try:
                timeout = self.aiohttp.ClientTimeout(total=max(0.1, left))
                async with self.session.request(reset.method, url, timeout=timeout) as resp:
                    body = await resp.text(errors="replace")
                verdict, why = reset_answer(resp.status, body)
            except asyncio.TimeoutError:
                verdict, why = "retry", f"no answer within {reset.timeout_s:g} s"
            except Exception as exc:  # noqa: BLE001 - aiohttp/OS errors: the outcome is data
                return f"failed: {reset.method} {reset.path}: {type(exc).__name__}: {exc}"
            if verdict == "ok":
                return "ok"
            if verdict == "failed":
                return f"failed: {reset.method} {reset.path}: {why}"
            if time.perf_counter() + reset.retry_interval_s >= deadline:
                return (
                    f"failed: {reset.method} {reset.path} still refused after "
                    f"{reset.timeout_s:g} s: {why}"
                )
            await asyncio.sleep(reset.retry_interval_s)

    def _result(self, before: Optional[str], after: Optional[str]) -> LoadgenResult:
        cfg = self.cfg
        start, end = self.measure_start, self.measure_end
        methods = sorted(self.methods)
        return LoadgenResult(
            requests=self.sent,
            completed=self.done,
            failed=self.failed,
            warmup=self.warmup_sent,
            output_tokens=self.output_tokens,
            mode="open" if cfg.open_loop else "closed",
            concurrency=cfg.concurrency,
            request_rate=cfg.request_rate,
            burstiness=cfg.burstiness if cfg.open_loop else None,
            started_at=self.wall0 + start if start is not None else None,
            ended_at=self.wall0 + end if end is not None else None,
            duration_s=(end - start) if start is not None and end is not None else 0.0,
            client_lag=ClientLag(
                send_lag_ms=lag_stats_ms(self.send_lags),
                loop_delay_ms=lag_stats_ms(self.loop_delays),
                loop_tick_ms=TICK_S * 1000.0,
            ),
            token_count_method=methods[0] if len(methods) == 1 else ("mixed" if methods else None),
            token_count_methods=dict(self.methods),
            metrics_before=before,
            metrics_after=after,
        )

    async def _phase(
        self, *, first: int, count: Optional[int], duration: Optional[float], warmup: bool
    ) -> None:
        """Send one phase's requests and wait for all of them to finish."""
        start = self.now()
        rate = self.cfg.request_rate
        if rate is None:  # closed loop
            claimed = [0]

            async def worker() -> None:
                while (count is None or claimed[0] < count) and (
                    duration is None or self.now() - start < duration
                ):
                    k = first + claimed[0]
                    claimed[0] += 1
                    await self._request(k, self.now(), warmup)

            await asyncio.gather(*(worker() for _ in range(self.cfg.concurrency or 1)))
            return
        rng = random.Random(f"{self.cfg.seed}:arrivals:{'warmup' if warmup else 'measure'}")
        cap = asyncio.Semaphore(self.cfg.concurrency) if self.cfg.concurrency else None
        tasks = []
        for i, offset in enumerate(arrival_offsets(rate, self.cfg.burstiness, rng)):
            if (count is not None and i >= count) or (duration is not None and offset >= duration):
                break
            # sleep until due; when behind, still yield so the requests already due get sent
            await asyncio.sleep(max(0.0, start + offset - self.now()))
            tasks.append(
                asyncio.ensure_future(self._capped(cap, first + i, start + offset, warmup))
            )
        await asyncio.gather(*tasks)

    async def _capped(
        self, cap: Optional[asyncio.Semaphore], k: int, due: float, warmup: bool
    ) -> None:
        if cap is None:
            await self._request(k, due, warmup)
            return
        async with cap:
            await self._request(k, due, warmup)

    def _body(self, k: int) -> bytes:
        """Request ``k``'s body: the prompt's JSON, serialised once, and the request's seed."""
        index = k % len(self.items)
        body = self.bodies.get(index)
        if body is None:
            body = json.dumps(request_body(self.items[index], self.cfg)).encode("utf-8")
            self.bodies[index] = body
        if not self.cfg.request_seeds:
            return body
        return body[:-1] + b', "seed": %d}' % request_seed(self.cfg.seed, k)

    async def _request(self, k: int, due: float, warmup: bool, retried: bool = False) -> None:
        """One streamed request, recorded whatever happens (never raises)."""
        body = self._body(k)
        parser = StreamParser(self.count_text)
        status: Optional[int] = None
        error: Optional[str] = None
        self.in_flight += 1
        start = self.now()
        if not warmup and self.measure_start is None:
            self.measure_start = start
        try:
            async with self.session.post(self.url, data=body) as resp:
                status = resp.status
                if status != 200:
                    text = (await resp.text(errors="replace"))[:ERROR_TEXT_MAX]
                    error = f"HTTP {status}: {text}"
                else:
                    async for data in resp.content.iter_any():
                        before = parser.counted
                        parser.feed(data, self.now() - start)
                        self.streamed_tokens += parser.counted - before
        except asyncio.TimeoutError:
            error = f"timed out after {self.cfg.timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - aiohttp/OS errors: a failed request is data
            error = f"{type(exc).__name__}: {exc}"
        end = self.now()
        self.in_flight -= 1
        if (
            status == 400
            and not retried
            and self.cfg.continuous_usage_stats
            and "continuous_usage_stats" in (error or "")
        ):
            self.cfg.continuous_usage_stats = False  # an older server: fall back, ask again
            self.bodies.clear()
            await self._request(k, due, warmup, retried=True)
            return
        fields = parser.finish(error=error)
        record = RequestRecord(
            index=k,
            warmup=warmup,
            due=round(due, 6),
            start=round(start, 6),
            start_wall=round(self.wall0 + start, 6),
            end=round(end, 6),
            status=status,
            ttft=fields["ttft"],
            e2el=fields["e2el"],
            chunks=tuple(Chunk(t, n) for t, n in fields["chunks"]),
            output_tokens=fields["output_tokens"],
            usage_reported=fields["usage_reported"],
            prompt_tokens=fields["prompt_tokens"],
            token_count_method=fields["token_count_method"],
            error=fields["error"],
        )
        self._account(record, warmup, start - due, end)
        self.emit(record)

    def _account(self, record: RequestRecord, warmup: bool, lag: float, end: float) -> None:
        if warmup:
            self.warmup_sent += 1
            return
        self.sent += 1
        self.send_lags.append(max(0.0, lag))
        self.measure_end = end if self.measure_end is None else max(self.measure_end, end)
        if record.error is None:
            self.done += 1
            self.output_tokens += record.output_tokens or 0
        else:
            self.failed += 1
        method = record.token_count_method
        if method:
            self.methods[method] = self.methods.get(method, 0) + 1

    async def _ticker(self) -> None:
        """Event-loop delay: how late a ``sleep(TICK_S)`` wakes up while requests stream."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK_S)
            if self.phase == "measure":
                self.loop_delays.append(max(0.0, time.perf_counter() - before - TICK_S))

    async def _progress(self) -> None:
        last_tokens, last_t = 0, self.now()
        while True:
            await asyncio.sleep(self.cfg.progress_interval_s)
            now = self.now()
            tokens = self.streamed_tokens
            self.emit(
                ProgressEvent(
                    phase=self.phase,
                    done=self.done,
                    failed=self.failed,
                    in_flight=self.in_flight,
                    tok_s=round((tokens - last_tokens) / max(now - last_t, 1e-9), 2),
                    elapsed_s=round(now, 3),
                )
            )
            last_tokens, last_t = tokens, now

    async def _scrape(self) -> Optional[str]:
        if not self.cfg.metrics_path:
            return None
        try:
            timeout = self.aiohttp.ClientTimeout(total=10)
            async with self.session.get(
                self.cfg.base_url + self.cfg.metrics_path, timeout=timeout
            ) as resp:
                return await resp.text(errors="replace") if resp.status == 200 else None
        except Exception:  # noqa: BLE001 - metrics are best effort; the controller says "missing"
            return None
