"""What a night's trend shows, as plain data: per metric the night judged, each case's figure
over the last nights with its spread, tonight's baseline band, the violating and rejected
nights, and where the shift began.

``nightly/trend.py`` builds it from the history and the night's verdict; the report draws it
(``results/figures/trend.py``) and places it (``report_doc.py``, ``report_figures.py``). Here,
in results/, so the report reads the data without the nightly that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.config.nightly_terms import (
    VIOLATIONS,
    Decision,
    Direction,
    Verdict,
    VerdictCounts,
)

ALARMS: frozenset[Verdict] = VIOLATIONS | {"failure"}  # the nights a plot marks in red
LABEL_SEPARATOR = " · "  # CaseKey.label's


@dataclass(frozen=True)
class TrendPoint:
    """A case's figure on one night. ``counted``: the night may be part of a baseline (not
    rejected, not violating, measured); ``violated``: its verdict is an alarm (``ALARMS``)."""

    night: str
    night_time: datetime
    value: float | None
    spread: float | None  # sample standard deviation over the night's repeats
    verdict: Verdict | None  # None: recorded, never judged
    decision: Decision | None
    counted: bool

    @property
    def rejected(self) -> bool:
        return self.decision == "reject"

    @property
    def violated(self) -> bool:
        return self.verdict in ALARMS


@dataclass(frozen=True)
class Band:
    """Tonight's baseline ± the practical threshold (a difference for an absolute metric)."""

    baseline: float
    low: float
    high: float
    threshold: float
    absolute: bool
    nights: tuple[str, ...]  # the baseline nights tonight was judged against


@dataclass(frozen=True)
class CaseTrend:
    """One case's line in a metric's plot, and tonight's verdict of it."""

    case_id: str
    label: str  # CaseKey.label
    short: str  # the label's parts that tell this case from the others' ("" for one case)
    verdict: Verdict
    points: tuple[TrendPoint, ...]  # oldest first, tonight last
    band: Band | None  # None: tonight had no baseline (too few nights, nothing measured)
    violating: tuple[str, ...]  # nights of ``points`` marked in red
    since: str | None
    change_point: str | None
    change_point_note: str | None


@dataclass(frozen=True)
class MetricTrend:
    metric: str
    direction: Direction
    unit: str
    verdict: Verdict  # the worst of its cases'
    common: str  # the label parts every case shares (the plot's subtitle)
    cases: tuple[CaseTrend, ...]


@dataclass(frozen=True)
class CaseSummary:
    """A case's line in the summary: its worst verdict and its metrics that are not ok."""

    case_id: str
    label: str
    verdict: Verdict
    findings: tuple[tuple[str, Verdict], ...]  # (metric, verdict), the night's order


@dataclass(frozen=True)
class NightTrend:
    """The report's "Nightly trend": the verdict in one line, then a trend per metric."""

    playbook: str
    night: str
    verdict: Verdict
    exit_code: int
    counts: VerdictCounts
    summary: str
    cases: tuple[CaseSummary, ...]
    nights: tuple[str, ...]  # the nights shown, oldest first
    metrics: tuple[MetricTrend, ...]
    notes: tuple[str, ...]
