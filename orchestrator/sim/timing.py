"""The simulator's timing and acceptance model: pure functions, deterministic given a seed.

Durations here are in *model* seconds (what real hardware would take); the engine divides every
sleep by ``ORCH_SIM_SPEED``. Under speculative decoding one step verifies ``K`` drafted tokens:
position ``i`` is accepted with the profile's conditional probability provided every earlier
position was accepted, and the step yields the accepted drafts plus one token from the target
(the bonus token), so an SSE chunk carries ``1 + accepted`` tokens.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecProfile:
    method: str  # vLLM's name for it: "mtp", "dflash", "eagle3", "ngram", "draft_model", ...
    num_draft_tokens: int  # K: tokens drafted per step
    # Unconditional acceptance rate per position (what vLLM reports per position); non-increasing.
    position_rates: tuple[float, ...]

    def conditional(self) -> tuple[float, ...]:
        """P(position i accepted | positions < i accepted), from the unconditional rates."""
        out: list[float] = []
        prev = 1.0
        for rate in self.position_rates:
            out.append(0.0 if prev <= 0 else min(1.0, rate / prev))
            prev = rate
        return tuple(out)

    def expected_acceptance_length(self) -> float:
        """1 + expected accepted drafts per step (the bonus token counts)."""
        return 1.0 + sum(self.position_rates)


@dataclass(frozen=True)
class TimingProfile:
    name: str
    step_s: float  # one decode step (drafting + verification) with one running request
    batch_slope: float  # extra fraction of step_s per additional running request
    prefill_base_s: float
    prefill_per_token_s: float
    spec: SpecProfile | None = None

    def expected_tokens_per_s(self) -> float:
        """Single-stream decode speed the profile is calibrated to (model time)."""
        length = self.spec.expected_acceptance_length() if self.spec else 1.0
        return length / self.step_s


def decode_step_s(profile: TimingProfile, batch: int) -> float:
    """Latency of one decode step with ``batch`` running requests (grows with the batch)."""
    return profile.step_s * (1.0 + profile.batch_slope * max(0, batch - 1))


def prefill_s(profile: TimingProfile, num_tokens: int) -> float:
    return profile.prefill_base_s + profile.prefill_per_token_s * max(0, num_tokens)


def sample_accepted(rng: random.Random, conditional: tuple[float, ...], limit: int) -> int:
    """Number of leading draft positions accepted this step, at most ``limit``.

    One uniform draw per position tried, so the sequence of draws (and the result) is a pure
    function of the RNG state.
    """
    accepted = 0
    for p in conditional[: max(0, limit)]:
        if rng.random() >= p:
            break
        accepted += 1
    return accepted


def natural_length(rng: random.Random, *, median: float = 350.0, sigma: float = 0.7) -> int:
    """Where a request would stop on its own (EOS) when ``ignore_eos`` is not set."""
    value = math.exp(math.log(median) + sigma * rng.gauss(0.0, 1.0))
    return int(min(4096, max(8, round(value))))


def request_rng(seed: int, key: str) -> random.Random:
    """Per-request stream of randomness: the same seed and request key give the same draws."""
    return random.Random(f"{seed}:{key}")
