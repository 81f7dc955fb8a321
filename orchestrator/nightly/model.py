"""A model of a night: how far one case's metric moves from night to night, and the tests a
night, a run of nights and a slow trend are judged by (issue 24).

Real nights move together: a restart, the neighbours, the GPUs' clocks shift every repeat of a
night at once. So a night is judged against the spread of whole nights, estimated from the
baseline nights' means (each already carries its own repeats' noise), never only against
tonight's repeats, which see the spread within a night alone.

- ``NightModel``: the baseline's center (median) and the spread of a night's mean around it: the
  nights' standard deviation, winsorized at ``WINSOR_MADS`` MADs from ``ROBUST_NIGHTS`` nights on
  (one bad night neither widens it nor moves the center), and never below the within-night
  share (the repeats' own standard error), which a night's mean carries whatever the history.
- ``night_p``: one night against the model, a Student-t prediction (k - 1 degrees of freedom).
- ``run_p``: the last r nights together. Two nights: the weaker of the two, each tested alone (a
  regression is two bad nights, not one very bad one); three or more: their mean with the worst
  night left out, so a one-night blip never carries a run by itself.
- ``trend``: Kendall's tau of the last nights against their order (one-sided), with the Theil-Sen
  line's total change: a drift of small nights that no single night or run shows.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy
from scipy import special as scipy_special
from scipy import stats

WINSOR_MADS = 3.0  # a baseline night further than this from the median counts as this far
ROBUST_NIGHTS = 7  # from this many nights on the spread is winsorized (a MAD of fewer is noise)
MAD_SD = 1.4826  # MAD x this estimates a normal's standard deviation
MIN_TREND_NIGHTS = 10  # fewer nights say nothing of a trend
Z_95 = 1.959964


@dataclass(frozen=True)
class NightModel:
    """A baseline's center and the spread of a night's mean about it (``within``: the part of
    it a night's own repeats explain, None when unknown), over ``k`` nights."""

    center: float
    spread: float
    within: float | None
    k: int

    @classmethod
    def of(cls, means: Sequence[float], within: Sequence[float] = ()) -> NightModel | None:
        """From the baseline nights' means and their standard errors (sd / sqrt(n)); None with
        fewer than 3 nights, which say nothing of a spread."""
        k = len(means)
        if k < 3:
            return None
        center = statistics.median(means)
        share = math.sqrt(statistics.fmean([w * w for w in within])) if within else None
        floor = max(share or 0.0, 1e-9 * abs(center), 1e-12)
        return cls(center, max(robust_sd(means), floor), share, k)

    @property
    def between(self) -> float:
        """The night-to-night part of the spread: what more repeats cannot average away."""
        within = self.within or 0.0
        return math.sqrt(max(0.0, self.spread**2 - within**2))

    def se(self, nights: int = 1) -> float:
        """The standard error of ``nights`` new nights' mean against the center."""
        return self.spread * math.sqrt(1.0 / nights + 1.0 / self.k)

    def night_p(self, worse: float, own: float | None = None) -> float:
        """One-sided p that a night ``worse`` than the center (positive: worse) is an ordinary
        night of this baseline. ``own``: the night's own standard error (its repeats' sd /
        sqrt(n)); where it is above the baseline's within-night share, the excess widens the
        prediction (a night whose repeats scattered says less)."""
        extra = max(0.0, own * own - (self.within or 0.0) ** 2) if own is not None else 0.0
        return t_sf(worse / math.sqrt(self.se() ** 2 + extra), self.k - 1)

    def run_p(
        self, worse: Sequence[float], own: Sequence[float | None] = ()
    ) -> tuple[float, float]:
        """(p, estimate) of a run of nights, each ``worse`` than the center (see the module
        docstring; ``own``: their standard errors, as ``night_p``); the estimate is what the p
        tested, in the metric's units."""
        if len(worse) < 2:
            raise ValueError("a run is two nights or more")
        if len(worse) == 2:
            owns = list(own) or [None, None]
            p = max(self.night_p(w, o) for w, o in zip(worse, owns, strict=True))
            return p, statistics.fmean(worse)
        kept = sorted(worse)[:-1]  # the worst night left out
        estimate = statistics.fmean(kept)
        return t_sf(estimate / self.se(len(kept)), self.k - 1), estimate

    def interval(self, worse: float) -> tuple[float, float]:
        """The 95% interval of a night's difference from the center."""
        half = float(stats.t.ppf(0.975, self.k - 1)) * self.se()
        return worse - half, worse + half

    def repeats_to_decide(self, worse: float, alpha: float, sd: float | None) -> int | None:
        """The repeats a night would have needed for ``worse`` to be significant at ``alpha``,
        given the repeats' standard deviation ``sd``; None when no number of repeats would do
        (the nights themselves move that much: only more nights decide it)."""
        if sd is None or sd <= 0 or worse <= 0:
            return None
        crit = float(stats.t.isf(alpha, self.k - 1))
        room = (worse / crit) ** 2 / (1.0 + 1.0 / self.k) - self.between**2
        if room <= 0:
            return None
        return max(2, math.ceil(sd * sd / room))


def robust_sd(values: Sequence[float]) -> float:
    """The sample standard deviation, winsorized at WINSOR_MADS MADs from ROBUST_NIGHTS values."""
    if len(values) < 2:
        return 0.0
    kept = list(values)
    if len(kept) >= ROBUST_NIGHTS:
        med = statistics.median(kept)
        mad = MAD_SD * statistics.median([abs(v - med) for v in kept])
        if mad > 0:
            lo, hi = med - WINSOR_MADS * mad, med + WINSOR_MADS * mad
            kept = [min(max(v, lo), hi) for v in kept]
    return statistics.stdev(kept)


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (scipy's special function: a
    year of history calls it for every night, case and metric)."""
    return float(scipy_special.stdtr(df, -t))


@dataclass(frozen=True)
class Trend:
    """A monotone trend over ``nights`` nights: the Theil-Sen line (``start``, ``slope`` per
    night) and Kendall's one-sided p in the worse direction."""

    nights: int
    start: float
    slope: float
    p: float

    def total(self, absolute: bool) -> float:
        """The fitted change over the nights, signed as measured: relative to the fitted start
        (a difference for an absolute metric; no relative change from a start of 0)."""
        change = self.slope * (self.nights - 1)
        if absolute:
            return change
        return change / abs(self.start) if self.start else 0.0


def trend(values: Sequence[float], higher: bool) -> Trend | None:
    """The trend of ``values`` (oldest first) toward worse; None with fewer than
    MIN_TREND_NIGHTS values, or values that do not vary."""
    n = len(values)
    if n < MIN_TREND_NIGHTS:
        return None
    order = list(range(n))
    tau = stats.kendalltau(order, values, alternative="less" if higher else "greater")
    slope, start, _, _ = stats.theilslopes(values, order)
    if math.isnan(float(tau.pvalue)):
        return None
    return Trend(n, float(start), float(slope), float(tau.pvalue))


def onset(values: Sequence[float]) -> int:
    """Where a trend began: the first value off the level of the flat-then-sloped line (level,
    then a straight slope) that fits ``values`` best by least squares; 0 when it slopes from
    the first value on."""
    y = numpy.asarray(values, dtype=float)
    n = len(y)
    best, where = math.inf, 0
    for start in range(0, max(1, n - 2)):
        x = numpy.maximum(0.0, numpy.arange(n, dtype=float) - start)
        design = numpy.column_stack([numpy.ones(n), x])
        coef, *_ = numpy.linalg.lstsq(design, y, rcond=None)
        sse = float(numpy.sum((y - design @ coef) ** 2))
        if sse < best - 1e-12 * max(1.0, best if math.isfinite(best) else 1.0):
            best, where = sse, start
    return where + 1 if where else 0
