"""A nightly metric over the last nights: a line per case with its spread, tonight's baseline
band, the nights that violated in red, the rejected (and otherwise uncounted) ones in grey, and
dashed lines where the shift began (``since``: the first violating night of the current run;
the change point: where Apache Otava puts it).

Drawn from ``results.trend.MetricTrend`` (plain data, its tests check the values); this module
only draws. x is the night's place among the nights shown, one step per night whatever the
hours between them (nights run minutes apart in a test, a weekend apart in a lab), labelled
with its UTC date (and time when two nights share a date). The band spans the baseline nights
tonight was judged against, up to tonight: a point outside it on the worse side was past the
practical threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.results.figures.style import MAX_TITLE_LINE, Series, legend, note, pyplot, title
from orchestrator.results.figures.style import png as to_png
from orchestrator.results.plot import COLLAPSE_COLOR, palette
from orchestrator.results.trend import LABEL_SEPARATOR, CaseTrend, MetricTrend

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ALARM_COLOR = COLLAPSE_COLOR
GREY = "#9ba3ab"
HALF = 0.5  # the band reaches half a night past its first and last night
Places = dict[str, int]  # night -> its x


def wrap(label: str, width: int = MAX_TITLE_LINE) -> str:
    """A case label on lines of at most ``width`` characters, broken between its parts."""
    lines: list[str] = []
    for part in label.split(LABEL_SEPARATOR) if label else []:
        if lines and len(lines[-1]) + len(LABEL_SEPARATOR) + len(part) <= width:
            lines[-1] += LABEL_SEPARATOR + part
        else:
            lines.append(part)
    return "\n".join(lines)


def case_label(case: CaseTrend) -> str:
    """A legend entry: what tells the case from the others, and its id (nightly.md's)."""
    return f"{case.short} [{case.case_id}]" if case.short else f"case {case.case_id}"


def series_of(trend: MetricTrend) -> list[Series]:
    colors = palette(c.case_id for c in trend.cases)
    return [
        Series("", c.case_id, "", case_label(c), colors[c.case_id], "-", "o") for c in trend.cases
    ]


def places(trend: MetricTrend) -> tuple[Places, list[str]]:
    """Each night's x (oldest 0) and its tick label: the UTC date, with the time where two
    nights shown share a date."""
    nights = sorted({(p.night_time, p.night) for c in trend.cases for p in c.points})
    dates = [t.strftime("%m-%d") for t, _ in nights]
    labels = [
        f"{d}\n{t.strftime('%H:%M')}" if dates.count(d) > 1 else d
        for d, (t, _) in zip(dates, nights, strict=True)
    ]
    return {night: i for i, (_, night) in enumerate(nights)}, labels


def _line(ax: Any, case: CaseTrend, s: Series, at: Places) -> None:
    """The figures and their ± one standard deviation (gids "line:", "spread:" + case id)."""
    xs = [at[p.night] for p in case.points]
    ys = [math.nan if p.value is None else p.value for p in case.points]
    errs = [0.0 if p.spread is None else p.spread for p in case.points]
    ax.plot(xs, ys, color=s.color, marker=s.marker, markersize=4, linewidth=1.3,
            gid=f"line:{case.case_id}")  # fmt: skip
    if any(errs):
        ax.errorbar(xs, ys, yerr=errs, fmt="none", ecolor=s.color, elinewidth=1.0, capsize=3,
                    gid=f"spread:{case.case_id}")  # fmt: skip


def _marks(ax: Any, case: CaseTrend, at: Places) -> None:
    """Violating nights in red, rejected or uncounted ones in grey (gids "violated:",
    "greyed:" + case id)."""
    drawn = [p for p in case.points if p.value is not None]
    red = [p for p in drawn if p.violated]
    grey = [p for p in drawn if not p.violated and (p.rejected or not p.counted)]
    if red:
        ax.scatter([at[p.night] for p in red], [p.value for p in red], s=70, zorder=4,
                   color=ALARM_COLOR, edgecolors="black", linewidths=0.6,
                   gid=f"violated:{case.case_id}")  # fmt: skip
    if grey:
        ax.scatter([at[p.night] for p in grey], [p.value for p in grey], s=55, zorder=4,
                   color=GREY, edgecolors="dimgrey", linewidths=0.6,
                   gid=f"greyed:{case.case_id}")  # fmt: skip


def _band(ax: Any, case: CaseTrend, s: Series, at: Places) -> None:
    """Tonight's baseline ± threshold, over its baseline nights up to tonight (gid "band:")."""
    band = case.band
    if band is None or not case.points:
        return
    inside = [at[n] for n in band.nights if n in at]
    start = min(inside, default=at[case.points[0].night]) - HALF
    end = at[case.points[-1].night] + HALF
    ax.fill_between([start, end], band.low, band.high, color=s.color, alpha=0.15, linewidth=0,
                    gid=f"band:{case.case_id}")  # fmt: skip
    ax.hlines(band.baseline, start, end, colors=s.color, linestyles=":", linewidth=1.0,
              gid=f"baseline:{case.case_id}")  # fmt: skip


def _shift(ax: Any, case: CaseTrend, s: Series, at: Places) -> None:
    """Dashed lines at ``since`` and the change point (one line when they agree; gids
    "since:", "change-point:" + case id)."""
    marks: list[tuple[str, str | None, str]]
    if case.since and case.since == case.change_point:
        marks = [("since", case.since, "since = change point")]
    else:
        marks = [
            ("since", case.since, "since"),
            ("change-point", case.change_point, "change point"),
        ]
    for kind, night, words in marks:
        when = at.get(night) if night else None
        if when is None:
            continue
        ax.axvline(when, color=s.color, linestyle="--", linewidth=1.2, gid=f"{kind}:{case.case_id}")
        ax.text(when, 0.98, f" {words}", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=7, color=s.color)  # fmt: skip


def _handles(trend: MetricTrend) -> list[tuple[str, Any]]:
    """The legend's entries for the marks the figure draws."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    cases = trend.cases
    out: list[tuple[str, Any]] = []
    if any(c.band for c in cases):
        out.append(("band: tonight's baseline ± threshold", Patch(color="grey", alpha=0.25)))
    if any(c.violating for c in cases):
        dot = Line2D([], [], color=ALARM_COLOR, marker="o", markeredgecolor="black", ls="none")
        out.append(("violated (suspicious, regression, failure)", dot))
    drawn = [p for c in cases for p in c.points if p.value is not None]
    if any(p.rejected or not p.counted for p in drawn if not p.violated):
        grey = Line2D([], [], color=GREY, marker="o", markeredgecolor="dimgrey", ls="none")
        out.append(("rejected or not counted in a baseline", grey))
    if any(c.since or c.change_point for c in cases):
        out.append(("since / change point", Line2D([], [], color="grey", linestyle="--")))
    return out


def _axes(ax: Any, trend: MetricTrend, labels: Sequence[str]) -> None:
    step = max(1, math.ceil(len(labels) / 15))  # at most ~15 labels
    ticks = list(range(0, len(labels), step))
    ax.set_xticks(ticks, [labels[i] for i in ticks], fontsize=8)
    ax.set_xlim(-0.7, len(labels) - 0.3)
    ax.set_xlabel("night (UTC date)")
    better = "higher" if trend.direction == "higher" else "lower"
    unit = f" ({trend.unit})" if trend.unit else ""
    ax.set_ylabel(f"{trend.metric}{unit}\n{better} is better")
    ax.grid(alpha=0.3)


def trend_figure(trend: MetricTrend, *, nights: Sequence[str] = ()) -> Figure:
    """The figure (the caller closes it); ``nights``: the nights shown (for the title)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12.0, 4.8), layout="constrained")
    series = series_of(trend)
    at, labels = places(trend)
    for case, s in zip(trend.cases, series, strict=True):
        _band(ax, case, s, at)
        _line(ax, case, s, at)
        _marks(ax, case, at)
        _shift(ax, case, s, at)
    if any(p.value is not None for c in trend.cases for p in c.points):
        _axes(ax, trend, labels)
    else:
        note(ax, "no night measured this metric")
    legend(fig, series, extra=_handles(trend))
    shown = f"last {len(nights)} night{'s' if len(nights) != 1 else ''}" if nights else ""
    stat = "; ".join(x for x in (shown, "error bars: ± 1 s.d. over repeats") if x)
    head = f"Nightly trend: {trend.metric} — tonight {trend.verdict.replace('_', ' ')}"
    fig.suptitle("\n".join(x for x in (title(head, stat), wrap(trend.common)) if x), fontsize=11)
    return fig


def trend_plot(trend: MetricTrend, *, nights: Sequence[str] = ()) -> bytes:
    """PNG bytes of ``trend_figure``."""
    return to_png(trend_figure(trend, nights=nights))
