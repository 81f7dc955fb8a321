"""What a night's verdict is made of: the policy it is judged by, and the verdicts of a metric
and of a case with the figures that decided them (``verdict`` judges; ``runs`` holds the tests of
runs of nights and of trends). Kept apart so both read one declaration of each."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.config import nightly_terms as terms
from orchestrator.config.nightly_terms import (
    POSITION_PREFIX,
    Direction,
    Status,
    Verdict,
    metric,
    worst,
)
from orchestrator.nightly.cases import (
    CaseKey,
    Change,
    NightAttributes,
)
from orchestrator.nightly.history import HistoryRow


@dataclass(frozen=True)
class Thresholds:
    """Practical thresholds by metric name (a fraction, or a difference for ``failure_rate``),
    over the defaults of ``nightly_terms.METRICS``. ``acceptance_pos`` sets every position at once,
    ``acceptance_pos_<k>`` one position."""

    overrides: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.overrides.items():
            if name != POSITION_PREFIX.rstrip("_"):
                metric(name)  # ValueError naming the known metrics
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"threshold of {name}: {value!r} is not a number >= 0")

    def for_metric(self, name: str) -> float:
        if name in self.overrides:
            return float(self.overrides[name])
        group = POSITION_PREFIX.rstrip("_")
        if name.startswith(POSITION_PREFIX) and group in self.overrides:
            return float(self.overrides[group])
        return metric(name).threshold


@dataclass(frozen=True)
class Policy:
    """How a night is judged; the defaults are ``nightly_terms``' (the module docstring)."""

    baseline_nights: int = terms.BASELINE_NIGHTS
    min_baseline_nights: int = terms.MIN_BASELINE_NIGHTS
    min_repeats: int = terms.MIN_REPEATS
    alpha: float = terms.ALPHA
    confirm_alpha: float = terms.CONFIRM_ALPHA
    run_alpha: float = terms.RUN_ALPHA
    run_nights: int = terms.RUN_NIGHTS
    drift_nights: int = terms.DRIFT_NIGHTS
    drift_alpha: float = terms.DRIFT_ALPHA
    thresholds: Thresholds = field(default_factory=Thresholds)

    def __post_init__(self) -> None:
        if not 1 <= self.min_baseline_nights <= self.baseline_nights:
            raise ValueError(
                f"baseline of {self.baseline_nights} nights, at least {self.min_baseline_nights}: "
                "need 1 <= min_baseline_nights <= baseline_nights"
            )
        if self.min_repeats < 2:
            raise ValueError(f"min_repeats {self.min_repeats}: a t-test needs at least 2 repeats")
        for name in ("alpha", "confirm_alpha", "run_alpha", "drift_alpha"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{name} {value}: a p-value threshold between 0 and 1, e.g. 0.01")
        if self.run_nights < 2:
            raise ValueError(f"run_nights {self.run_nights}: a run is two nights or more")
        if self.drift_nights < 10:
            raise ValueError(f"drift_nights {self.drift_nights}: a trend needs 10 nights or more")


DEFAULT_POLICY = Policy()  # what a night is judged by unless a playbook says otherwise

# Verdicts of a night that may count in later baselines (a person's decision aside).
NORMAL: frozenset[Verdict] = frozenset(
    {"ok", "improvement", "insufficient_data", "inconclusive", "recovered"}
)
RECOVERY_NIGHTS = 2  # a regression is over after this many nights back within the threshold


@dataclass(frozen=True)
class MetricVerdict:
    """One metric of one case on one night, with the figures that decided it.

    ``change``: value / baseline - 1 (the difference for an absolute metric), signed as
    measured; ``p_value``: the one-sided p that decided it (the night model's, a run's, or
    Kendall's for a drift; Welch's over the repeats below 3 baseline nights)."""

    metric: str
    direction: Direction
    unit: str
    verdict: Verdict
    reason: str
    value: float | None = None
    spread: float | None = None
    n: int = 0
    baseline: float | None = None
    baseline_nights: tuple[str, ...] = ()
    change: float | None = None
    threshold: float | None = None
    absolute: bool = False
    p_value: float | None = None
    since: str | None = None  # the first night of the current run of violating nights
    violating_nights: tuple[str, ...] = ()
    last_good: str | None = None  # the last baseline night before ``since``
    changes: tuple[Change, ...] = ()  # attributes changed from last_good to since
    change_point: str | None = None  # the night Otava locates the shift at
    change_point_note: str | None = None
    interval: tuple[float, float] | None = None  # the change's 95% interval (inconclusive)
    repeats_needed: int | None = None  # repeats a night would need to decide it (inconclusive)

    @property
    def worse_by(self) -> float | None:
        """How much worse than the baseline (a fraction, or a difference if ``absolute``);
        negative when better."""
        if self.change is None:
            return None
        return self.change if self.direction == "lower" else -self.change

    @property
    def past_threshold(self) -> bool:
        """Worse than the baseline by more than the threshold (significant or not)."""
        worse = self.worse_by
        return worse is not None and self.threshold is not None and worse > self.threshold


@dataclass(frozen=True)
class CaseVerdict:
    """A case's verdicts on one night (its worst metric's verdict is ``verdict``)."""

    case: CaseKey
    status: Status
    collapse: bool
    note: str | None
    attributes: NightAttributes
    metrics: tuple[MetricVerdict, ...]

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def verdict(self) -> Verdict:
        return worst([m.verdict for m in self.metrics])


def pct(x: float, absolute: bool) -> str:
    return f"{x:+.4f}" if absolute else f"{x * 100:+.1f}%"


def relative_change(value: float, baseline: float, absolute: bool) -> float:
    """value - baseline for an absolute metric, else relative to the baseline (a baseline of
    0: no change if the value is 0 too, else an infinite one)."""
    diff = value - baseline
    if absolute:
        return diff
    if baseline == 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / abs(baseline)


def worse_of(value: float, center: float, direction: Direction) -> float:
    """How much worse ``value`` is than ``center``, in the metric's units (negative: better)."""
    return value - center if direction == "lower" else center - value


def plain(row: HistoryRow, verdict: Verdict, reason: str) -> MetricVerdict:
    info = metric(row.metric)
    return MetricVerdict(
        metric=row.metric,
        direction=info.direction,
        unit=info.unit,
        verdict=verdict,
        reason=reason,
        value=row.value,
        spread=row.spread,
        n=row.n,
    )
