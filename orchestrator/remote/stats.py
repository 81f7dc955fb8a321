"""Statistics both sides compute the same way: the agent for its own lag, the controller for
request latencies. One definition, so a p99 means the same thing in every file orch writes.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence


def percentile(values: Sequence[float], p: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    xs = sorted(values)
    h = (len(xs) - 1) * p / 100.0
    lo = int(math.floor(h))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])
