"""Service-level targets as a playbook writes them: ``ttft_ms_p99 <= 2000``,
``tpot_ms_median <= 50``, ``output_tok_s >= 900``.

A target names a figure of a measurement's request statistics and a bound. The names, and which
way each is bounded, are the metric catalogue's (``orchestrator.metrics.catalogue``: the metrics
with ``slo`` set), so what a playbook writes is the column a report and summary.csv show
(``itl_ms_<statistic>`` is still read as ``itl_token_ms_<statistic>``).

Only the grammar is here, below the playbook model that validates targets with it; checking
targets against a measurement, and goodput, are ``orchestrator.sweep.slo``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from orchestrator.config.errors import did_you_mean
from orchestrator.metrics import catalogue

THROUGHPUTS = tuple(m.name for m in catalogue.SLO if m.per_request is None)
METRICS = catalogue.slo_names()

_TARGET = re.compile(r"\s*([A-Za-z0-9_]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*")


@dataclass(frozen=True)
class SloTarget:
    metric: str
    op: Literal["<=", ">="]
    bound: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {_number(self.bound)}"

    @property
    def latency(self) -> str | None:
        """``ttft``, ``tpot``, ``itl`` or ``e2el`` for a latency target (a per-request bound for
        goodput); None for a throughput target."""
        return catalogue.get(self.metric).per_request

    def met_by(self, value: float) -> bool:
        return value <= self.bound if self.op == "<=" else value >= self.bound


def _number(x: float) -> str:
    """``2000``, ``0.5``, ``1234567``: every digit kept (``:g`` would print 1.23457e+06)."""
    return str(int(x)) if x.is_integer() and abs(x) < 1e16 else repr(x)


def parse_target(text: str) -> SloTarget:
    """``"ttft_ms_p99 <= 2000"`` as a target; ValueError with what to write instead."""
    found = _TARGET.fullmatch(text)
    if found is None:
        raise ValueError(
            f"SLO target {text!r} is not '<metric> <= <number>' or '<metric> >= <number>'"
        )
    metric, op, number = found.groups()
    if metric not in METRICS:
        latencies = sorted({m.name.rsplit("_", 1)[0] for m in catalogue.SLO if m.per_request})
        raise ValueError(
            f"SLO target {text!r}: unknown metric {metric!r}{did_you_mean(metric, list(METRICS))}"
            f" (latencies: {{{','.join(latencies)}}}_{{mean,median,p90,p99}}; throughputs:"
            f" {', '.join(THROUGHPUTS)})"
        )
    try:
        bound = float(number)
    except ValueError:
        raise ValueError(f"SLO target {text!r}: {number!r} is not a number") from None
    lower_is_better = catalogue.get(metric).direction == "lower"
    if (op == "<=") != lower_is_better:
        want = "<=" if lower_is_better else ">="
        raise ValueError(f"SLO target {text!r}: {metric} is bounded with {want}")
    if bound <= 0:
        raise ValueError(f"SLO target {text!r}: the bound must be positive")
    return SloTarget(metric, "<=" if op == "<=" else ">=", bound)
