"""The SLO search: the highest load in a range that meets every target, by bisection.

The sweep measures a value the search proposes, tells it whether every target was met, and asks
for the next one, until the search says it is done or has spent its ``max_points`` measurements.
Points the sweep list already measured seed it (``record`` before the first ``next_value``), so
a search that follows ``concurrency: [1, 2, 4, 8, 16, 32]`` starts from the bracket those give.

Order: the bottom of the range first (if it misses, nothing in the range meets: done), then the
top (if it meets, it is the answer: done), then the midpoint of the bracket (highest value met,
lowest value missed) until the bracket is as narrow as the resolution: for concurrency, two
adjacent whole numbers (or ``resolution``, a ratio, when given); for a request rate, missed /
met <= ``resolution`` (default 1.05).

Non-monotone data (a load that met above a lower one that missed, e.g. noise near the limit):
the lowest value that missed bounds the answer, and met values above it are ignored (and named
by ``explain``). The answer is therefore the highest measured value below every miss, which is
conservative, and the bracket shrinks with every measurement, so the search cannot loop.

A value recorded more than once (repeats of a point) meets only if every recording met. Values
outside [low, high] are kept but do not enter the search. The search never proposes a value
already recorded: the bracket holds no recorded value strictly inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Kind = Literal["concurrency", "request_rate"]
RATE_RESOLUTION = 1.05


def _label(kind: Kind, value: float) -> str:
    """``c=8`` / ``rate=2.5``, as ``orchestrator.results.model.LoadPoint.label`` writes it."""
    return f"c={value:g}" if kind == "concurrency" else f"rate={value:g}"


def _readable_between(low: float, high: float) -> float:
    """The midpoint of (low, high) with as few significant digits (3 at least) as keep it
    strictly inside: a rate people read in tables and folder names (``rate=4.38``)."""
    middle = (low + high) / 2
    for digits in range(3, 17):
        rounded = float(f"{middle:.{digits}g}")
        if low < rounded < high:
            return rounded
    return middle


class SloSearch:
    """Bisection for the highest ``kind`` value in [low, high] meeting every SLO target, within
    ``max_points`` measurements of its own (seeded points do not count)."""

    def __init__(
        self,
        kind: Kind,
        low: float,
        high: float,
        max_points: int,
        resolution: float | None = None,
    ) -> None:
        if kind not in ("concurrency", "request_rate"):
            raise ValueError(f"SLO search over {kind!r}: search concurrency or request_rate")
        if not 0 < low <= high:
            raise ValueError(f"SLO search range [{low:g}, {high:g}]: need 0 < low <= high")
        if kind == "concurrency" and not (float(low).is_integer() and float(high).is_integer()):
            raise ValueError(f"SLO search range [{low:g}, {high:g}]: concurrency is a whole number")
        if max_points < 1:
            raise ValueError(f"SLO search max_points {max_points}: at least 1")
        if resolution is not None and not resolution > 1:
            raise ValueError(f"SLO search resolution {resolution:g}: a ratio above 1 (e.g. 1.05)")
        self.kind: Kind = kind
        self.low = float(low)
        self.high = float(high)
        self.max_points = max_points
        self.resolution = (
            resolution if resolution is not None or kind == "concurrency" else RATE_RESOLUTION
        )
        self._met: dict[float, bool] = {}
        self._missed: dict[float, list[str]] = {}
        self._proposed: list[float] = []
        self._pending: float | None = None

    def record(self, value: float, met: bool, missed: Sequence[str] = ()) -> None:
        """A measurement at ``value``: whether it met every target, and the targets it missed
        (as written, for ``explain``). Also how points measured before the search seed it."""
        value = float(value)
        self._met[value] = self._met.get(value, True) and met
        names = self._missed.setdefault(value, [])
        names.extend(t for t in missed if t not in names)
        if self._pending == value:
            self._pending = None

    def next_value(self) -> float | None:
        """The value to measure next; None when the search is done (or out of measurements).
        Until the proposed value is recorded, asking again returns it again."""
        if self._pending is not None:
            return self._pending
        candidate = self._candidate()
        if candidate is None or len(self._proposed) >= self.max_points:
            return None
        self._pending = candidate
        self._proposed.append(candidate)
        return candidate

    @property
    def best(self) -> float | None:
        """The highest value measured in range that met every target, below every miss."""
        return self._bracket()[0]

    @property
    def proposed(self) -> tuple[float, ...]:
        """The values the search asked for, in order."""
        return tuple(self._proposed)

    @property
    def points(self) -> list[tuple[float, bool]]:
        """Every recorded (value, met), by value."""
        return sorted(self._met.items())

    def _in_range(self) -> dict[float, bool]:
        return {v: m for v, m in self._met.items() if self.low <= v <= self.high}

    def _bracket(self) -> tuple[float | None, float | None]:
        """(highest value met below the lowest miss, lowest miss) among the in-range points."""
        points = self._in_range()
        miss = min((v for v, m in points.items() if not m), default=None)
        best = max((v for v, m in points.items() if m and (miss is None or v < miss)), default=None)
        return best, miss

    def _ignored(self) -> list[float]:
        """Values that met above the lowest miss: non-monotone, left out of the answer."""
        miss = self._bracket()[1]
        if miss is None:
            return []
        return sorted(v for v, m in self._in_range().items() if m and v > miss)

    def _candidate(self) -> float | None:
        best, miss = self._bracket()
        if miss is not None and miss <= self.low:
            return None  # the bottom of the range missed: nothing in it meets
        if best is not None and best >= self.high:
            return None  # the top of the range met
        if best is None:
            return self.low
        if miss is None:
            return self.high
        if self._resolved(best, miss):
            return None
        if self.kind == "concurrency":
            return float(math.floor((best + miss) / 2))
        return _readable_between(best, miss)

    def _resolved(self, best: float, miss: float) -> bool:
        if self.kind == "concurrency" and miss - best <= 1:
            return True
        return self.resolution is not None and miss / best <= self.resolution

    def explain(self) -> str:
        """One line: the answer, the miss that bounds it, and how many points were measured."""
        noun = "concurrency" if self.kind == "concurrency" else "request rate"
        span = f"[{self.low:g}, {self.high:g}]"
        count = len(self._met)
        tail = f"; {count} point{'' if count == 1 else 's'} measured"
        if len(self._proposed) < count:
            searched = sum(v in self._met for v in self._proposed)
            tail += f" ({searched} by the search)"
        best, miss = self._bracket()
        out_of_points = len(self._proposed) >= self.max_points and self._pending is None
        if out_of_points and self._candidate() is not None:
            tail += f" (max_points={self.max_points} reached before the search converged)"
        ignored = self._ignored()
        if ignored:
            names = ", ".join(_label(self.kind, v) for v in ignored)
            tail += f"; ignored {names}: met above the lowest miss (non-monotone)"
        if not self._in_range():
            return f"SLO search over {noun} {span}: nothing measured in range yet"
        why = "" if miss is None else f" ({self._why(miss)})"
        if best is None:
            if miss is not None and miss <= self.low:
                return f"no {noun} in {span} meets every target{why}{tail}"
            return f"no {noun} meeting every target found yet{why}{tail}"
        if miss is None and best >= self.high:
            why = f" (the top of the range {span})"
        return f"highest {noun} meeting every target: {best:g}{why}{tail}"

    def _why(self, miss: float) -> str:
        names = self._missed.get(miss) or []
        missed = f" {', '.join(names)}" if names else ""
        return f"{_label(self.kind, miss)} missed{missed}"
