"""The verdict of a night, per case and metric, against a model of its nights (issue 24).

For one case's metric on one night:

- the **baseline** is the last ``baseline_nights`` (20) nights that count (below), in tonight's
  GPU operating mode (busy SM clock, power limit: ``cases.same_mode``); fewer than
  ``min_baseline_nights`` (3): ``insufficient_data``, naming a change of mode when nights of
  another mode would have been enough (a mode change is never judged as the software's);
- the **night model** (``model.NightModel``): the baseline's median and how far a night's mean
  ordinarily moves from it (between nights and within them, robust to one bad night);
- **suspicious**: tonight worse than the baseline by more than the metric's practical threshold
  (``Thresholds``: 5% throughput and acceptance, 10% latency, +0.01 failure rate) with p <
  ``alpha`` (0.001) against the night model (tonight's own scattered repeats widen it);
- **regression**: a run of the last nights, tonight last, that the model cannot explain: two
  nights each at p < ``confirm_alpha`` (0.01), or 3 to ``run_nights`` (10) nights whose mean
  with the worst left out is at p < ``run_alpha`` (0.0001), each run against the nights before
  it, its estimate past the threshold (short of it by at most one standard error, and a fifth
  of it); also a suspicious night right after a violating one;
- **drift**: over the last ``drift_nights`` (30), a trend the worse way (Kendall, p <
  ``drift_alpha``, 0.0002) whose Theil-Sen line changed by more than the threshold; the night
  it began is where a flat-then-sloped fit bends;
- **inconclusive**: past the threshold but not significant: the change, its 95% interval and
  the repeats a night would need to decide it (or that only more nights can), never ``ok``;
- better by more than the threshold and significant: ``improvement``; otherwise ``ok``;
- fewer than ``min_repeats`` (2) values tonight: ``insufficient_data``, never a silent pass;
- an acceptance collapse fails the case's acceptance figures (``failure``) whatever the history;
- a case whose measurements all failed (host down, engine died) is ``could_not_measure``: an
  infrastructure failure is never reported as a performance regression.

A regression persists: every night after it is ``regression`` (exit 1) until a person accepts
or rejects its nights, or it is back within the threshold ``RECOVERY_NIGHTS`` (2) nights running
(then ``recovered``).

Which nights count in a baseline: a night judged ``ok``, ``improvement``, ``inconclusive``,
``recovered`` or ``insufficient_data`` (stored as ``accepted`` when the night is settled); never
a violating, failed or collapsed one, so a regression stays one night after night instead of
becoming the norm. A person's decision wins: ``reject`` takes a night out of every baseline;
``accept`` puts it in and starts the baseline again from it (accepted nights in a row all count,
and seed the new normal at once: the next night is judged against them, however few).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

import numpy
from scipy import special as scipy_special

from orchestrator.config import nightly_terms as terms
from orchestrator.config.nightly_terms import (
    VIOLATIONS,
    Decision,
    Verdict,
    is_acceptance,
    metric,
)
from orchestrator.nightly.cases import changed_attributes, same_mode
from orchestrator.nightly.changepoint import Locate, change_points
from orchestrator.nightly.history import DecisionRecord, HistoryRow
from orchestrator.nightly.judged import (
    DEFAULT_POLICY,
    pct,
    plain,
    relative_change,
    worse_of,
)
from orchestrator.nightly.judged import (
    NORMAL as NORMAL,
)
from orchestrator.nightly.judged import (
    RECOVERY_NIGHTS as RECOVERY_NIGHTS,
)
from orchestrator.nightly.judged import (
    CaseVerdict as CaseVerdict,
)
from orchestrator.nightly.judged import (
    MetricVerdict as MetricVerdict,
)
from orchestrator.nightly.judged import (
    Policy as Policy,
)
from orchestrator.nightly.judged import (
    Thresholds as Thresholds,
)
from orchestrator.nightly.runs import (
    drift_verdict,
    located,
    run_regression,
    too_few,
)
from orchestrator.nightly.runs import (
    night_model as night_model,
)
from orchestrator.nightly.runs import (
    own_se as own_se,
)


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
    ``ok``, ``improvement``, ``inconclusive``, ``recovered`` or ``insufficient_data``. A night
    past the threshold that was not significant counts too: leaving the worse nights out would
    narrow the spread and lift the center, and call the next ordinary night a regression; a real
    step that slipped in is still caught by the runs of nights, each tested against the nights
    before it."""
    return judged.verdict in NORMAL


def _compare(row: HistoryRow, base: Sequence[HistoryRow], policy: Policy) -> MetricVerdict:
    """Tonight against its baseline rows alone (verdict ok, suspicious, inconclusive or
    improvement; the caller makes a regression of a run): against the night model from 3
    nights on (tonight's own scattered repeats widen it), with fewer against the
    baseline's repeats."""
    info = metric(row.metric)
    assert row.value is not None
    model = night_model(base)
    baseline = (
        model.center if model else statistics.median([r.value for r in base if r.value is not None])
    )
    change = relative_change(row.value, baseline, info.absolute)
    worse_by = change if info.direction == "lower" else -change
    threshold = policy.thresholds.for_metric(row.metric)
    worse = worse_of(row.value, baseline, info.direction)
    if model is not None:
        p = model.night_p(worse if worse_by > 0 else -worse, own_se(row))
    else:  # too few nights for a spread: tonight's repeats against the baseline's
        lower = (info.direction == "higher") == (worse_by > 0)  # the way tonight moved
        p = welch_p(row.values, baseline_sample(base), "less" if lower else "greater")
    reason = (
        f"{pct(change, info.absolute)} vs baseline {baseline:.6g} (median of {len(base)} "
        f"nights), threshold {pct(threshold, info.absolute).lstrip('+')}, p={p:.2g}"
    )
    verdict: Verdict = "ok"
    interval, repeats = None, None
    if worse_by > threshold:
        verdict = "suspicious" if p < policy.alpha else "inconclusive"
        if verdict == "inconclusive":
            reason += f": past the threshold, not significant (p >= {policy.alpha:g}); "
            if model is None:
                reason += f"{len(base)} baseline nights give no night-to-night spread yet"
            else:
                interval = _change_interval(model.interval(worse), baseline, info)
                repeats = model.repeats_to_decide(worse, policy.alpha, row.spread)
                reason += _undecided(interval, info.absolute, repeats, row.n)
    elif -worse_by > threshold and p < policy.alpha:
        verdict = "improvement"
    elif -worse_by > threshold:
        reason += f": past the threshold, not significant (p >= {policy.alpha:g})"
    return dataclasses.replace(
        plain(row, verdict, reason),
        baseline=baseline,
        baseline_nights=tuple(r.night for r in base),
        change=change,
        threshold=threshold,
        absolute=info.absolute,
        p_value=p,
        interval=interval,
        repeats_needed=repeats,
    )


def _change_interval(
    worse: tuple[float, float], baseline: float, info: terms.Metric
) -> tuple[float, float]:
    """An interval of how much worse, as an interval of the change (signed as measured)."""
    sign = 1.0 if info.direction == "lower" else -1.0
    ends = [relative_change(baseline + sign * w, baseline, info.absolute) for w in worse]
    return min(ends), max(ends)


def _undecided(interval: tuple[float, float], absolute: bool, repeats: int | None, n: int) -> str:
    lo, hi = (pct(x, absolute) for x in interval)
    if repeats is None:
        more = "more repeats would not decide it (the nights themselves move that much): the "
        more += "next nights will"
    elif repeats <= n:
        more = f"{repeats} repeats a night decide such a change when nights are this steady"
    else:
        more = f"about {repeats} repeats a night (not {n}) would have decided it"
    return f"95% interval {lo} to {hi}; {more}"


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
        if d == "reject" or r.status == "failed" or r.verdict in UNJUDGED:
            continue  # a night that judged nothing breaks no run of violating nights
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
    where, note = located([*measured, row], first_bad, find)
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


def _usable(row: HistoryRow, decision: Decision | None) -> bool:
    """Whether a past night's figure may be part of a run or a trend: measured whole (no
    failed repeat, no collapse) and not rejected."""
    return (
        decision != "reject"
        and row.status == "measured"
        and row.value is not None
        and not row.failed_repeats
        and not row.collapse
    )


def _comparable(past: HistoryRow, tonight: HistoryRow) -> bool:
    """Whether a past night may judge tonight's figure: a speed (a throughput, a latency) only
    in the same GPU operating mode; acceptance and the failure rate do not depend on it."""
    if is_acceptance(tonight.metric) or metric(tonight.metric).absolute:
        return True
    return same_mode(past.attributes, tonight.attributes)


def judge_metric(
    series: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord | Decision],
    row: HistoryRow,
    policy: Policy = DEFAULT_POLICY,
    find: Locate = change_points,
) -> MetricVerdict:
    """``row`` (tonight) against ``series``: the same case and metric on earlier nights, oldest
    first, as settled (with their verdicts)."""
    if row.status == "failed":
        return plain(row, "could_not_measure", f"every measurement failed: {row.note or '-'}")
    if row.collapse and is_acceptance(row.metric):
        return plain(row, "failure", f"acceptance collapse: {row.note or '-'}")
    if row.value is None or row.n < policy.min_repeats:
        return plain(row, "insufficient_data", f"{row.n} values (need {policy.min_repeats})")
    decided = [_decided(decisions, r) for r in series]
    start = _new_normal(decided)
    pairs = list(zip(series[start:], decided[start:], strict=True))
    counted = [r for r, d in pairs if counts_in_baseline(r, d)]
    pool = [r for r in counted if _comparable(r, row)]
    base = pool[-policy.baseline_nights :]
    # nights a person accepted seed the new normal at once: the night after them is judged
    # against them, however few (a blind exit-3 night would follow every accepted change)
    seeded = start < len(decided) and decided[start] == "accept"
    need = 1 if seeded else policy.min_baseline_nights
    if len(base) < need:
        return too_few(row, base, counted, policy)
    judged = _compare(row, base, policy)
    measured = [r for r, d in pairs if _usable(r, d) and _comparable(r, row)]
    run, unsure = run_regression(judged, row, measured, pool, policy, find)
    if run is not None:
        return run
    if judged.verdict == "suspicious":
        return _violation(judged, series, decided, row, base, find)
    drift = drift_verdict(judged, row, measured, policy, find)
    if drift is not None:
        return drift
    final = _persisting(judged, series, decided, policy)
    if final.verdict == "ok" and unsure is not None:  # recent nights past it: never "ok"
        return dataclasses.replace(
            final, verdict="inconclusive", reason=f"{unsure}; {final.reason}"
        )
    return final


# Verdicts that judged nothing of the figure: they neither end nor break a run of bad nights.
UNJUDGED: frozenset[Verdict] = frozenset({"could_not_measure", "insufficient_data"})
STANDING: tuple[Verdict, ...] = ("regression", "drift")  # exit 1 until recovered or decided


def _back(row: HistoryRow, policy: Policy) -> bool:
    """Whether a settled night's figure was within the threshold of its own baseline."""
    if row.value is None or row.baseline is None:
        return False
    info = metric(row.metric)
    change = relative_change(row.value, row.baseline, info.absolute)
    worse_by = change if info.direction == "lower" else -change
    return worse_by <= policy.thresholds.for_metric(row.metric)


def _persisting(
    judged: MetricVerdict,
    series: Sequence[HistoryRow],
    decided: Sequence[Decision | None],
    policy: Policy,
) -> MetricVerdict:
    """A case in regression (or drift) stays there, exit 1, night after night, until a person
    accepts or rejects its nights, or it has been back within the threshold RECOVERY_NIGHTS
    nights running: the last of them is ``recovered``. A night still past the threshold is no
    recovery, and a night that judged nothing (could not measure, insufficient data, another
    GPU mode) neither ends it nor counts toward its end: a regression that went back to exit 0
    on one such night would be forgotten while the change may still be there. A night after a
    suspicious one that does not confirm it says that it clears it."""
    if judged.verdict not in ("ok", "improvement", "inconclusive"):
        return judged
    recent = [
        (r, d)
        for r, d in zip(series, decided, strict=True)
        if d != "reject"
        and r.status != "failed"
        and r.value is not None
        and r.verdict not in UNJUDGED
    ]
    if recent and recent[-1][1] is None and recent[-1][0].verdict == "suspicious":
        last = recent[-1][0].night  # said, so that a red night is never silently forgotten
        return dataclasses.replace(
            judged, reason=f"clears the suspicious night {last} (not confirmed); {judged.reason}"
        )
    if not recent or recent[-1][1] == "accept" or recent[-1][0].verdict not in STANDING:
        return judged  # nothing standing: none, or a person decided
    kind = recent[-1][0].verdict
    since = recent[-1][0].night
    for r, d in reversed(recent):  # where the violating run began
        if d == "accept" or r.verdict not in VIOLATIONS:
            break
        since = r.night
    back = 0
    if not judged.past_threshold:
        back = 1  # tonight
        for r, d in reversed(recent):
            if d == "accept" or r.verdict not in STANDING or not _back(r, policy):
                break
            back += 1
    if back >= RECOVERY_NIGHTS:
        return dataclasses.replace(
            judged,
            verdict="recovered",
            reason=f"back within the threshold {back} nights running after the {kind} "
            f"since {since}; {judged.reason}",
        )
    return dataclasses.replace(
        judged,
        verdict=kind,
        since=since,
        reason=f"still in {kind} since {since}: back within the threshold {back} of "
        f"{RECOVERY_NIGHTS} nights (or `orch baseline accept|reject`); {judged.reason}",
    )


def judge_night(
    past: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord | Decision],
    tonight: Sequence[HistoryRow],
    policy: Policy = DEFAULT_POLICY,
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
    policy: Policy = DEFAULT_POLICY,
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
