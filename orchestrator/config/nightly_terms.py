"""The nightly's vocabulary: the metrics it watches (and which way is better), a row's status,
the verdicts, and how the night's worst verdict becomes the exit status.

Kept apart so that the history (which stores verdicts), the verdict rules and the report share
one spelling of each word, and so that none of them imports another just for a name. In config/
because the playbook model validates its nightly thresholds against these metrics, and results/
(the trend plots) reads the verdicts: both lie below nightly/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.metrics import catalogue

Direction = catalogue.Direction  # which way is better
Status = Literal["measured", "failed", "insufficient"]
Verdict = Literal[
    "failure",  # an acceptance collapse: always, whatever the history
    "regression",  # a run of worse nights the night model cannot explain
    "drift",  # a slow trend past the threshold, no night of it bad enough alone
    "suspicious",  # one violating night
    "could_not_measure",  # the case's runs failed: infrastructure, never a regression
    "insufficient_data",  # too few baseline nights or repeats: never a silent pass
    "inconclusive",  # past the threshold, not significant: the interval says how unsure
    "recovered",  # a regression back within the threshold two nights running
    "improvement",
    "ok",
]
Decision = Literal["accept", "reject"]
VerdictCounts = tuple[tuple[Verdict, int], ...]  # (verdict, how many), worst first

# worst first: the night's overall verdict is the worst of its metrics' ones
VERDICT_ORDER: tuple[Verdict, ...] = (
    "failure",
    "regression",
    "drift",
    "suspicious",
    "could_not_measure",
    "insufficient_data",
    "inconclusive",
    "recovered",
    "improvement",
    "ok",
)
VIOLATIONS: frozenset[Verdict] = frozenset({"suspicious", "regression", "drift"})

# 0 no regression, 1 regression, drift (or a collapse), 2 suspicious only, 3 could not
# measure. A regression outranks everything (it is what a nightly is for); a suspicious night
# outranks a case that could not be measured, whose reason is in nightly.md either way. An
# inconclusive figure exits 0: nothing is established, and nightly.md says how unsure it is.
EXIT_CODES: dict[Verdict, int] = {
    "failure": 1,
    "regression": 1,
    "drift": 1,
    "suspicious": 2,
    "could_not_measure": 3,
    "insufficient_data": 3,
    "inconclusive": 0,
    "recovered": 0,
    "improvement": 0,
    "ok": 0,
}


# The nightly policy's defaults (issue 24: benchmarks/nightly.py measured them), one
# declaration for the playbook's ``nightly:`` section and the verdict's ``Policy``.
BASELINE_NIGHTS = 20  # the baseline: the median of this many last nights that count
MIN_BASELINE_NIGHTS = 3  # fewer: insufficient_data
MIN_REPEATS = 2  # fewer values in a night: insufficient_data
ALPHA = 0.001  # one night: suspicious below this p
CONFIRM_ALPHA = 0.01  # two nights in a row, each below this p: regression
RUN_ALPHA = 0.0001  # three or more nights, their mean (the worst left out) below this p
RUN_NIGHTS = 10  # the longest run of recent nights tested together
DRIFT_NIGHTS = 30  # the nights a trend is looked for over
DRIFT_ALPHA = 0.0002  # Kendall's one-sided p below which the trend is one


def worst(verdicts: list[Verdict] | tuple[Verdict, ...]) -> Verdict:
    """The worst of ``verdicts`` (``could_not_measure`` for none: nothing was judged)."""
    if not verdicts:
        return "could_not_measure"
    return min(verdicts, key=VERDICT_ORDER.index)


@dataclass(frozen=True)
class Metric:
    """A figure the nightly watches. ``absolute``: its threshold is a difference, not a ratio
    (a failure rate whose baseline is 0 has no relative change)."""

    name: str
    direction: Direction
    unit: str
    threshold: float  # the default practical threshold
    absolute: bool = False


# The watched metrics, their direction, unit and default threshold are the metric catalogue's
# (``orchestrator.metrics.catalogue``, those with ``nightly`` set). Its defaults, from the
# issue: 5% for throughput, 10% for p99 latency, 5% for acceptance length. Medians of latency
# get 10% too: at a fixed load a median TTFT moves with the scheduler's batching as much as a
# p99 does, and the public dashboards (PyTorch, vLLM) use one latency factor (1.2x) for every
# latency statistic. Per-position acceptance is an acceptance figure (5%). A failure rate is
# judged by its absolute rise: 0.01 = one request in a hundred more.
METRICS: tuple[Metric, ...] = tuple(
    Metric(m.name, m.direction, m.unit, m.nightly, m.absolute)
    for m in catalogue.NIGHTLY
    if m.direction is not None and m.nightly is not None
)
POSITION_PREFIX = "acceptance_pos_"  # acceptance_pos_1, _2 ...: the acceptance rate per position
POSITION = Metric(POSITION_PREFIX, "higher", "", 0.05)
_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """The metric called ``name`` (``acceptance_pos_<k>`` for any position k >= 1)."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    if position(name) is not None:
        return Metric(name, POSITION.direction, POSITION.unit, POSITION.threshold)
    known = ", ".join([*_BY_NAME, f"{POSITION_PREFIX}<k>"])
    raise ValueError(f"unknown nightly metric {name!r}: one of {known}")


def position(name: str) -> int | None:
    """k of ``acceptance_pos_<k>``, None for another name."""
    if not name.startswith(POSITION_PREFIX):
        return None
    tail = name[len(POSITION_PREFIX) :]
    return int(tail) if tail.isdigit() and int(tail) >= 1 else None


def is_acceptance(name: str) -> bool:
    """An acceptance figure: what an acceptance collapse fails, whatever the history."""
    return name == "acceptance_length" or position(name) is not None
