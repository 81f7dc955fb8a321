"""The ``loadgen`` verb's run: when each request goes out, how it is streamed and recorded.

``loadgen`` holds the contract (its docstring), the spec and the pure helpers; this module is
the I/O, and the verb's handler (``run``, in ``wire.CONTRACT``): importing it imports the
whole load generator, which is what a spare process waiting for its spec wants. Each request is timed on one clock (``time.perf_counter``): ``due`` (the schedule),
``begun`` (the client took it up), ``start`` (its last byte went to the kernel) and the chunks
(when their bytes reached the socket, see ``httpconn``), so a client that falls behind shows as
send lag and loop delay, apart from the server's latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import json
import random
import resource
import time
from typing import (
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Dict,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
)

from .httpconn import Client, Response
from .loadgen import (
    LoadSpec,
    arrival_offsets,
    lag_stats_ms,
    ramp_offsets,
    request_body,
    request_seed,
    reset_answer,
)
from .outbox import Outbox
from .protocol import AgentFailure, Emit
from .sse import JSON_PARSER, StreamParser
from .telemetry import Recording
from .tokens import load_tokenizer, random_prompts
from .wire import (
    Chunk,
    ClientLag,
    ErrorKind,
    LoadgenResult,
    PhaseEvent,
    ProgressEvent,
    RequestFailure,
    RequestRecord,
)

T = TypeVar("T")
TICK_S = 0.02  # event-loop ticker period: fine enough to see a stalled loop, cheap enough
ERROR_TEXT_MAX = 500
SCRAPE_TIMEOUT_S = 10.0


def event_loop() -> Tuple[asyncio.AbstractEventLoop, str]:
    """uvloop when the host has it (less time per callback), else asyncio's own loop."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.new_event_loop(), "asyncio"
    return uvloop.new_event_loop(), "uvloop"


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """``awaitable`` in this task, asyncio.TimeoutError after ``seconds``.

    Not ``asyncio.wait_for``: before Python 3.12 it runs the awaitable in a task of its own,
    which starts an event-loop iteration later, and a request would then leave up to a busy
    iteration after it was taken up. (``asyncio.timeout`` is 3.11+.)
    """
    task = asyncio.current_task()
    assert task is not None
    fired = []

    def expire() -> None:
        fired.append(True)
        task.cancel()

    handle = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if not fired:
            raise
        uncancel = getattr(task, "uncancel", None)  # 3.11+: count this one as handled
        if uncancel is not None:
            uncancel()
        raise asyncio.TimeoutError from None
    finally:
        handle.cancel()


def raise_file_limit(streams: int) -> None:
    """Room for one socket per stream: many hosts start processes with a soft limit of 1,024
    open files, far under the hard one, and a 1,024-stream run would fail on its last ones."""
    want = streams + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def run_loop(main: Callable[[str], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run`` on the loop ``event_loop`` picks (Python 3.9 has no loop factory)."""
    loop, name = event_loop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main(name))
    finally:
        try:
            pending = asyncio.all_tasks(loop)  # left by a run that failed: end them first
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


class Runner:
    """One run: its requests, its counts and the client's own lag, in one event loop."""

    def __init__(self, cfg: LoadSpec, items: List[Any], tokenizer: Any, emit: Emit) -> None:
        self.cfg, self.items = cfg, items
        # every event goes through the outbox: its writing never delays a send
        self.outbox = Outbox(emit)
        self.count_text = tokenizer.count if tokenizer is not None else None
        headers = {"Content-Type": "application/json", "User-Agent": "orch-loadgen"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        self.client = Client(cfg.base_url, headers)
        self.path = "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
        self.bodies: Dict[int, bytes] = {}
        self.phase = "warmup"
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.measure_start: Optional[float] = None
        self.measure_end: Optional[float] = None
        self.sent = self.done = self.failed = self.in_flight = self.output_tokens = 0
        self.reconciled = self.mismatches = 0  # measured requests, see ``completion``
        self.cap_waits = 0  # measured requests an open loop's cap held back (``_capped``)
        self.freed = 0.0  # when the cap's last slot freed (``now``'s clock)
        self.warmup_sent = 0
        self.streamed_tokens = 0  # of the requests that ended; progress adds the active ones
        self.active: Set[StreamParser] = set()
        self.send_lags: List[float] = []
        self.loop_delays: List[float] = []
        self.methods: Dict[str, int] = {}
        # the GPUs' newest read for the progress events (telemetry.Recording.latest)
        self.gpu_now: Callable[[], Tuple[Optional[float], Optional[float]]] = lambda: (None, None)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def main(self, loop_name: str) -> LoadgenResult:
        cfg = self.cfg
        self.outbox.start()
        helpers = [
            asyncio.ensure_future(self._ticker()),
            asyncio.ensure_future(self._progress()),
        ]
        try:
            cache_reset = await self._reset_cache()
            if cfg.warmup:
                self.outbox.put(PhaseEvent(phase="warmup"))
                await self._phase(first=0, count=cfg.warmup, duration=None, warmup=True)
            metrics_before = await self._scrape()
            self.phase = "measure"
            self.outbox.put(PhaseEvent(phase="measure"))
            await self._phase(
                first=cfg.warmup, count=cfg.num_prompts, duration=cfg.duration_s, warmup=False
            )
            self.phase = "done"
            metrics_after = await self._scrape()
        except BaseException:
            await self._stop(helpers)
            await self.outbox.abandon()
            raise
        await self._stop(helpers)
        await self.outbox.close()  # every record written before the result
        return dataclasses.replace(
            self._result(metrics_before, metrics_after),
            cache_reset=cache_reset,
            event_loop=f"{loop_name}, {JSON_PARSER}",
            arrival_clock=self.client.arrival_clock,
        )

    async def _stop(self, helpers: Sequence["asyncio.Future[None]"]) -> None:
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        self.client.close()

    async def _fetch(self, method: str, path: str, timeout_s: float) -> Tuple[int, str]:
        return await within(timeout_s, self.client.fetch(method, path))

    async def _reset_cache(self) -> Optional[str]:
        """Empty the engine's prefix cache, asking again while it refuses: "ok" or "failed: ..."."""
        reset = self.cfg.cache_reset
        if reset is None:
            return None
        deadline = time.perf_counter() + reset.timeout_s
        while True:
            left = deadline - time.perf_counter()
            try:
                status, body = await self._fetch(reset.method, reset.path, max(0.1, left))
                verdict, why = reset_answer(status, body)
            except asyncio.TimeoutError:
                verdict, why = "retry", f"no answer within {reset.timeout_s:g} s"
            except Exception as exc:  # noqa: BLE001 - OS/HTTP errors: the outcome is data
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

    async def _scrape(self) -> Optional[str]:
        if not self.cfg.metrics_path:
            return None
        try:
            status, text = await self._fetch("GET", self.cfg.metrics_path, SCRAPE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - metrics are best effort; the controller says "missing"
            return None
        return text if status == 200 else None

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
            ramp_s=None if cfg.open_loop else cfg.ramp_s,
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
            reconciled=self.reconciled,
            token_count_mismatches=self.mismatches,
            cap_waits=self.cap_waits,
        )

    async def _phase(
        self, *, first: int, count: Optional[int], duration: Optional[float], warmup: bool
    ) -> None:
        """Send one phase's requests and wait for all of them to finish."""
        start = self.now()
        rate = self.cfg.request_rate
        if rate is None:  # closed loop: worker i starts at its place in the ramp
            claimed = [0]

            async def worker(offset: float) -> None:
                due = start + offset
                if due > self.now():
                    await asyncio.sleep(due - self.now())
                while (count is None or claimed[0] < count) and (
                    duration is None or self.now() - start < duration
                ):
                    k = first + claimed[0]
                    claimed[0] += 1
                    # the next is due when this response ended (the kernel's time of its last
                    # chunk): a client slow to send again shows as send lag
                    due = await self._request(k, due, warmup)

            offsets = ramp_offsets(self.cfg.concurrency or 1, self.cfg.ramp_s)
            await asyncio.gather(*(worker(offset) for offset in offsets))
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
        """An open loop's request under its concurrency cap. One that found every slot taken
        was held back by the cap, i.e. by the server's pace, not by the client: it is due when
        a slot freed (a closed loop's rule), so its send lag is the client's alone, and it is
        counted (``cap_waits``) so the result says whose schedule was kept."""
        if cap is None:
            await self._request(k, due, warmup)
            return
        waited = cap.locked()
        async with cap:
            if waited:
                due = max(due, self.freed)
                self.cap_waits += not warmup
            self.freed = max(self.freed, await self._request(k, due, warmup))

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

    async def _request(self, k: int, due: float, warmup: bool, retried: bool = False) -> float:
        """One streamed request, recorded whatever happens (never raises); when it ended."""
        body = self._body(k)
        parser = StreamParser(
            self.count_text, max_tokens=self.cfg.max_tokens, ignore_eos=self.cfg.ignore_eos
        )
        response = Response(parser.feed, keep=ERROR_TEXT_MAX)
        error: Optional[str] = None
        failure: Optional[RequestFailure] = None
        self.in_flight += 1
        self.active.add(parser)
        begun = time.perf_counter()
        try:
            await within(self.cfg.timeout_s, self.client.send("POST", self.path, body, response))
        except asyncio.TimeoutError:
            error, failure = f"timed out after {self.cfg.timeout_s:g} s", RequestFailure.TIMEOUT
        except Exception as exc:  # noqa: BLE001 - OS/HTTP errors: a failed request is data
            error, failure = f"{type(exc).__name__}: {exc}", RequestFailure.CONNECTION
        end = response.last_t if response.complete and response.last_t else time.perf_counter()
        self.in_flight -= 1
        self.active.discard(parser)
        status = response.status
        if status is not None and status != 200 and error is None:
            error = f"HTTP {status}: {response.body.decode('utf-8', 'replace')}"
            failure = RequestFailure.HTTP_STATUS
            if (
                status == 400
                and not retried
                and self.cfg.continuous_usage_stats
                and "continuous_usage_stats" in error
            ):
                self.cfg.continuous_usage_stats = False  # an older server: ask again
                self.bodies.clear()
                return await self._request(k, due, warmup, retried=True)
        sent = response.sent if response.sent is not None else begun
        fields = parser.finish(error=error, failure=failure, start=sent)
        self._record(k, due, warmup, begun, sent, end, status, fields, parser.reconciled)
        return end - self.t0  # on the schedule's clock (``now``)

    def _record(
        self,
        k: int,
        due: float,
        warmup: bool,
        begun: float,
        sent: float,
        end: float,
        status: Optional[int],
        fields: Dict[str, Any],
        reconciled: bool,
    ) -> None:
        """Emit request ``k``'s record (``begun``/``sent``/``end`` on ``perf_counter``)."""
        start = sent - self.t0
        record = RequestRecord(
            index=k,
            warmup=warmup,
            due=round(due, 6),
            begun=round(begun - self.t0, 6),
            start=round(start, 6),
            start_wall=round(self.wall0 + start, 6),
            end=round(end - self.t0, 6),
            status=status,
            ttft=fields["ttft"],
            e2el=fields["e2el"],
            chunks=tuple(map(Chunk._make, fields["chunks"])),
            output_tokens=fields["output_tokens"],
            usage_reported=fields["usage_reported"],
            prompt_tokens=fields["prompt_tokens"],
            token_count_method=fields["token_count_method"],
            error=fields["error"],
            finish_reason=fields["finish_reason"],
            failure=fields["failure"],
        )
        self._account(record, reconciled)
        self.outbox.put(record)

    def _account(self, record: RequestRecord, reconciled: bool) -> None:
        self.streamed_tokens += sum(c.tokens for c in record.chunks)
        if record.warmup:
            self.warmup_sent += 1
            return
        self.sent += 1
        self.send_lags.append(record.send_lag or 0.0)
        start, end = record.start, record.end
        self.measure_start = start if self.measure_start is None else min(self.measure_start, start)
        self.measure_end = end if self.measure_end is None else max(self.measure_end, end)
        if record.ok:
            self.done += 1
            self.output_tokens += record.output_tokens or 0
            self.reconciled += reconciled
        else:
            self.failed += 1
            self.mismatches += record.failure is RequestFailure.TOKEN_COUNT_MISMATCH
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
            tokens = self.streamed_tokens + sum(p.counted for p in self.active)
            power, clock = self.gpu_now()
            self.outbox.put(
                ProgressEvent(
                    phase=self.phase,
                    done=self.done,
                    failed=self.failed,
                    in_flight=self.in_flight,
                    tok_s=round((tokens - last_tokens) / max(now - last_t, 1e-9), 2),
                    elapsed_s=round(now, 3),
                    gpu_power_w=power,
                    gpu_sm_mhz=clock,
                )
            )
            last_tokens, last_t = tokens, now


# ---------------------------------------------------------------- the verb


def run(raw: Dict[str, Any], emit: Emit) -> LoadgenResult:
    """The ``loadgen`` verb (``wire.CONTRACT``): the spec's prompts, then the run itself."""
    cfg = LoadSpec.parse(raw)
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
    raise_file_limit(cfg.concurrency or cfg.num_prompts or 4096)
    runner = Runner(cfg, items, tokenizer, emit)
    recording = Recording(cfg.telemetry) if cfg.telemetry is not None else None
    if recording is not None:
        runner.gpu_now = recording.latest
    try:
        result = run_loop(runner.main)
    except BaseException:  # cut short (its controller gone, a signal): end at once
        if recording is not None:
            recording.abandon()
        raise
    telemetry = recording.stop() if recording is not None else None
    return dataclasses.replace(
        result,
        request_seeds=cfg.request_seeds,
        telemetry=telemetry,
        **prompt_fields(source, len(items), exact),
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
