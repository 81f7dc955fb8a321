"""Where a metric's history shifted: Apache Otava's change-point detection, used as a library.

Otava (formerly Hunter, MongoDB's) splits a series with e-divisive means and keeps a split
only where a t-test between the two sides is significant (Fleming et al., "Hunter: Using
Change Point Detection to Hunt for Performance Regressions", ICPE 2023). It is deterministic:
the same history gives the same change points. Its entry point for a plain series is
``otava.analysis.compute_change_points(series, window_len, max_pvalue, min_magnitude)``,
which returns the change points (``.index``: the first value after the shift) and the weak
candidates it considered; that module needs numpy and scipy only.

Otava is optional (``pip install 'orch[nightly]'``): the package pins numpy 2.2 and scipy
1.16 and pulls in the BigQuery, Postgres and Slack clients its CLI uses, so it is not one of
orch's own dependencies. Without it ``change_points`` returns None and ``available()`` is False; the
verdicts do not depend on it (they come from the baseline and the t-test), only the night a
report names as where the shift began.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Any

# Otava's defaults: windows of 50 values, a shift kept at p < 0.001 (a stricter test than the
# nightly verdict's 0.01: the verdict says whether tonight is worse, this only says since when)
WINDOW = 50
MAX_PVALUE = 0.001
# locate's shape, for a stand-in in tests: every change point's index, None without Otava
Locate = Callable[[Sequence[float]], "Sequence[int] | None"]
NOT_INSTALLED = "Apache Otava is not installed"
INSTALL_HINT = "install Apache Otava (pip install 'orch[nightly]') to locate change points"


def _compute() -> Callable[..., Any] | None:
    """Otava's ``compute_change_points``, None when it cannot be imported."""
    try:
        module = importlib.import_module("otava.analysis")
    except Exception:  # not installed, or broken by a dependency: no change point, said so
        return None
    found = getattr(module, "compute_change_points", None)
    return found if callable(found) else None


def available() -> bool:
    """Whether Otava can be imported here."""
    return _compute() is not None


def change_points(
    values: Sequence[float],
    *,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = 0.0,
    window: int = WINDOW,
) -> list[int] | None:
    """Indices of every change point in ``values`` (each the first value after a shift),
    ascending; None when Otava is not installed. NaN values are left out (an index still
    counts them)."""
    compute = _compute()
    if compute is None:
        return None
    kept = [i for i, v in enumerate(values) if not math.isnan(v)]
    if len(kept) < 3:
        return []
    found, _weak = compute(
        [float(values[i]) for i in kept],
        window_len=window,
        max_pvalue=max_pvalue,
        min_magnitude=min_magnitude,
    )
    return sorted(kept[int(cp.index)] for cp in found)


def nearest(found: Sequence[int], first_bad: int) -> int | None:
    """Of the change points ``found``, the one that began a run of violating nights starting at
    index ``first_bad``: the latest at or before it (the shift may predate the first night that
    was past the threshold and significant), else the earliest after it. The latest point
    overall would be wrong: a later split made by noise (a 2% rise three nights on) is no
    answer to "since when"."""
    before = [i for i in found if i <= first_bad]
    if before:
        return max(before)
    after = [i for i in found if i > first_bad]
    return min(after) if after else None
