"""Where orch's ok region ends: rungs added to a load shape until orch marks one failed.

A shape is a closed loop at a fixed concurrency and request length; its rungs differ in the
simulator's step, so in the tokens a second the server offers. After a shape's base rungs, the
next rung is chosen from what orch reported at those so far (``next_step``):

- every rung ok: the step halved (the offered rate doubled), down to ``MIN_STEP_MS``;
- every rung failed: the step doubled, up to ``MAX_STEP_MS``;
- both: the geometric middle of the slowest failed step and the fastest ok step slower than
  it, while those two are more than ``FINEST`` apart.

The caller bounds the rungs added per shape, so a run stays bounded whatever orch reports.
"""

from __future__ import annotations

import math

from benchmarks.client_sim import Case

# below about 2 ms a step the simulator itself falls behind and writes chunks back to back,
# which looks like a late client (docs/guarantees.md, "What the client cannot tell apart")
MIN_STEP_MS = 2.0
MAX_STEP_MS = 800.0  # 1024 streams of 32 steps, 2 waves: 51 s a rung
FINEST = 1.2  # rungs closer than this apart say nothing more on a noisy machine


def next_step(ok_at: dict[float, bool]) -> float | None:
    """The step (ms) of the next rung, given orch's verdict at each step measured so far
    (True: ok); None when the shape's ok region's end is found, or the limits are reached."""
    if not ok_at:
        return None
    failed = [s for s, ok in ok_at.items() if not ok]
    if not failed:
        fastest = min(ok_at)
        return max(fastest / 2, MIN_STEP_MS) if fastest > MIN_STEP_MS * 1.05 else None
    first_failed = max(failed)  # the lowest offered rate orch could not measure
    slower_ok = [s for s, ok in ok_at.items() if ok and s > first_failed]
    if not slower_ok:
        return first_failed * 2 if first_failed * 2 <= MAX_STEP_MS else None
    last_ok = min(slower_ok)
    if last_ok / first_failed <= FINEST:
        return None
    return round(math.sqrt(last_ok * first_failed), 2)


def rung(base: Case, step_ms: float) -> Case:
    """``base``'s shape at ``step_ms``: about as long a window (at least 2 waves)."""
    steps = base.max_tokens // base.chunk_tokens
    window_ms = base.num_prompts / base.concurrency * steps * base.step_ms
    waves = max(2, round(window_ms / (steps * step_ms)))
    return Case(
        base.mode,
        base.concurrency,
        step_ms,
        base.chunk_tokens,
        base.max_tokens,
        base.concurrency * waves,
        ladder=base.ladder,
        added=True,
    )
