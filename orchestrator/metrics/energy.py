"""A measurement's energy, power and clocks, from the GPU samples the agent took around it.

Energy is the driver's counter read at the window's start and end (interpolated between the
samples either side: exact to the counter's mJ, whatever the sampling rate); the power
integral over the same window is the cross-check, and the figure itself where there is no
counter (nvidia-smi, or a GPU older than Volta). Power on Ampere and newer is already a 1 s
average, so a window much shorter than a few seconds is not worth a figure: the cross-check
says so. A figure the samples cannot support is kept but flagged, with the reason:

- a gap of more than ``MAX_GAP_S`` between two samples of a GPU, or at the window's edges;
- the counter and the integral differ by more than ``MAX_DISAGREEMENT`` of the counter;
- no counter: the integral is the figure (``energy_source`` "integral").

Pure functions over ``GpuSample`` (the wire's record); no I/O.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ConfigDict

from orchestrator.remote.telemetry import GpuSample, reason_names

TELEMETRY_FILE = "telemetry.csv"  # a measurement's GPU samples, beside its summary.json
MAX_GAP_S = 3.0
MAX_DISAGREEMENT = 0.05
IDLE_REASON = "gpu_idle"  # a clock-event reason that is no throttling
# The clock-event reasons that slow a busy GPU below what it was asked for (the others say it
# idles, or follows a clock someone set: no throttling); a share of the window under them of at
# least THROTTLE_MIN_SHARE is reported as the run's throttling.
THROTTLING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
THROTTLE_MIN_SHARE = 0.01
NO_COUNTER = (
    "no energy counter (nvidia-smi, or a GPU before Volta): the energy is the power integral"
)


@dataclass(frozen=True)
class GpuWindow:
    """One GPU over the window."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    gpu: int
    samples: int
    energy_j: float | None
    energy_source: str | None  # "counter" | "integral"
    integral_j: float | None
    power_mean_w: float | None
    power_max_w: float | None
    sm_mhz_mean: float | None
    sm_mhz_stdev: float | None
    sm_mhz_busy: float | None  # median over the samples where the GPU was not idle
    mem_used_peak_mib: int | None
    throttled_s: dict[str, float] = field(default_factory=dict)  # reason -> seconds
    max_gap_s: float = 0.0
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Energy:
    """The measurement's figures over all its GPUs; ``valid`` False names ``problems``.

    Also the persisted record (``RunResult.energy``), validated by pydantic as it stands."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    window_s: float
    gpus: tuple[GpuWindow, ...]
    energy_j: float | None
    energy_source: str | None
    j_per_output_token: float | None
    j_per_token: float | None
    output_tok_s_per_w: float | None
    power_mean_w: float | None
    power_max_w: float | None
    sm_mhz_mean: float | None = None  # over the run's GPUs
    sm_mhz_busy: float | None = None  # over the run's GPUs, their busy samples only
    throttled_share: float | None = None  # of the window, the most of any GPU and reason
    throttle_reasons: tuple[str, ...] = ()  # those over THROTTLE_MIN_SHARE, the longest first
    problems: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems


def _at(points: Sequence[tuple[float, float]], t: float, hold: float = 0.0) -> float | None:
    """The value at ``t`` by linear interpolation; up to ``hold`` s outside the points' span,
    the nearest point's value; None further out."""
    if not points:
        return None
    if t < points[0][0]:
        return points[0][1] if points[0][0] - t <= hold else None
    if t > points[-1][0]:
        return points[-1][1] if t - points[-1][0] <= hold else None
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def _counter_at(
    counter: Sequence[tuple[float, float]], power: Sequence[tuple[float, float]], t: float
) -> float | None:
    """The energy counter (mJ) at ``t``: interpolated, or carried past the last (before the
    first) reading by the power then, up to ``MAX_GAP_S`` (a sampler's last read may precede
    the window's end by part of an interval)."""
    inside = _at(counter, t)
    if inside is not None or not counter:
        return inside
    edge_t, edge_mj = counter[-1] if t > counter[-1][0] else counter[0]
    watts = _at(power, edge_t, hold=MAX_GAP_S)
    if abs(t - edge_t) > MAX_GAP_S or watts is None:
        return None
    return edge_mj + watts * 1000.0 * (t - edge_t)


def _clipped(
    points: Sequence[tuple[float, float]], start: float, end: float
) -> list[tuple[float, float]]:
    """The points inside [start, end] with the values at both ends added (interpolated, or
    held from the nearest point up to ``MAX_GAP_S`` away)."""
    inside = [(t, v) for t, v in points if start < t < end]
    first, last = _at(points, start, MAX_GAP_S), _at(points, end, MAX_GAP_S)
    head = [(start, first)] if first is not None else []
    tail = [(end, last)] if last is not None else []
    return head + inside + tail


def _integral(points: Sequence[tuple[float, float]]) -> float:
    """Trapezoids over the points (seconds x watts = joules)."""
    return sum(
        (t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False)
    )


def _max_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] with no sample (edges included)."""
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def _throttled(samples: Sequence[GpuSample], start: float, end: float) -> dict[str, float]:
    """Seconds of the window under each clock-event reason (each sample holds until the next)."""
    out: dict[str, float] = defaultdict(float)
    for s, following in zip(samples, [*samples[1:], None], strict=False):
        if s.reasons is None:
            continue
        t0, t1 = max(s.t, start), min(following.t if following else end, end)
        if t1 <= t0:
            continue
        for name in reason_names(s.reasons):
            if name != IDLE_REASON:
                out[name] += t1 - t0
    return dict(out)


def _source(counted: float | None, integral: float | None) -> str | None:
    if counted is not None:
        return "counter"
    return "integral" if integral is not None else None


def gpu_window(gpu: int, samples: Sequence[GpuSample], start: float, end: float) -> GpuWindow:
    """One GPU's figures over [start, end] from its samples (in time order)."""
    problems: list[str] = []
    gap = _max_gap([s.t for s in samples], start, end)
    if gap > MAX_GAP_S:
        problems.append(f"GPU {gpu}: no sample for {gap:.1f} s of the window (> {MAX_GAP_S:g} s)")
    power = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    window_power = _clipped(power, start, end)
    covered = len(window_power) > 1 and window_power[0][0] == start and window_power[-1][0] == end
    integral = _integral(window_power) if covered else None
    counter = [(s.t, float(s.energy_mj)) for s in samples if s.energy_mj is not None]
    first, last = _counter_at(counter, power, start), _counter_at(counter, power, end)
    counted = (last - first) / 1000.0 if first is not None and last is not None else None
    if counted is not None and counted <= 0 < end - start:
        # a counter that stood still or went back (a driver reload, a reset): not a figure
        problems.append(
            f"GPU {gpu}: the energy counter did not advance over the window ({counted:.1f} J): "
            "the power integral is the figure"
        )
        counted = None
    elif counted is None and counter:
        problems.append(
            f"GPU {gpu}: the energy counter's reads do not cover the window: the power "
            "integral is the figure"
        )
    if counted is not None and integral is not None and counted > 0:
        off = abs(integral - counted) / counted
        if off > MAX_DISAGREEMENT:
            problems.append(
                f"GPU {gpu}: the energy counter ({counted:.1f} J) and the power integral "
                f"({integral:.1f} J) differ by {off:.1%} (> {MAX_DISAGREEMENT:.0%})"
            )
    elif counted is None and not counter:
        problems.append(f"GPU {gpu}: {NO_COUNTER}")
    if counted is None and integral is None:
        problems.append(
            f"GPU {gpu}: no energy figure (neither counter nor power covers the window)"
        )
    inside = [s for s in samples if start <= s.t <= end]
    watts = [s.power_w for s in inside if s.power_w is not None]
    clocks = [s.sm_mhz for s in inside if s.sm_mhz is not None]
    memory = [s.mem_used_mib for s in inside if s.mem_used_mib is not None]
    busy = [s.sm_mhz for s in inside if s.sm_mhz is not None and _busy(s)]
    return GpuWindow(
        gpu=gpu,
        samples=len(inside),
        energy_j=counted if counted is not None else integral,
        energy_source=_source(counted, integral),
        integral_j=integral,
        power_mean_w=statistics.fmean(watts) if watts else None,
        power_max_w=max(watts) if watts else None,
        sm_mhz_mean=statistics.fmean(clocks) if clocks else None,
        sm_mhz_stdev=statistics.pstdev(clocks) if len(clocks) > 1 else None,
        sm_mhz_busy=statistics.median(busy) if busy else None,
        mem_used_peak_mib=max(memory) if memory else None,
        throttled_s=_throttled(samples, start, end),
        max_gap_s=gap,
        problems=tuple(problems),
    )


def _together(samples: Sequence[GpuSample], start: float, end: float) -> list[float]:
    """The board power of all the run's GPUs together at each read in the window: each GPU's
    latest power at that moment (nvidia-smi stamps each GPU's line on its own, so reads of
    one moment differ by milliseconds), once every GPU has one."""
    latest: dict[int, float] = {}
    gpus = {s.gpu for s in samples}
    out = []
    for s in sorted(samples, key=lambda s: s.t):
        if s.power_w is None:
            continue
        latest[s.gpu] = s.power_w
        if start <= s.t <= end and len(latest) == len(gpus):
            out.append(sum(latest.values()))
    return out


def _busy(sample: GpuSample) -> bool:
    """Not idle: the idle clock-event reason unset, else (no reasons read) some utilisation."""
    if sample.reasons is not None:
        return IDLE_REASON not in reason_names(sample.reasons)
    return bool(sample.util_pct)


def _throttling(gpus: Sequence[GpuWindow], window: float) -> tuple[float | None, tuple[str, ...]]:
    """(the largest share of the window any GPU spent under one throttling reason, the
    reasons over THROTTLE_MIN_SHARE, the longest first); (None, ()) without a window."""
    if window <= 0 or not gpus:
        return None, ()
    shares: dict[str, float] = {}
    for g in gpus:
        for reason, seconds in g.throttled_s.items():
            if reason in THROTTLING_REASONS:
                shares[reason] = max(shares.get(reason, 0.0), min(1.0, seconds / window))
    found = sorted(
        (r for r, v in shares.items() if v >= THROTTLE_MIN_SHARE),
        key=shares.__getitem__,
        reverse=True,
    )
    return max(shares.values(), default=0.0), tuple(found)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def window_energy(
    samples: Sequence[GpuSample],
    start: float,
    end: float,
    *,
    output_tokens: int,
    total_tokens: int,
) -> Energy:
    """The measurement's figures: the window [start, end] (epoch s, the load generator's),
    its output and total (input + output) token counts."""
    by_gpu: dict[int, list[GpuSample]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.t):
        by_gpu[s.gpu].append(s)
    gpus = tuple(gpu_window(g, by_gpu[g], start, end) for g in sorted(by_gpu))
    uncounted = [g.gpu for g in gpus if g.energy_source == "integral"]
    problems = [p for g in gpus for p in g.problems if not p.endswith(NO_COUNTER)]
    if uncounted:  # said once for the run: nvidia-smi has no counter on any GPU
        names = ", ".join(str(g) for g in uncounted)
        problems.append(f"GPU{'s' * (len(uncounted) > 1)} {names}: {NO_COUNTER}")
    if not gpus:
        problems.append("no GPU sample in the window")
    known = [g.energy_j for g in gpus]
    energy = sum(e for e in known if e is not None) if gpus and None not in known else None
    sources = {g.energy_source for g in gpus}
    window = end - start
    power = energy / window if energy is not None and window > 0 else None
    means = [g.power_mean_w for g in gpus]
    together = _together(samples, start, end)
    throttled, reasons = _throttling(gpus, window)
    return Energy(
        window_s=window,
        gpus=gpus,
        energy_j=energy,
        energy_source=sources.pop() if len(sources) == 1 else ("mixed" if sources else None),
        j_per_output_token=_ratio(energy, output_tokens),
        j_per_token=_ratio(energy, total_tokens),
        output_tok_s_per_w=_ratio(_ratio(output_tokens, window), power),
        power_mean_w=sum(m for m in means if m is not None)
        if means and None not in means
        else None,
        power_max_w=max(together) if together else None,
        sm_mhz_mean=_mean([g.sm_mhz_mean for g in gpus]),
        sm_mhz_busy=_mean([g.sm_mhz_busy for g in gpus]),
        throttled_share=throttled,
        throttle_reasons=reasons,
        problems=tuple(problems),
    )


def telemetry_csv(samples: Sequence[GpuSample]) -> str:
    """The samples as ``telemetry.csv``: a header of ``GpuSample``'s fields, a row each; an
    absent value is an empty cell."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GpuSample._fields)
    for s in samples:
        writer.writerow("" if v is None else v for v in s)
    return out.getvalue()


def read_telemetry_csv(text: str) -> list[GpuSample]:
    """``telemetry_csv``'s text back as samples (for reports drawn from a results folder)."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None:
        return []
    if tuple(header) != GpuSample._fields:
        raise ValueError(f"{TELEMETRY_FILE}: unexpected header {header}")
    kinds = (float, int, int, float, int, int, int, int, int, int)
    samples = []
    for row in rows:
        values = [None if cell == "" else kind(cell) for kind, cell in zip(kinds, row, strict=True)]
        samples.append(GpuSample._make(values))
    return samples
