"""Nights: the simulated engine plays one night of a nightly history.

A nightly regression sweep (``orch nightly``) runs the same playbook night after night and must
tell real regressions from a machine's ordinary night-to-night variation. To test that end to
end on the simulated hosts, each launch reads which night it is, how noisy the machine is, and
which changes were injected from which night on. Everything is a pure function of the knobs, so
a history of 30 nights is reproducible bit for bit.

Environment (read once at start; they reach the engine through the host's ``env`` in hosts.yaml,
e.g. ``ORCH_SIM_NIGHT: ${NIGHT}``):

    ORCH_SIM_NIGHT    the night number, an integer >= 0 (default 0).
    ORCH_SIM_NOISE    relative standard deviation of the night-to-night variation, a number in
                      [0, 1] (default 0: none), e.g. "0.03". Each night draws one log-normal
                      factor (median 1, sigma = NOISE) per (seed, night, engine, model, method)
                      that multiplies the decode step and the prefill time, so throughput, TPOT
                      and TTFT move together as on a real machine. The same night gives the
                      same factor on every launch (repeats within a night differ only by the
                      simulator's request-level randomness); another night, another factor.
    ORCH_SIM_SEED     an integer seed for those draws (default 0): another seed, another history.
    ORCH_SIM_CHANGE   changes injected from a given night on, comma-separated:
                        throughput:-10%@20  decode step time x 1/(1 - 0.10) from night 20
                                            (single-stream decode tok/s -10%, TPOT +11%)
                        latency:+15%@20     prefill time x 1.15 from night 20 (TTFT +15% at
                                            low load; the decode step is unchanged)
                        acceptance:-10%@20  per-position acceptance rates scaled by one factor so
                                            the expected acceptance length (1 + sum of rates) is
                                            x 0.90 from night 20 (rates capped at 1, length >= 1;
                                            no effect without speculative decoding)
                        drafter:broken@20   from night 20 the drafter collapses as a DFlash drafter
                                            that does not fit its target (profiles "dflash-broken":
                                            acceptance length ~1.05), step cost unchanged
                        throttle:sw_thermal@20  from night 20 the GPUs run throttled: busy, their SM
                                            clock is 1410 MHz instead of 1740 and nvidia-smi
                                            reports the reason (sw_thermal, hw_thermal,
                                            sw_power_cap or hw_slowdown) active; every step and
                                            prefill takes 1740/1410 as long (decode tok/s -19%)
                      Percentages need a sign and must be above -100%; nights are integers >= 0.
                      Several changes compound (two throughput:-5% steps give x 1/0.95^2).

A malformed knob makes the engine exit 1 at start with one ``ValueError`` line naming the knob
and the expected format, as a real engine rejects a bad setting. The ground truth
(``ground-truth-<pid>.json`` and ``/sim/ground_truth``) records the night under ``"night"``:
night, noise, seed, key, factor, every change and the active ones, and the profile's numbers
before the night was applied (``base_*``); its ``"profile"`` block holds the numbers played.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

from orchestrator.sim.gpus import BUSY_SM_MHZ, THROTTLE_REASONS, THROTTLED_SM_MHZ
from orchestrator.sim.profiles import RATES
from orchestrator.sim.timing import SpecProfile, TimingProfile

ENV_NIGHT = "ORCH_SIM_NIGHT"
ENV_NOISE = "ORCH_SIM_NOISE"
ENV_SEED = "ORCH_SIM_SEED"
ENV_CHANGE = "ORCH_SIM_CHANGE"

KINDS = ("throughput", "latency", "acceptance", "drafter", "throttle")
CHANGE_FORMAT = (
    "expected KIND:+P%@NIGHT or KIND:-P%@NIGHT with KIND throughput, latency or acceptance, "
    "drafter:broken@NIGHT or throttle:REASON@NIGHT (REASON sw_thermal, hw_thermal, "
    "sw_power_cap or hw_slowdown), comma-separated (e.g. throughput:-10%@20,acceptance:-10%@25)"
)
_PERCENT = re.compile(r"[+-][0-9]+(\.[0-9]+)?%")
_INT = re.compile(r"[0-9]+")
_NORMAL = NormalDist()


class NightsError(ValueError):
    """A malformed night knob: the message names the knob, the value and the expected format."""


@dataclass(frozen=True)
class Change:
    """One injected change: ``kind`` from night ``night`` on, as ``text`` wrote it."""

    kind: str  # throughput | latency | acceptance | drafter | throttle
    percent: float  # signed relative change in %; 0 for drafter:broken and throttle
    night: int  # the first night it applies to
    text: str
    reason: str | None = None  # throttle: the clock-event reason the GPUs report

    def active(self, night: int) -> bool:
        return night >= self.night


@dataclass(frozen=True)
class NightSettings:
    """The knobs as read from the environment, before the launch's profile is known."""

    night: int = 0
    noise: float = 0.0
    seed: int = 0
    changes: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Night:
    """What a launch plays: its settings, the drawn factor, and the profile before the night."""

    settings: NightSettings
    key: str
    factor: float
    base: TimingProfile

    @property
    def active(self) -> tuple[Change, ...]:
        return tuple(c for c in self.settings.changes if c.active(self.settings.night))

    @property
    def throttle(self) -> str | None:
        """The reason the GPUs are throttled for tonight, None when they are not."""
        return next((c.reason for c in self.active if c.kind == "throttle"), None)

    def truth(self) -> dict[str, Any]:
        """The ``"night"`` block of the ground truth."""
        spec = self.base.spec
        s = self.settings
        return {
            "night": s.night,
            "noise": s.noise,
            "seed": s.seed,
            "key": self.key,
            "factor": self.factor,
            "changes": [_change_truth(c, s.night) for c in s.changes],
            "active": [c.text for c in self.active],
            "base_step_s": self.base.step_s,
            "base_prefill_base_s": self.base.prefill_base_s,
            "base_prefill_per_token_s": self.base.prefill_per_token_s,
            "base_expected_acceptance_length": spec.expected_acceptance_length() if spec else 1.0,
        }


def _change_truth(change: Change, night: int) -> dict[str, Any]:
    return {
        "kind": change.kind,
        "percent": change.percent,
        "reason": change.reason,
        "from_night": change.night,
        "text": change.text,
        "active": change.active(night),
    }


# -- reading the knobs


def read_env(environ: Mapping[str, str]) -> NightSettings:
    """The four knobs, validated; ``NightsError`` with a one-line message when one is malformed."""
    night = _int_knob(environ, ENV_NIGHT)
    seed = _int_knob(environ, ENV_SEED)
    raw = (environ.get(ENV_NOISE) or "").strip()
    noise = 0.0
    if raw:
        try:
            noise = float(raw)
        except ValueError:
            noise = math.nan
        if not 0.0 <= noise <= 1.0:  # also rejects nan
            raise NightsError(
                f"{ENV_NOISE}={raw!r}: expected a relative standard deviation between 0 and 1, "
                'e.g. "0.03" for 3%'
            )
    return NightSettings(night, noise, seed, tuple(parse_changes(environ.get(ENV_CHANGE) or "")))


def _int_knob(environ: Mapping[str, str], name: str) -> int:
    raw = (environ.get(name) or "").strip()
    if not raw:
        return 0
    if not _INT.fullmatch(raw):
        raise NightsError(f"{name}={raw!r}: expected an integer >= 0")
    return int(raw)


def parse_changes(text: str) -> list[Change]:
    """``ORCH_SIM_CHANGE``'s value as a list of changes (empty text: none)."""
    if not text.strip():
        return []
    return [_parse_one(item.strip(), text) for item in text.split(",")]


def _parse_one(item: str, whole: str) -> Change:
    def bad(problem: str) -> NightsError:
        return NightsError(f"{ENV_CHANGE}={whole!r}: {problem}; {CHANGE_FORMAT}")

    if not item:
        raise bad("an empty item")
    head, at, night_text = item.rpartition("@")
    if not at:
        raise bad(f"{item!r} has no @NIGHT")
    if not _INT.fullmatch(night_text.strip()):
        raise bad(f"the night in {item!r} is not an integer >= 0")
    kind, colon, value = (part.strip() for part in head.partition(":"))
    if kind not in KINDS:
        raise bad(f"unknown kind {kind!r} in {item!r}")
    if not colon or not value:
        raise bad(f"{item!r} has no value after {kind}:")
    night = int(night_text)
    if kind == "drafter":
        if value != "broken":
            raise bad(f"drafter changes know only 'broken', not {value!r}")
        return Change(kind, 0.0, night, item)
    if kind == "throttle":
        if value not in THROTTLE_REASONS:
            raise bad(f"throttle reasons are {', '.join(THROTTLE_REASONS)}, not {value!r}")
        return Change(kind, 0.0, night, item, reason=value)
    if not _PERCENT.fullmatch(value):
        raise bad(f"{value!r} in {item!r} is not a signed percentage such as -10%")
    percent = float(value[:-1])
    if percent <= -100.0:
        raise bad(f"{value!r} in {item!r} must be above -100%")
    return Change(kind, percent, night, item)


# -- the night's draw and its effect on a profile


def night_key(engine: str, model: str, method: str | None) -> str:
    """What the night's factor is drawn for: one factor per engine, model and method."""
    return f"{engine}|{model}|{method or 'none'}"


def night_factor(seed: int, night: int, key: str, noise: float) -> float:
    """The night's multiplicative factor on step and prefill times: log-normal, median 1,
    sigma ``noise``. Drawn from a SHA-256 of (seed, night, key) through the normal quantile, so
    it depends on nothing else (no Python RNG version, no process state)."""
    if noise <= 0.0:
        return 1.0
    digest = hashlib.sha256(f"orch-sim-night:{seed}:{night}:{key}".encode()).digest()
    uniform = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return math.exp(noise * _NORMAL.inv_cdf(uniform))


def apply(
    profile: TimingProfile,
    night: int,
    changes: Sequence[Change],
    factor: float = 1.0,
) -> TimingProfile:
    """``profile`` as played on ``night``: the noise ``factor`` on step and prefill times, then
    every change active that night (a broken drafter first, then acceptance, then timings)."""
    active = [c for c in changes if c.active(night)]
    step = profile.step_s * factor
    prefill_base = profile.prefill_base_s * factor
    prefill_token = profile.prefill_per_token_s * factor
    spec = profile.spec
    if spec is not None and any(c.kind == "drafter" for c in active):
        spec = broken_drafter(spec)
    ratio = math.prod(1 + c.percent / 100 for c in active if c.kind == "acceptance")
    if spec is not None and ratio != 1.0:
        spec = scale_acceptance(spec, ratio)
    for c in active:
        if c.kind == "throughput":
            step /= 1 + c.percent / 100
        elif c.kind == "latency":
            prefill_base *= 1 + c.percent / 100
            prefill_token *= 1 + c.percent / 100
    if any(c.kind == "throttle" for c in active):  # one clock, however many reasons
        slower = BUSY_SM_MHZ / THROTTLED_SM_MHZ
        step, prefill_base, prefill_token = (
            x * slower for x in (step, prefill_base, prefill_token)
        )
    return replace(
        profile,
        step_s=step,
        prefill_base_s=prefill_base,
        prefill_per_token_s=prefill_token,
        spec=spec,
    )


def broken_drafter(spec: SpecProfile) -> SpecProfile:
    """The drafter that does not fit its target: the "dflash-broken" rates, K positions."""
    broken = RATES["dflash-broken"]
    k = spec.num_draft_tokens
    rates = tuple(broken[:k]) + (0.0,) * max(0, k - len(broken))
    return replace(spec, position_rates=rates)


def scale_acceptance(spec: SpecProfile, ratio: float) -> SpecProfile:
    """Scale every position's rate by one factor so 1 + sum(rates) becomes ``ratio`` times what it
    was; rates stay non-increasing (capped at 1) and the length never drops below 1."""
    total = sum(spec.position_rates)
    if total <= 0.0:
        return spec
    target = max(0.0, (1.0 + total) * ratio - 1.0)
    scale = target / total
    return replace(spec, position_rates=tuple(min(1.0, r * scale) for r in spec.position_rates))


def play(settings: NightSettings, profile: TimingProfile, key: str) -> tuple[TimingProfile, Night]:
    """The launch's profile for its night, and the record of what was applied."""
    factor = night_factor(settings.seed, settings.night, key, settings.noise)
    played = apply(profile, settings.night, settings.changes, factor)
    return played, Night(settings, key, factor, profile)
