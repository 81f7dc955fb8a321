"""Periodic stat lines with the numbers the engine actually produced, and the ground truth.

vLLM logs an ``Engine 000:`` line (and a ``SpecDecoding metrics:`` line) every stats interval;
SGLang logs ``Prefill batch`` for every prefill and ``Decode batch`` every
``--decode-log-interval`` decode steps, and refreshes its Prometheus gauges at the same time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.sim.engine import EngineCore, SimRequest
from orchestrator.sim.logs import (
    EngineLog,
    sglang_decode_line,
    sglang_prefill_line,
    vllm_engine_line,
    vllm_spec_line,
)
from orchestrator.sim.metrics import SglangMetrics


@dataclass
class _Snapshot:
    at: float
    prompt: int
    generation: int
    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: list[int]


def _snapshot(engine: EngineCore) -> _Snapshot:
    c = engine.counters
    return _Snapshot(
        time.monotonic(),
        c.prompt_tokens,
        c.generation_tokens,
        c.num_drafts,
        c.num_draft_tokens,
        c.num_accepted_tokens,
        list(c.accepted_per_pos),
    )


class VllmStatLogger:
    """vLLM's LoggingStatLogger + SpecDecodingLogging, on the wall clock."""

    def __init__(self, engine: EngineCore, log: EngineLog, interval_s: float) -> None:
        self.engine = engine
        self.log = log
        self.interval_s = interval_s
        self._last = _snapshot(engine)
        self._was_active = False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.emit()

    def emit(self) -> None:
        now = _snapshot(self.engine)
        last, self._last = self._last, now
        span = max(1e-9, now.at - last.at)
        prompt, gen = now.prompt - last.prompt, now.generation - last.generation
        busy = bool(prompt or gen or self.engine.running or self.engine.waiting)
        if not (busy or self._was_active):
            return  # vLLM logs idle intervals at DEBUG only
        self._was_active = busy
        self.log.vllm(
            vllm_engine_line(
                prompt_tps=prompt / span,
                gen_tps=gen / span,
                running=len(self.engine.running),
                waiting=len(self.engine.waiting),
                kv_usage=self.engine.kv_usage(),
                prefix_hit=0.0,
            ),
            source="loggers.py:259",
        )
        drafts = now.drafts - last.drafts
        if self.engine.positions and drafts:
            self.log.vllm(
                vllm_spec_line(
                    drafts=drafts,
                    draft_tokens=now.draft_tokens - last.draft_tokens,
                    accepted=now.accepted - last.accepted,
                    per_pos=[a - b for a, b in zip(now.per_pos, last.per_pos, strict=True)],
                    interval_s=span,
                ),
                source="metrics.py:100",
            )


class SglangBatchLogger:
    """An engine listener printing SGLang's batch lines and refreshing its gauges."""

    def __init__(
        self,
        engine: EngineCore,
        log: EngineLog,
        metrics: SglangMetrics | None,
        *,
        interval: int,
        hybrid: bool,
    ) -> None:
        self.engine = engine
        self.log = log
        self.metrics = metrics
        self.interval = interval
        self.hybrid = hybrid
        self._steps = 0
        self._since = time.monotonic()
        self._tokens = self._req_steps = self._accepted = 0

    def on_prefill(self, batch: list[SimRequest], wall_s: float, running: int, queued: int) -> None:
        tokens = sum(r.prompt_tokens for r in batch)
        e = self.engine
        self.log.sglang(
            sglang_prefill_line(
                new_seq=len(batch),
                new_tokens=tokens,
                usage=e.kv_usage(),
                hybrid=self.hybrid,
                mamba_usage=len(e.running) / max(1, e.max_running),
                running=running,
                queue=queued,
                input_tps=tokens / wall_s if wall_s > 0 else 0.0,
            )
        )

    def on_decode(self, batch: list[SimRequest], tokens: int, wall_s: float) -> None:
        self._steps += 1
        self._tokens += tokens
        self._req_steps += len(batch)
        self._accepted += tokens - len(batch)
        if self._steps % self.interval == 0:
            self.flush()

    def on_chunk(self, req: SimRequest, tokens: int, gap_s: float | None) -> None:
        pass

    def on_finish(self, req: SimRequest) -> None:
        pass

    def flush(self) -> None:
        e = self.engine
        now = time.monotonic()
        gen_tps = self._tokens / max(1e-9, now - self._since)
        accept_len = accept_rate = None
        if e.positions and self._req_steps:
            accept_len = (self._accepted + self._req_steps) / self._req_steps
            accept_rate = self._accepted / (self._req_steps * e.positions)
        running = len(e.running)
        self.log.sglang(
            sglang_decode_line(
                running=running,
                tokens=e.kv_tokens(),
                usage=e.kv_usage(),
                hybrid=self.hybrid,
                mamba_num=running,
                mamba_usage=running / max(1, e.max_running),
                accept_len=accept_len,
                accept_rate=accept_rate,
                gen_tps=gen_tps,
                queue=len(e.waiting),
            )
        )
        if self.metrics is not None:
            self.metrics.set_gauges(
                running=running,
                queued=len(e.waiting),
                used_tokens=e.kv_tokens(),
                usage=e.kv_usage(),
                gen_tps=gen_tps,
                accept_len=accept_len,
                accept_rate=accept_rate,
            )
        self._since = now
        self._tokens = self._req_steps = self._accepted = 0


def ground_truth(engine: EngineCore, meta: dict[str, Any]) -> dict[str, Any]:
    """What the simulator did, exactly: totals and one record per request."""
    c = engine.counters
    drafts = c.num_drafts
    totals = {
        "requests": len(engine.requests),
        "finished": dict(c.finished),
        "prompt_tokens": c.prompt_tokens,
        "generation_tokens": c.generation_tokens,
        "forward_steps": c.forward_steps,
        "prefill_steps": c.prefill_steps,
        "decode_steps": c.decode_steps,
        "request_decode_steps": c.request_steps,
        "num_drafts": drafts,
        "num_draft_tokens": c.num_draft_tokens,
        "num_accepted_tokens": c.num_accepted_tokens,
        "accepted_per_position": list(c.accepted_per_pos),
        "acceptance_length": (1 + c.num_accepted_tokens / drafts) if drafts else None,
        "per_position_acceptance": [a / drafts for a in c.accepted_per_pos] if drafts else [],
        "tokens_per_decode_step": (
            (c.num_accepted_tokens + c.request_steps) / c.request_steps if c.request_steps else None
        ),
    }
    return {**meta, "totals": totals, "requests": [r.record() for r in engine.requests]}
