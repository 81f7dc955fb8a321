"""A fixed timing model, for measuring clients rather than engines.

A client's accuracy is its error against what the server really did; that error is easiest to
read when the server does something simple and known. Two knobs replace the launch's profile:

    ORCH_SIM_STEP_MS       every decode step takes this many wall-clock milliseconds, whatever
                           the batch (the profile's batch slope is dropped; ``ORCH_SIM_SPEED``
                           does not scale it: it is wall time already). A prompt's prefill
                           takes no time of its own, as if chunked into the running step: its
                           first token comes when it is admitted, and the streams already
                           decoding never wait for it, so each streams exactly one chunk per
                           step and a closed loop of C streams offers C x N / step tokens/s.
    ORCH_SIM_CHUNK_TOKENS  every decode step gives every running request exactly this many
                           tokens (one SSE chunk), the last step of a request excepted when
                           ``max_tokens`` cuts it short. Above 1 it needs a speculative launch
                           drafting at least N - 1 tokens: its first N - 1 drafts are always
                           accepted and the rest never, so /metrics, the log and the ground
                           truth all report an acceptance length of N.

Either may be set alone; a value that is not a positive number is a start-up error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.sim.timing import SpecProfile, TimingProfile

ENV_STEP_MS = "ORCH_SIM_STEP_MS"
ENV_CHUNK_TOKENS = "ORCH_SIM_CHUNK_TOKENS"


class FixedTimingError(ValueError):
    """A knob with a value the simulator cannot use (the message names it)."""


@dataclass(frozen=True)
class FixedTiming:
    step_ms: float | None = None
    chunk_tokens: int | None = None

    @property
    def active(self) -> bool:
        return self.step_ms is not None or self.chunk_tokens is not None


def read_fixed(environ: Mapping[str, str]) -> FixedTiming:
    """The two knobs from the environment (unset or empty: not fixed)."""
    step = environ.get(ENV_STEP_MS, "").strip()
    chunk = environ.get(ENV_CHUNK_TOKENS, "").strip()
    step_ms = chunk_tokens = None
    if step:
        try:
            step_ms = float(step)
        except ValueError:
            step_ms = -1.0
        if not step_ms > 0 or step_ms == float("inf"):
            raise FixedTimingError(f"{ENV_STEP_MS}={step!r}: expected milliseconds > 0")
    if chunk:
        if not chunk.isdigit() or int(chunk) < 1:
            raise FixedTimingError(f"{ENV_CHUNK_TOKENS}={chunk!r}: expected a whole number >= 1")
        chunk_tokens = int(chunk)
    return FixedTiming(step_ms, chunk_tokens)


def apply_fixed(profile: TimingProfile, fixed: FixedTiming, speed: float) -> TimingProfile:
    """``profile`` with the fixed step and tokens per chunk; ``speed`` is ``ORCH_SIM_SPEED``
    (the engine divides model time by it, so a wall-clock step is stored multiplied by it)."""
    out = profile
    notes = []
    if fixed.step_ms is not None:
        step = fixed.step_ms / 1000.0 * speed
        out = replace(
            out, step_s=step, batch_slope=0.0, prefill_base_s=0.0, prefill_per_token_s=0.0
        )
        notes.append(f"fixed step {fixed.step_ms:g} ms")
    if fixed.chunk_tokens is not None:
        out = replace(out, spec=_fixed_spec(profile.spec, fixed.chunk_tokens))
        notes.append(f"{fixed.chunk_tokens} tokens per chunk")
    return replace(out, name=f"{out.name}, {', '.join(notes)}") if notes else out


def _fixed_spec(spec: SpecProfile | None, tokens: int) -> SpecProfile | None:
    if spec is None:
        if tokens == 1:
            return None
        raise FixedTimingError(
            f"{ENV_CHUNK_TOKENS}={tokens} needs a speculative launch (one that drafts at least "
            f"{tokens - 1} tokens per step); without one every chunk carries 1 token"
        )
    k = spec.num_draft_tokens
    if tokens - 1 > k:
        raise FixedTimingError(
            f"{ENV_CHUNK_TOKENS}={tokens} needs {tokens - 1} drafted tokens per step; this "
            f"launch drafts {k} (num_speculative_tokens)"
        )
    rates = (1.0,) * (tokens - 1) + (0.0,) * (k - tokens + 1)
    return replace(spec, position_rates=rates)
