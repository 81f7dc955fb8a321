"""The verdict of a night, per case and metric, against the baseline of the nights before it.

The rules (issue 11), for one case's metric on one night:

- baseline = the median of the metric's values on the last ``baseline_nights`` (7) nights that
  count (below); fewer than ``min_baseline_nights`` (3) of them: ``insufficient_data``;
- the night *violates* when it is worse than the baseline by more than the metric's practical
  threshold (``Thresholds``: 5% throughput, 10% latency, 5% acceptance, +0.01 failure rate)
  **and** a one-sided Welch t-test of the night's repeats against the baseline nights' repeats
  (pooled) gives p < ``alpha`` (0.01). Both: a difference too small to matter is never an
  alarm, and one inside the noise is never called;
- two consecutive violating nights = ``regression`` (the first is ``suspicious``); nights that
  could not measure the case, and rejected nights, are skipped when counting consecutive ones;
- better by more than the threshold and significant = ``improvement``; otherwise ``ok``;
- fewer than ``min_repeats`` (2) values tonight: ``insufficient_data``, never a silent pass;
- an acceptance collapse fails the case's acceptance figures (``failure``) whatever the history;
- a case whose measurements all failed (host down, engine died) is ``could_not_measure``: an
  infrastructure failure is never reported as a performance regression.

Which nights count in a baseline: a night judged ``ok``, ``improvement`` or ``insufficient_data``
for the metric (stored as ``accepted`` when the night is settled); never a violating, failed or
collapsed one, so a regression stays one night after night instead of becoming the norm. A
person's decision wins: ``reject`` takes a night out of every baseline; ``accept`` puts it in
and starts the baseline again from it (the nights before it no longer count; accepted nights
in a row all count), which is how an intended change (a new engine version, slower on purpose)
becomes the new normal. Until
``min_baseline_nights`` nights count again, the metric is ``insufficient_data``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy
from scipy import special as scipy_special

from orchestrator.config.nightly_terms import (
    POSITION_PREFIX,
    VIOLATIONS,
    Decision,
    Direction,
    Status,
    Verdict,
    is_acceptance,
    metric,
    worst,
)
from orchestrator.nightly.cases import CaseKey, Change, NightAttributes, changed_attributes
from orchestrator.nightly.changepoint import (
    NOT_INSTALLED,
    Locate,
    available,
    change_points,
    nearest,
)
from orchestrator.nightly.history import DecisionRecord, HistoryRow


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
    """How a night is judged; the defaults are the issue's."""

    baseline_nights: int = 7
    min_baseline_nights: int = 3
    min_repeats: int = 2
    alpha: float = 0.01
    thresholds: Thresholds = field(default_factory=Thresholds)

    def __post_init__(self) -> None:
        if not 1 <= self.min_baseline_nights <= self.baseline_nights:
            raise ValueError(
                f"baseline of {self.baseline_nights} nights, at least {self.min_baseline_nights}: "
                "need 1 <= min_baseline_nights <= baseline_nights"
            )
        if self.min_repeats < 2:
            raise ValueError(f"min_repeats {self.min_repeats}: a t-test needs at least 2 repeats")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: a p-value threshold between 0 and 1, e.g. 0.01")


# Verdicts of a night that may count in later baselines (a person's decision aside).
NORMAL: frozenset[Verdict] = frozenset({"ok", "improvement", "insufficient_data", "recovered"})
RECOVERY_NIGHTS = 2  # a regression is over after this many nights back within the threshold


@dataclass(frozen=True)
class MetricVerdict:
    """One metric of one case on one night, with the figures that decided it.

    ``change``: value / baseline - 1 (the difference for an absolute metric), signed as
    measured; ``p_value``: the one-sided Welch p in the direction of the change."""

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


def welch_p(night: Sequence[float], base: Sequence[float], worse_when: str) -> float:
    """One-sided Welch p that ``night``'s mean is ``less``/``greater`` than ``base``'s: what
    ``scipy.stats.ttest_ind(night, base, equal_var=False, alternative=worse_when)`` gives
    (the tests hold it to that), computed directly because ttest_ind costs milliseconds a call
    and judging a year of history calls it for every night, case and metric. Two samples
    without any spread: 0 when their means differ that way, else 1 (ttest_ind gives NaN)."""
    a, b = numpy.asarray(night, dtype=float), numpy.asarray(base, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a Welch test needs two values on each side")
    diff = float(a.mean() - b.mean())
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    if va + vb == 0:
        return 0.0 if (diff < 0 if worse_when == "less" else diff > 0) else 1.0
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    below = float(scipy_special.stdtr(df, t))  # P(T <= t)
    return below if worse_when == "less" else float(scipy_special.stdtr(df, -t))


def new_night_p(value: float, nights: Sequence[float], worse_when: str) -> float:
    """One-sided p that a night's mean ``value`` is a new draw from the baseline nights' own
    spread (a Student-t prediction interval: t = (value - mean) / (s * sqrt(1 + 1/k)), k - 1
    degrees of freedom); 0.0 (no objection) with fewer than 3 nights to estimate it.

    Welch's test over tonight's repeats sees only the spread within a night: when whole nights
    move together (a restart, the neighbours, clocks), a night off by its share of that is
    'significant' to it. A violation must also stand out from how far nights ordinarily move,
    so the reported p is the larger of the two."""
    k = len(nights)
    if k < 3:
        return 0.0
    mean, sd = statistics.fmean(nights), statistics.stdev(nights)
    diff = value - mean
    if sd == 0:
        return 0.0 if (diff < 0 if worse_when == "less" else diff > 0) else 1.0
    t = diff / (sd * math.sqrt(1 + 1 / k))
    below = float(scipy_special.stdtr(k - 1, t))
    return below if worse_when == "less" else float(scipy_special.stdtr(k - 1, -t))


def _decision(decisions: Mapping[str, DecisionRecord | Decision], night: str) -> Decision | None:
    found = decisions.get(night)
    return found.decision if isinstance(found, DecisionRecord) else found


def has_figure(row: HistoryRow) -> bool:
    """Whether the row holds a measured figure a baseline could count."""
    return row.value is not None and row.status != "failed"


def _decided(
    decisions: Mapping[str, DecisionRecord | Decision], row: HistoryRow
) -> Decision | None:
    """The decision about ``row``'s night as it bears on this figure: accepting a night that
    did not measure the figure starts no new baseline for it (the baseline would start again
    from nothing, and a later drop be ``insufficient_data``), so the nights before it still
    count."""
    decision = _decision(decisions, row.night)
    return None if decision == "accept" and not has_figure(row) else decision


def counts_in_baseline(row: HistoryRow, decision: Decision | None) -> bool:
    """Whether a past night's row may be part of a baseline (see the module docstring)."""
    if decision == "reject" or row.value is None or row.status == "failed":
        return False
    if decision == "accept":
        return True
    if row.collapse or row.failed_repeats:
        return False
    if row.accepted is not None:
        return row.accepted
    return row.verdict is None or row.verdict in NORMAL


def joins_baseline(judged: MetricVerdict) -> bool:
    """Whether a night's figure counts in later baselines without a person's decision: judged
    ``ok``, ``improvement`` or ``insufficient_data``, and not worse than its baseline by more
    than the threshold. A night past the threshold whose t-test was not significant is not a
    violation (its verdict stays ``ok``), but it is no evidence of normal either: counted, a
    real step that the test misses on some nights would slip into the baseline and become
    the norm without ever being called."""
    return judged.verdict in NORMAL and not judged.past_threshold


def _pct(x: float, absolute: bool) -> str:
    return f"{x:+.4f}" if absolute else f"{x * 100:+.1f}%"


def _change(value: float, baseline: float, absolute: bool) -> float:
    """value - baseline for an absolute metric, else relative to the baseline (a baseline of
    0: no change if the value is 0 too, else an infinite one)."""
    diff = value - baseline
    if absolute:
        return diff
    if baseline == 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / abs(baseline)


def _compare(row: HistoryRow, base: Sequence[HistoryRow], policy: Policy) -> MetricVerdict:
    """The figures of a night against its baseline rows (verdict ok/violation/improvement;
    the caller names a violation suspicious or regression)."""
    info = metric(row.metric)
    assert row.value is not None
    baseline = statistics.median([r.value for r in base if r.value is not None])
    change = _change(row.value, baseline, info.absolute)
    worse_by = change if info.direction == "lower" else -change
    threshold = policy.thresholds.for_metric(row.metric)
    pooled = baseline_sample(base)
    worse_when, better_when = (
        ("greater", "less") if info.direction == "lower" else ("less", "greater")
    )
    nights = [r.value for r in base if r.value is not None]
    if worse_by > 0:
        p = max(welch_p(row.values, pooled, worse_when), new_night_p(row.value, nights, worse_when))
        verdict: Verdict = "suspicious" if worse_by > threshold and p < policy.alpha else "ok"
    else:
        p = max(
            welch_p(row.values, pooled, better_when), new_night_p(row.value, nights, better_when)
        )
        verdict = "improvement" if -worse_by > threshold and p < policy.alpha else "ok"
    reason = (
        f"{_pct(change, info.absolute)} vs baseline {baseline:.6g} (median of {len(base)} "
        f"nights), threshold {_pct(threshold, info.absolute).lstrip('+')}, p={p:.2g}"
    )
    if verdict == "ok" and abs(worse_by) > threshold:
        reason += f": past the threshold, not significant (p >= {policy.alpha:g})"
    return dataclasses.replace(
        _plain(row, verdict, reason),
        baseline=baseline,
        baseline_nights=tuple(r.night for r in base),
        change=change,
        threshold=threshold,
        absolute=info.absolute,
        p_value=p,
    )


def baseline_sample(base: Sequence[HistoryRow]) -> list[float]:
    """What tonight's repeats are tested against: one value per baseline night (its mean).
    Pooling every repeat of every baseline night would treat repeats as independent when a
    night's repeats share that night's conditions (a restart, clocks, the neighbours): the
    test would then see only the spread within a night, call ordinary night-to-night moves
    significant, and raise false regressions. With a single baseline night there is no
    night-to-night spread to use; its repeats are the sample."""
    nights = [r.value for r in base if r.value is not None]
    if len(nights) >= 2:
        return nights
    return [v for r in base for v in r.values]


def _plain(row: HistoryRow, verdict: Verdict, reason: str) -> MetricVerdict:
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


def _located(
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


def _violation(
    judged: MetricVerdict,
    series: Sequence[HistoryRow],
    decided: Sequence[Decision | None],
    row: HistoryRow,
    base: Sequence[HistoryRow],
    find: Locate,
) -> MetricVerdict:
    """A violating night: ``regression`` if the last night that measured the case violated
    too, with the nights of the run, the last good night, what changed and the change point."""
    chain = []  # the violating nights just before tonight, newest first
    for r, d in zip(reversed(series), reversed(decided), strict=True):
        if d == "reject" or r.status == "failed":
            continue
        if d == "accept" or r.verdict not in VIOLATIONS:
            break
        chain.append(r)
    first_bad = chain[-1] if chain else row
    good = [r for r in base if r.night_time < first_bad.night_time]
    judged = dataclasses.replace(
        judged,
        since=first_bad.night,
        violating_nights=(*(r.night for r in reversed(chain)), row.night),
        last_good=good[-1].night if good else None,
        changes=tuple(changed_attributes(good[-1].attributes, first_bad.attributes))
        if good
        else (),
    )
    if not chain:
        return judged
    measured = [
        r
        for r, d in zip(series, decided, strict=True)
        if d != "reject" and r.status != "failed" and r.value is not None
    ]
    where, note = _located([*measured, row], first_bad, find)
    return dataclasses.replace(
        judged, verdict="regression", change_point=where, change_point_note=note
    )


def _new_normal(decided: Sequence[Decision | None]) -> int:
    """Where the baseline starts: at the first of the latest accepted nights in a row (rejected
    nights between them do not break the row), so accepting the two nights of a step makes
    both the new normal; 0 when no night was accepted."""
    last = max((i for i, d in enumerate(decided) if d == "accept"), default=None)
    if last is None:
        return 0
    start = last
    for i in range(last - 1, -1, -1):
        if decided[i] == "accept":
            start = i
        elif decided[i] != "reject":
            break
    return start


def judge_metric(
    series: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord | Decision],
    row: HistoryRow,
    policy: Policy = Policy(),
    find: Locate = change_points,
) -> MetricVerdict:
    """``row`` (tonight) against ``series``: the same case and metric on earlier nights, oldest
    first, as settled (with their verdicts)."""
    if row.status == "failed":
        return _plain(row, "could_not_measure", f"every measurement failed: {row.note or '-'}")
    if row.collapse and is_acceptance(row.metric):
        return _plain(row, "failure", f"acceptance collapse: {row.note or '-'}")
    if row.value is None or row.n < policy.min_repeats:
        return _plain(row, "insufficient_data", f"{row.n} values (need {policy.min_repeats})")
    decided = [_decided(decisions, r) for r in series]
    start = _new_normal(decided)
    pairs = zip(series[start:], decided[start:], strict=True)
    base = [r for r, d in pairs if counts_in_baseline(r, d)][-policy.baseline_nights :]
    # nights a person accepted seed the new normal at once: the night after them is judged
    # against them, however few (a blind exit-3 night would follow every accepted change)
    seeded = start < len(decided) and decided[start] == "accept"
    need = 1 if seeded else policy.min_baseline_nights
    if len(base) < need:
        reason = f"{len(base)} baseline nights (need {policy.min_baseline_nights})"
        return _plain(row, "insufficient_data", reason)
    judged = _compare(row, base, policy)
    if judged.verdict != "suspicious":
        return _persisting(judged, series, decided, policy)
    return _violation(judged, series, decided, row, base, find)


def _back(row: HistoryRow, policy: Policy) -> bool:
    """Whether a settled night's figure was within the threshold of its own baseline."""
    if row.value is None or row.baseline is None:
        return False
    info = metric(row.metric)
    change = _change(row.value, row.baseline, info.absolute)
    worse_by = change if info.direction == "lower" else -change
    return worse_by <= policy.thresholds.for_metric(row.metric)


def _persisting(
    judged: MetricVerdict,
    series: Sequence[HistoryRow],
    decided: Sequence[Decision | None],
    policy: Policy,
) -> MetricVerdict:
    """A case in regression stays there, exit 1, night after night, until a person accepts or
    rejects its nights, or it has been back within the threshold RECOVERY_NIGHTS nights running:
    the last of them is ``recovered``. A night still past the threshold whose test was not
    significant is no recovery either. A regression that went back to exit 0 on one good night
    would be forgotten while the change may still be there."""
    if judged.verdict not in ("ok", "improvement"):
        return judged
    recent = [
        (r, d)
        for r, d in zip(series, decided, strict=True)
        if d != "reject" and r.status != "failed" and r.value is not None
    ]
    if not recent or recent[-1][1] == "accept" or recent[-1][0].verdict != "regression":
        return judged  # no regression standing: none, or a person decided
    since = recent[-1][0].night
    for r, d in reversed(recent):  # where the violating run began
        if d == "accept" or r.verdict not in VIOLATIONS:
            break
        since = r.night
    back = 0
    if not judged.past_threshold:
        back = 1  # tonight
        for r, d in reversed(recent):
            if d == "accept" or r.verdict != "regression" or not _back(r, policy):
                break
            back += 1
    if back >= RECOVERY_NIGHTS:
        return dataclasses.replace(
            judged,
            verdict="recovered",
            reason=f"back within the threshold {back} nights running after the regression "
            f"since {since}; {judged.reason}",
        )
    return dataclasses.replace(
        judged,
        verdict="regression",
        since=since,
        reason=f"still in regression since {since}: back within the threshold {back} of "
        f"{RECOVERY_NIGHTS} nights (or `orch baseline accept|reject`); {judged.reason}",
    )


def judge_night(
    past: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord | Decision],
    tonight: Sequence[HistoryRow],
    policy: Policy = Policy(),
    find: Locate = change_points,
) -> list[CaseVerdict]:
    """Every case of ``tonight`` against the ``past`` rows (any order; rows of tonight's night
    or later are ignored), in tonight's case order."""
    nights = {r.night for r in tonight}
    first = min((r.night_time for r in tonight), default=None)
    series: dict[tuple[str, str], list[HistoryRow]] = {}
    for r in sorted(past, key=lambda r: (r.night_time, r.night)):
        if r.night not in nights and (first is None or r.night_time < first):
            series.setdefault((r.case_id, r.metric), []).append(r)
    by_case: dict[str, list[HistoryRow]] = {}
    for r in tonight:
        by_case.setdefault(r.case_id, []).append(r)
    out = []
    for rows in by_case.values():
        head = rows[0]
        verdicts = unreliable(
            rows,
            tuple(
                judge_metric(series.get((r.case_id, r.metric), []), decisions, r, policy, find)
                for r in rows
            ),
            policy,
        )
        out.append(
            CaseVerdict(head.case, head.status, head.collapse, head.note, head.attributes, verdicts)
        )
    return out


def unreliable(
    rows: Sequence[HistoryRow], verdicts: tuple[MetricVerdict, ...], policy: Policy
) -> tuple[MetricVerdict, ...]:
    """A case whose night went wrong is ``could_not_measure``, whatever its figures say: a
    measurement that failed among its repeats (the engine died, a host dropped), or requests
    that failed past the failure-rate threshold in any repeat (the other figures then cover
    only the requests that completed). Either may be the infrastructure, never a performance
    regression. An acceptance collapse stays a ``failure``."""
    head = rows[0]
    rates = next((r.values for r in rows if r.metric == "failure_rate"), ())
    limit = policy.thresholds.for_metric("failure_rate")
    if head.status == "failed":
        return verdicts
    if head.failed_repeats:
        total = head.failed_repeats + max((r.n for r in rows), default=0)
        why = f"{head.failed_repeats} of {total} measurements failed"
        if head.note and not head.collapse:
            why += f" (the first: {head.note})"
    elif rates and max(rates) > limit:
        why = (
            f"{max(rates):.1%} of requests failed in a repeat (more than {limit:.1%}): the "
            "figures cover only the requests that completed"
        )
    else:
        return verdicts
    return tuple(
        v
        if v.verdict == "failure"
        else dataclasses.replace(v, verdict="could_not_measure", reason=f"{why}; {v.reason}")
        for v in verdicts
    )


def settle(tonight: Sequence[HistoryRow], cases: Sequence[CaseVerdict]) -> list[HistoryRow]:
    """Tonight's rows with their verdict, baseline, p-value and ``accepted`` filled in: what
    ``History.append`` stores."""
    found = {(c.case_id, m.metric): m for c in cases for m in c.metrics}
    out = []
    for row in tonight:
        v = found.get((row.case_id, row.metric))
        if v is None:
            out.append(row)
            continue
        accepted = (
            joins_baseline(v)
            and row.value is not None
            and row.status == "measured"
            and not row.collapse
            and not row.failed_repeats
        )
        out.append(
            dataclasses.replace(
                row, verdict=v.verdict, baseline=v.baseline, p_value=v.p_value, accepted=accepted
            )
        )
    return out


def replay(
    nights: Sequence[Sequence[HistoryRow]],
    policy: Policy = Policy(),
    decisions: Mapping[str, DecisionRecord | Decision] | None = None,
    find: Locate = change_points,
) -> list[list[CaseVerdict]]:
    """Judge nights in turn, each against the ones before it as settled: what a nightly does
    over a history, without the files (for tests, and to judge a history again)."""
    done: list[HistoryRow] = []
    out = []
    for night in nights:
        cases = judge_night(done, decisions or {}, night, policy, find)
        done += settle(night, cases)
        out.append(cases)
    return out
