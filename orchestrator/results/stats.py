"""Statistics over repeats: a figure's mean, spread and Student-t confidence interval, which
figures are too noisy to compare, the per-point aggregate of a results DataFrame, and the Pareto
front of throughput per GPU vs interactivity.

A repeat is one measurement of a load point on the same server. With n repeats of a figure x:
mean = sum(x) / n, the sample standard deviation s = sqrt(sum((x - mean)^2) / (n - 1)), and the
two-sided interval mean -/+ t(1 - (1 - confidence) / 2, n - 1) * s / sqrt(n) (Student's t, as
AIPerf reports repeats). A figure is *noisy* when the interval's half-width exceeds a fraction of
its mean (the workload's ``noisy_ci``, 10% by default): a difference smaller than that between
two configurations says nothing. One measurement has no interval ("single", not noisy).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy
import pandas as pd
from scipy import special as scipy_special  # scipy.stats costs 1-3 s to import, per process

POINT_KEYS = ("results_dir", "key", "load_kind", "load_value")
IDENTITY_COLUMNS = (
    "run",
    "host",
    "config",
    "engine",
    "method",
    "model",
    "gpu_name",
    "gpu_count",
    "origin",
    "noisy_ci",
    "point_index",
)
DEFAULT_NOISY_CI = 0.10
SUFFIXES = ("mean", "std", "low", "high", "n", "noisy")


@dataclass(frozen=True)
class Interval:
    """A figure over repeats. ``std`` is the sample one (n - 1); ``low``/``high``/``half_width``
    are None below two values, ``mean`` too with none; ``relative`` = half_width / |mean|."""

    n: int
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None
    half_width: float | None = None
    relative: float | None = None


def _finite_or_missing(value: object) -> float | None:
    """The value as a float, None for None/NaN/pandas' NA."""
    if value is None or value is pd.NA:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def interval(values: Iterable[float | None], confidence: float = 0.95) -> Interval:
    """The mean and Student-t interval of ``values`` (None and NaN dropped)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: a fraction between 0 and 1, e.g. 0.95")
    xs = [x for x in (_finite_or_missing(v) for v in values) if x is not None]
    n = len(xs)
    if n == 0:
        return Interval(n=0)
    mean = math.fsum(xs) / n
    if n == 1:
        return Interval(n=1, mean=mean)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    t = float(scipy_special.stdtrit(n - 1, 1 - (1 - confidence) / 2))  # t.ppf, same values
    half = t * std / math.sqrt(n)
    # a mean of 0 with any spread is as noisy as it gets; with none, not noisy at all
    zero_mean = 0.0 if half == 0 else math.inf
    relative = half / abs(mean) if mean != 0 else zero_mean
    return Interval(
        n=n,
        mean=mean,
        std=std,
        low=mean - half,
        high=mean + half,
        half_width=half,
        relative=relative,
    )


def is_noisy(iv: Interval, fraction: float) -> bool:
    """Whether the interval is wider than ``fraction`` of the mean (never with one value)."""
    return iv.n >= 2 and iv.relative is not None and iv.relative > fraction


def _excluded(group: pd.DataFrame) -> list[bool]:
    """Per row: a failed or never-made measurement, whose figures do not measure the point."""
    verdicts = group["verdict"] if "verdict" in group.columns else [None] * len(group)
    not_run = group["not_run"] if "not_run" in group.columns else [None] * len(group)
    pairs = zip(verdicts, not_run, strict=True)
    return [v == "failed" or n is True or n is numpy.True_ for v, n in pairs]


def _first(group: pd.DataFrame, column: str) -> object:
    """The column's first known value in the group (repeats share their identity)."""
    if column not in group.columns:
        return None
    known = group[column].dropna()
    return known.iloc[0] if len(known) else None


def _point_row(
    key: tuple[Hashable, ...], group: pd.DataFrame, metrics: Sequence[str], confidence: float
) -> dict[str, object]:
    row: dict[str, object] = dict(zip(POINT_KEYS, key, strict=True))
    for column in IDENTITY_COLUMNS:
        row[column] = _first(group, column)
    fraction = _finite_or_missing(row["noisy_ci"])
    fraction = DEFAULT_NOISY_CI if fraction is None else fraction
    kept = group[[not out for out in _excluded(group)]]
    row["repeats"] = len(group)
    row["failed_repeats"] = len(group) - len(kept)
    for metric in metrics:
        iv = interval(kept[metric].tolist(), confidence)
        row[f"{metric}_mean"] = iv.mean
        row[f"{metric}_std"] = iv.std
        row[f"{metric}_low"] = iv.low
        row[f"{metric}_high"] = iv.high
        row[f"{metric}_n"] = iv.n
        row[f"{metric}_noisy"] = is_noisy(iv, fraction)
    return row


def aggregate(
    frame: pd.DataFrame, metrics: Sequence[str], *, confidence: float = 0.95
) -> pd.DataFrame:
    """One row per load point (``POINT_KEYS``) of a results frame (a row per measurement, as
    ``orchestrator.results.load`` makes it): the identity columns, ``repeats`` and
    ``failed_repeats`` (failed or not-run measurements, left out of the figures), and for each
    metric ``<metric>_mean/_std/_low/_high/_n/_noisy`` (noisy against the point's ``noisy_ci``)."""
    missing = [c for c in (*POINT_KEYS, *metrics) if c not in frame.columns]
    if missing:
        raise ValueError(f"the results frame has no column {', '.join(map(repr, missing))}")
    columns = [*POINT_KEYS, *IDENTITY_COLUMNS, "repeats", "failed_repeats"]
    columns += [f"{m}_{suffix}" for m in metrics for suffix in SUFFIXES]
    grouped = frame.groupby(list(POINT_KEYS), dropna=False, sort=False)
    rows = [_point_row(tuple(key), group, metrics, confidence) for key, group in grouped]
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values(["results_dir", "key", "load_value"], kind="stable").reset_index(
        drop=True
    )


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (at least as high in both coordinates,
    higher in one), by x: e.g. x = interactivity (tok/s/user), y = throughput per GPU. Points
    with a NaN coordinate are never on the front; of equal points, the first is kept."""
    order = sorted(
        (i for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))),
        key=lambda i: (-points[i][0], -points[i][1], i),
    )
    front: list[int] = []
    best_y = -math.inf
    for i in order:  # by x falling: a point is on the front if it beats every y to its right
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: (points[i][0], i))
