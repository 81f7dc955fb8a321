"""What the trend plots of a night show, as data: per metric the night judged, each case's
figure over the last nights with its spread, tonight's baseline band, the violating and rejected
nights, and where the shift began (``since``, the change point).

Built from the history (read once) and the night's verdict (its ``nightly.json``), without
matplotlib, as ``results/trend.py``'s plain data: ``results/figures/trend.py`` draws it, and
tests check it as plain values. Tonight's verdicts are the ones in ``nightly.json`` (the
history holds the same, settled; a night judged again with ``append=False`` is not in it at
all). Decisions are the latest ones: a report made later shows a night a person rejected since
as rejected.

The band is the baseline tonight was judged against ± the metric's practical threshold (the one
``nightly.json`` recorded, else the playbook's, else the default): a night outside it on the
worse side was past the threshold, and a violation if the t-test agreed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from orchestrator.config.nightly_terms import Decision, metric, worst
from orchestrator.nightly.history import DecisionRecord, History, HistoryRow
from orchestrator.nightly.report import JSON_FILE, NightlyVerdict
from orchestrator.nightly.verdict import (
    CaseVerdict,
    MetricVerdict,
    Thresholds,
    counts_in_baseline,
    joins_baseline,
)
from orchestrator.results.trend import (
    LABEL_SEPARATOR,
    Band,
    CaseSummary,
    CaseTrend,
    MetricTrend,
    NightTrend,
    TrendPoint,
)

NIGHTS = 30  # nights a trend shows, tonight the last


def summary_line(verdict: NightlyVerdict) -> str:
    """ "REGRESSION (exit 1): playbook nightly, night N (2026-12-02 03:00 UTC): 1 regression,
    10 ok (1 case)." """
    when = f" ({verdict.night_time:%Y-%m-%d %H:%M} UTC)" if verdict.night_time else ""
    counts = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in verdict.counts())
    cases = len(verdict.cases)
    return (
        f"{verdict.verdict.upper().replace('_', ' ')} (exit {verdict.exit_code}): playbook "
        f"{verdict.playbook}, night {verdict.night}{when}: {counts or 'nothing judged'} "
        f"({cases} case{'s' if cases != 1 else ''})."
    )


def case_summaries(verdict: NightlyVerdict) -> tuple[CaseSummary, ...]:
    """Each case's worst verdict and what is not ok: the report names the cases its plots'
    legends only abbreviate."""
    return tuple(
        CaseSummary(
            case.case_id,
            case.case.label,
            case.verdict,
            tuple((m.metric, m.verdict) for m in case.metrics if m.verdict != "ok"),
        )
        for case in verdict.cases
    )


def split_labels(labels: Sequence[str]) -> tuple[str, list[str]]:
    """(the parts every label shares, each label's other parts): the plot's subtitle and its
    legend entries, so that a legend names what differs, not six parts of which five agree."""
    parts = [label.split(LABEL_SEPARATOR) for label in labels]
    shared = set.intersection(*(set(p) for p in parts)) if parts else set()
    common = LABEL_SEPARATOR.join(p for p in parts[0] if p in shared) if parts else ""
    own = [LABEL_SEPARATOR.join(p for p in ps if p not in shared) for ps in parts]
    return common, own


def band_of(judged: MetricVerdict, thresholds: Thresholds) -> Band | None:
    """Tonight's band: the stored baseline ± the threshold recorded with the verdict, else the
    playbook's (``thresholds``); an absolute one (a failure rate) stops at 0."""
    if judged.baseline is None:
        return None
    limit = judged.threshold
    if limit is None:
        limit = thresholds.for_metric(judged.metric)
    absolute = metric(judged.metric).absolute
    width = limit if absolute else limit * abs(judged.baseline)
    low = judged.baseline - width
    return Band(
        baseline=judged.baseline,
        low=max(low, 0.0) if absolute else low,  # a rate is never below 0
        high=judged.baseline + width,
        threshold=limit,
        absolute=absolute,
        nights=judged.baseline_nights,
    )


def window(rows: Sequence[HistoryRow], night: str, when: datetime | None, size: int) -> list[str]:
    """The last ``size`` nights up to and including ``night`` (at ``when``), oldest first."""
    times = {r.night: r.night_time for r in rows}
    if when is not None:
        times[night] = when
    tonight = times.get(night)
    kept = [(t, n) for n, t in times.items() if tonight is None or (t, n) <= (tonight, night)]
    return [n for _, n in sorted(kept)][-size:]


def _decision(decisions: Mapping[str, DecisionRecord], night: str) -> Decision | None:
    found = decisions.get(night)
    return found.decision if found else None


def past_point(row: HistoryRow, decision: Decision | None) -> TrendPoint:
    return TrendPoint(
        night=row.night,
        night_time=row.night_time,
        value=row.value,
        spread=row.spread,
        verdict=row.verdict,
        decision=decision,
        counted=counts_in_baseline(row, decision),
    )


def tonight_point(
    case: CaseVerdict,
    judged: MetricVerdict,
    row: HistoryRow | None,
    night: str,
    when: datetime,
    decision: Decision | None,
) -> TrendPoint:
    """Tonight, as judged: the history's row with the verdict of ``nightly.json``, or the
    verdict's own figures when the night is not in the history (judged with ``append=False``)."""
    if row is not None:
        return replace(past_point(row, decision), verdict=judged.verdict)
    measured = judged.value is not None and case.status != "failed"
    joins = decision == "accept" or (decision is None and joins_baseline(judged))
    return TrendPoint(
        night=night,
        night_time=when,
        value=judged.value,
        spread=judged.spread,
        verdict=judged.verdict,
        decision=decision,
        counted=measured and joins,
    )


@dataclass(frozen=True)
class _Night:
    """What every case's trend of one night shares."""

    name: str
    when: datetime | None
    nights: tuple[str, ...]
    decisions: Mapping[str, DecisionRecord]
    thresholds: Thresholds


def case_trend(
    night: _Night,
    case: CaseVerdict,
    judged: MetricVerdict,
    rows: Mapping[str, HistoryRow],
    short: str,
) -> CaseTrend:
    """One case's line: its rows of the shown nights (``rows`` by night), tonight as judged."""
    points = []
    for name in night.nights:
        decision = _decision(night.decisions, name)
        row = rows.get(name)
        if name == night.name:
            when = row.night_time if row is not None else night.when
            if when is not None:
                points.append(tonight_point(case, judged, row, name, when, decision))
        elif row is not None:
            points.append(past_point(row, decision))
    return CaseTrend(
        case_id=case.case_id,
        label=case.case.label,
        short=short,
        verdict=judged.verdict,
        points=tuple(points),
        band=band_of(judged, night.thresholds),
        violating=tuple(p.night for p in points if p.violated),
        since=judged.since,
        change_point=judged.change_point,
        change_point_note=judged.change_point_note,
    )


def judged_metrics(verdict: NightlyVerdict) -> dict[str, list[tuple[CaseVerdict, MetricVerdict]]]:
    """Metric -> (case, its verdict) for every metric the night judged, in the night's order."""
    found: dict[str, list[tuple[CaseVerdict, MetricVerdict]]] = {}
    for case in verdict.cases:
        for judged in case.metrics:
            found.setdefault(judged.metric, []).append((case, judged))
    return found


def night_trend(
    verdict: NightlyVerdict,
    rows: Sequence[HistoryRow],
    decisions: Mapping[str, DecisionRecord],
    *,
    thresholds: Thresholds | None = None,
    size: int = NIGHTS,
    notes: Sequence[str] = (),
) -> NightTrend:
    """The trend of ``verdict``'s night over the history ``rows`` (any order, any night) and
    the people's ``decisions``."""
    nights = window(rows, verdict.night, verdict.night_time, size)
    night = _Night(
        verdict.night, verdict.night_time, tuple(nights), decisions, thresholds or Thresholds()
    )
    shown = set(nights)
    series: dict[tuple[str, str], dict[str, HistoryRow]] = {}
    for r in rows:
        if r.night in shown:
            series.setdefault((r.case_id, r.metric), {})[r.night] = r
    metrics = []
    for name, judged in judged_metrics(verdict).items():
        common, shorts = split_labels([c.case.label for c, _ in judged])
        cases = tuple(
            case_trend(night, c, m, series.get((c.case_id, name), {}), short)
            for (c, m), short in zip(judged, shorts, strict=True)
        )
        info = metric(name)
        overall = worst([c.verdict for c in cases])
        metrics.append(MetricTrend(name, info.direction, info.unit, overall, common, cases))
    return NightTrend(
        playbook=verdict.playbook,
        night=verdict.night,
        verdict=verdict.verdict,
        exit_code=verdict.exit_code,
        counts=tuple(verdict.counts()),
        summary=summary_line(verdict),
        cases=case_summaries(verdict),
        nights=tuple(nights),
        metrics=tuple(metrics),
        notes=tuple(dict.fromkeys([*verdict.notes, *notes])),
    )


_CASES = TypeAdapter(tuple[CaseVerdict, ...])


def read_verdict(path: Path) -> tuple[NightlyVerdict, Thresholds]:
    """A ``nightly.json`` as the verdict it was written from, and the playbook's thresholds
    when the file records them (a ``thresholds`` mapping, metric -> threshold; else the
    defaults). ValueError when the file is not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path} is not a nightly verdict (not a JSON object)")
    try:
        when = doc.get("night_time")
        verdict = NightlyVerdict(
            playbook=str(doc["playbook"]),
            night=str(doc["night"]),
            cases=_CASES.validate_python(doc.get("cases") or []),
            night_time=datetime.fromisoformat(when) if isinstance(when, str) else None,
            results_dir=doc.get("results_dir"),
            notes=tuple(str(n) for n in doc.get("notes") or ()),
        )
        given = doc.get("thresholds")
        thresholds = Thresholds(dict(given)) if isinstance(given, dict) else Thresholds()
    except KeyError as exc:
        raise ValueError(f"{path} is not a nightly verdict (no {exc.args[0]!r})") from exc
    except ValidationError as exc:
        raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from exc
    return verdict, thresholds


def folder_trend(folder: Path, *, size: int = NIGHTS) -> NightTrend | None:
    """The trend of the night a results folder holds (None: no ``nightly.json``, not a night),
    from the playbook's history beside it (``<folder>/../history``), read once. A verdict that
    cannot be read raises ValueError; a missing history gives tonight alone, said in a note."""
    path = folder / JSON_FILE
    if not path.is_file():
        return None
    verdict, thresholds = read_verdict(path)
    history = History(folder.parent, verdict.playbook)
    rows = history.rows()
    notes = [] if rows else [f"no nightly history in {history.path}: tonight alone is shown"]
    decisions = history.decisions()
    notes += history.problems
    return night_trend(verdict, rows, decisions, thresholds=thresholds, size=size, notes=notes)
