"""The night model applied to a history: a run of recent nights tested together
(``run_regression``), a slow trend (``drift_verdict``), too few nights of tonight's GPU mode
(``too_few``), and where a shift began (``located``); ``verdict``'s module docstring states the
rules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from orchestrator.config import nightly_terms as terms
from orchestrator.config.nightly_terms import metric
from orchestrator.nightly.cases import changed_attributes, mode_changes
from orchestrator.nightly.changepoint import (
    NOT_INSTALLED,
    Locate,
    available,
    change_points,
    nearest,
)
from orchestrator.nightly.history import HistoryRow
from orchestrator.nightly.judged import (
    MetricVerdict,
    Policy,
    pct,
    plain,
    relative_change,
    worse_of,
)
from orchestrator.nightly.model import NightModel, onset, trend

MIN_RUN_BASELINE = 7  # a run of nights is tested only against this many nights before it
GATE_SHARE = 0.2  # a run's estimate may fall short of the threshold by at most this share


def own_se(row: HistoryRow) -> float | None:
    """A night's own standard error: its repeats' sd / sqrt(n) (None below two repeats)."""
    return row.spread / math.sqrt(row.n) if row.spread is not None and row.n > 1 else None


def night_model(base: Sequence[HistoryRow]) -> NightModel | None:
    """The night model of baseline rows (None below 3 nights)."""
    within = [se for se in map(own_se, base) if se is not None]
    return NightModel.of([r.value for r in base if r.value is not None], within)


def located(
    points: Sequence[HistoryRow], first_bad: HistoryRow, find: Locate
) -> tuple[str | None, str]:
    """The night Otava locates the shift that began the violating run (``first_bad`` on) at,
    over ``points`` (the metric's measured nights, tonight last), and a note saying how."""
    if find is change_points and not available():
        return None, NOT_INSTALLED
    measured = [r for r in points if r.value is not None]
    found = find([float(r.value) for r in measured if r.value is not None])
    start = next((i for i, r in enumerate(measured) if r.night == first_bad.night), len(measured))
    index = nearest(found or (), start)
    if index is None:
        return None, f"no change point in the last {len(points)} nights (Apache Otava)"
    return measured[index].night, f"Apache Otava, over the last {len(points)} nights"


def too_few(
    row: HistoryRow, base: Sequence[HistoryRow], counted: Sequence[HistoryRow], policy: Policy
) -> MetricVerdict:
    """insufficient_data: too few baseline nights, naming the GPUs' change of operating mode
    when nights of another mode would have been enough (never judged against them)."""
    reason = f"{len(base)} baseline nights (need {policy.min_baseline_nights})"
    if len(counted) >= policy.min_baseline_nights and len(counted) > len(base):
        changes = changed_attributes(counted[-1].attributes, row.attributes)
        mode = mode_changes(counted[-1].attributes, row.attributes)
        what = "; ".join(c.text for c in mode) or "SM clock or power limit"
        reason = (
            f"the GPUs ran in another operating mode ({what}): {len(base)} nights in this "
            f"mode (need {policy.min_baseline_nights}); not judged against another mode's nights"
        )
        return dataclasses.replace(plain(row, "insufficient_data", reason), changes=tuple(changes))
    return plain(row, "insufficient_data", reason)


def run_regression(
    judged: MetricVerdict,
    row: HistoryRow,
    measured: Sequence[HistoryRow],
    pool: Sequence[HistoryRow],
    policy: Policy,
    find: Locate,
) -> tuple[MetricVerdict | None, str | None]:
    """A regression if the last nights, tonight last, form a run the night model cannot explain
    (the module docstring), each run tested against the nights before it; else None, and what
    the shortest run past the threshold that the test could not confirm says (None if none
    was): tonight is then inconclusive, never ok."""
    info = metric(row.metric)
    nights = [*measured[-(policy.run_nights - 1) :], row]
    unsure: str | None = None
    for r in range(2, len(nights) + 1):
        window = nights[-r:]
        base = [b for b in pool if b.night_time < window[0].night_time][-policy.baseline_nights :]
        if len(base) < max(MIN_RUN_BASELINE, policy.min_baseline_nights):
            break  # an older window has fewer nights before it still
        model = night_model(base)
        assert model is not None and judged.threshold is not None
        worse = [worse_of(float(w.value or 0.0), model.center, info.direction) for w in window]
        p, estimate = model.run_p(worse, [own_se(w) for w in window])
        limit = judged.threshold if info.absolute else judged.threshold * abs(model.center)
        # two nights must pass the threshold; a longer run may fall short of it by one
        # standard error (at most GATE_SHARE of it): a change at the threshold is then caught
        allowance = 0.0 if r == 2 else min(model.se(r - 1), GATE_SHARE * limit)
        run = pct(
            relative_change(model.center + signed(estimate, info), model.center, info.absolute),
            info.absolute,
        )
        how = "their mean" if r == 2 else "their mean with the worst left out"
        if p >= (policy.confirm_alpha if r == 2 else policy.run_alpha):
            # past the threshold without one bad night: each of two, or the trimmed mean
            if unsure is None and (min(worse) if r == 2 else estimate) > limit:
                unsure = (
                    f"the last {r} nights {run} ({how}) vs baseline {model.center:.6g}: past "
                    f"the threshold, not significant (p={p:.2g}); the next nights decide"
                )
            continue
        if estimate <= limit - allowance:
            continue
        reason = (
            f"the last {r} nights {run} ({how}) vs baseline {model.center:.6g} (median of "
            f"{len(base)} nights before them), p={p:.2g}; tonight {judged.reason}"
        )
        return _regression(judged, row, window, base, p, reason, measured, find), None
    return None, unsure


def signed(worse: float, info: terms.Metric) -> float:
    """How much worse, as a difference signed as measured."""
    return worse if info.direction == "lower" else -worse


def _regression(
    judged: MetricVerdict,
    row: HistoryRow,
    window: Sequence[HistoryRow],
    base: Sequence[HistoryRow],
    p: float,
    reason: str,
    measured: Sequence[HistoryRow],
    find: Locate,
) -> MetricVerdict:
    first = window[0]
    good = base[-1] if base else None
    where, note = located([*measured, row], first, find)
    return dataclasses.replace(
        judged,
        verdict="regression",
        reason=reason,
        p_value=p,
        since=first.night,
        violating_nights=tuple(w.night for w in window),
        last_good=good.night if good else None,
        changes=tuple(changed_attributes(good.attributes, first.attributes)) if good else (),
        change_point=where,
        change_point_note=note,
    )


def drift_verdict(
    judged: MetricVerdict,
    row: HistoryRow,
    measured: Sequence[HistoryRow],
    policy: Policy,
    find: Locate,
) -> MetricVerdict | None:
    """``drift`` if the last ``drift_nights``, tonight last, trend the worse way past the
    threshold (the module docstring); None otherwise."""
    info = metric(row.metric)
    nights = [*measured[-(policy.drift_nights - 1) :], row]
    values = [float(r.value or 0.0) for r in nights]
    found = trend(values, higher=info.direction == "higher")
    if found is None or found.p >= policy.drift_alpha or judged.threshold is None:
        return None
    total = found.total(info.absolute)
    worse_total = total if info.direction == "lower" else -total
    if worse_total <= judged.threshold:
        return None
    began = nights[onset(values)]
    where, note = located(nights, began, find)
    good = next((r for r in reversed(nights) if r.night_time < began.night_time), None)
    per_night = found.slope if info.absolute else found.slope / abs(found.start)
    reason = (
        f"drifting {pct(per_night, info.absolute)} a night over the last {found.nights} nights "
        f"({pct(total, info.absolute)} in all, Kendall p={found.p:.2g}), since about "
        f"{began.night}; tonight {judged.reason}"
    )
    return dataclasses.replace(
        judged,
        verdict="drift",
        reason=reason,
        p_value=found.p,
        since=began.night,
        violating_nights=tuple(r.night for r in nights if r.night_time >= began.night_time),
        last_good=good.night if good else None,
        changes=tuple(changed_attributes(good.attributes, began.attributes)) if good else (),
        change_point=where,
        change_point_note=note,
    )
