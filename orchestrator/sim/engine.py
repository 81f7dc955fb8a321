"""The simulated engine core: a scheduler loop that prefills and decodes on the timing model.

One asyncio task runs steps back to back on absolute deadlines (so sleep jitter never
accumulates): a prefill step admits waiting requests and gives each its first token; a decode
step gives every running request ``1 + accepted`` tokens. Everything it does is counted exactly
(``Counters``, per-request records): that is the ground truth tests compare measurements with.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.sim.timing import TimingProfile, decode_step_s, prefill_s, sample_accepted

MAX_LAG_S = 0.05  # when the loop falls further behind than this, stop trying to catch up


@dataclass(eq=False)
class SimRequest:
    rid: str
    prompt_tokens: int
    max_tokens: int
    target_tokens: int  # where it ends: max_tokens, or earlier at its natural length
    rng: random.Random
    num_positions: int  # draft tokens per step (0 without speculation)
    warmup: bool = False
    arrival: float = field(default_factory=time.time)
    queue: asyncio.Queue[tuple[int, str | None, float]] = field(default_factory=asyncio.Queue)
    scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None
    finish_reason: str | None = None
    generated: int = 0
    decode_steps: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_pos: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_pos = [0] * self.num_positions

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def record(self) -> dict[str, Any]:
        """Ground truth for this request (times are Unix seconds, wall clock)."""
        decode_s = (
            self.chunk_times[-1] - self.first_token
            if self.first_token is not None and self.chunk_times
            else 0.0
        )
        return {
            "id": self.rid,
            "warmup": self.warmup,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "output_tokens": self.generated,
            "finish_reason": self.finish_reason,
            "arrival_time": self.arrival,
            "first_token_time": self.first_token,
            "last_token_time": self.chunk_times[-1] if self.chunk_times else None,
            "finish_time": self.finished,
            "ttft_s": (self.first_token - self.arrival) if self.first_token else None,
            "decode_s": decode_s,
            "decode_tok_s": (self.generated - 1) / decode_s if decode_s > 0 else None,
            "chunks": len(self.chunk_tokens),
            "chunk_tokens": list(self.chunk_tokens),
            "chunk_times": list(self.chunk_times),
            "decode_steps": self.decode_steps,
            "num_drafts": self.decode_steps if self.num_positions else 0,
            "num_draft_tokens": self.draft_tokens,
            "num_accepted_tokens": self.accepted,
            "accepted_per_position": list(self.accepted_pos),
        }


@dataclass
class Counters:
    """Cumulative totals, exactly what the engine did since start."""

    num_positions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    forward_steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0  # decode batches
    request_steps: int = 0  # (request, decode step) pairs: drafts / verify calls
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    finished: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.accepted_per_pos = [0] * self.num_positions

    @property
    def num_drafts(self) -> int:
        return self.request_steps if self.num_positions else 0


class EngineListener(Protocol):
    def on_prefill(
        self, batch: list[SimRequest], wall_s: float, running: int, queued: int
    ) -> None: ...
    def on_decode(self, batch: list[SimRequest], tokens: int, wall_s: float) -> None: ...
    def on_chunk(self, req: SimRequest, tokens: int, gap_s: float | None) -> None: ...
    def on_finish(self, req: SimRequest) -> None: ...


class EngineCore:
    def __init__(
        self,
        *,
        profile: TimingProfile,
        speed: float,
        max_running: int,
        kv_capacity_tokens: int,
        max_batched_tokens: int = 8192,
    ) -> None:
        self.profile = profile
        self.speed = speed
        self.max_running = max_running
        self.kv_capacity = kv_capacity_tokens
        self.max_batched_tokens = max_batched_tokens
        self.positions = profile.spec.num_draft_tokens if profile.spec else 0
        self.conditional = profile.spec.conditional() if profile.spec else ()
        self.counters = Counters(num_positions=self.positions)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: list[SimRequest] = []  # every request ever submitted, in order
        self.listeners: list[EngineListener] = []
        self._wake = asyncio.Event()

    # -- state seen by logs and metrics
    def kv_tokens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)

    def kv_usage(self) -> float:
        return min(1.0, self.kv_tokens() / self.kv_capacity) if self.kv_capacity else 0.0

    # -- requests
    def submit(self, req: SimRequest) -> None:
        self.requests.append(req)
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        """The client went away: drop the request wherever it is."""
        if req.done:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        self._finish(req, "abort", time.time())

    # -- the loop
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
            batch = self._admit()
            if batch:
                cost = prefill_s(self.profile, sum(r.prompt_tokens for r in batch))
                started = time.time()
                deadline = await self._sleep_until(loop, deadline + cost / self.speed)
                self._prefilled(batch, time.time() - started)
            elif self.running:
                batch = list(self.running)
                cost = decode_step_s(self.profile, len(batch))
                started = time.time()
                deadline = await self._sleep_until(loop, deadline + cost / self.speed)
                self._decoded(batch, time.time() - started)
            else:  # waiting requests that cannot be admitted (KV full) and nothing running
                await asyncio.sleep(0.01)
                deadline = loop.time()

    @staticmethod
    async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> float:
        now = loop.time()
        if when > now:
            await asyncio.sleep(when - now)
            return when
        return when if when >= now - MAX_LAG_S else now

    def _admit(self) -> list[SimRequest]:
        batch: list[SimRequest] = []
        tokens = 0
        kv = self.kv_tokens()
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            req = self.waiting[0]
            if batch and tokens + req.prompt_tokens > self.max_batched_tokens:
                break
            if kv + req.prompt_tokens + 1 > self.kv_capacity and (batch or self.running):
                break
            self.waiting.popleft()
            req.scheduled = time.time()
            batch.append(req)
            tokens += req.prompt_tokens
            kv += req.prompt_tokens + 1
        return batch

    def _prefilled(self, batch: list[SimRequest], wall_s: float) -> None:
        running_before = len(self.running)
        c = self.counters
        c.forward_steps += 1
        c.prefill_steps += 1
        now = time.time()
        for req in batch:
            if req.done:  # aborted while its prefill ran
                continue
            c.prompt_tokens += req.prompt_tokens
            req.first_token = now
            self.running.append(req)
            self._emit(req, 1, now)
        for listener in self.listeners:
            listener.on_prefill(batch, wall_s, running_before, len(self.waiting))

    def _decoded(self, batch: list[SimRequest], wall_s: float) -> None:
        c = self.counters
        c.forward_steps += 1
        c.decode_steps += 1
        now = time.time()
        produced = 0
        stepped: list[SimRequest] = []
        for req in batch:
            if req.done:
                continue
            remaining = req.target_tokens - req.generated
            accepted = 0
            if self.positions:
                accepted = sample_accepted(req.rng, self.conditional, remaining - 1)
                req.draft_tokens += self.positions
                req.accepted += accepted
                c.num_draft_tokens += self.positions
                c.num_accepted_tokens += accepted
                for i in range(accepted):
                    req.accepted_pos[i] += 1
                    c.accepted_per_pos[i] += 1
            req.decode_steps += 1
            c.request_steps += 1
            produced += 1 + accepted
            stepped.append(req)
            self._emit(req, 1 + accepted, now)
        for listener in self.listeners:
            listener.on_decode(stepped, produced, wall_s)

    def _emit(self, req: SimRequest, tokens: int, now: float) -> None:
        gap = now - req.chunk_times[-1] if req.chunk_times else None
        req.generated += tokens
        self.counters.generation_tokens += tokens
        req.chunk_tokens.append(tokens)
        req.chunk_times.append(now)
        for listener in self.listeners:
            listener.on_chunk(req, tokens, gap)
        reason = None
        if req.generated >= req.target_tokens:
            reason = "length" if req.target_tokens >= req.max_tokens else "stop"
        req.queue.put_nowait((tokens, reason, now))
        if reason:
            if req in self.running:
                self.running.remove(req)
            self._finish(req, reason, now)

    def _finish(self, req: SimRequest, reason: str, now: float) -> None:
        req.finish_reason = reason
        req.finished = now
        self.counters.finished[reason] = self.counters.finished.get(reason, 0) + 1
        if reason == "abort":
            req.queue.put_nowait((0, "abort", now))
        for listener in self.listeners:
            listener.on_finish(req)
