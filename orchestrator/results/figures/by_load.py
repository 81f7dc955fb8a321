"""Figures against the load: a panel per metric, x = concurrency (log2) or request rate.

Each configuration's mean over repeats is a line, its 95% interval a band around it (the spread
of the repeats), a noisy point is hollow. A sweep over both kinds of load (one run by
concurrency, another by rate) gets a row of panels per kind: the two do not share an axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy
import pandas as pd

from orchestrator.results.figures.pareto import require
from orchestrator.results.figures.style import (
    CI,
    Series,
    draw_points,
    flags,
    floats,
    hollow_handle,
    kinds_of,
    legend,
    load_axis,
    metric_name,
    noisy_text,
    pyplot,
    series_of,
    setup_line,
    statistic,
    title,
    unmeasured,
)
from orchestrator.results.figures.style import png as to_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOAD_METRICS = ("output_tok_s", "tpot_ms_median", "ttft_ms_p99")
KIND_WORDS = {"concurrency": "concurrency", "request_rate": "request rate"}


def draw_mean(ax: Any, series: Series, rows: pd.DataFrame, metric: str) -> bool:
    """The mean line, the interval band (gid "band:") and the markers; False if nothing known."""
    rows = rows.sort_values("load_value")
    xs, ys = floats(rows["load_value"]), floats(rows[f"{metric}_mean"])
    known = ~(numpy.isnan(xs) | numpy.isnan(ys))
    if not known.any():
        return False
    ax.plot(
        xs[known],
        ys[known],
        color=series.color,
        linestyle=series.linestyle,
        linewidth=1.5,
        gid=f"mean:{series.label}",
    )
    low, high = floats(rows[f"{metric}_low"]), floats(rows[f"{metric}_high"])
    band = known & ~(numpy.isnan(low) | numpy.isnan(high))
    if band.any():
        ax.fill_between(
            xs[band],
            low[band],
            high[band],
            color=series.color,
            alpha=0.18,
            linewidth=0,
            gid=f"band:{series.label}",
        )
    draw_points(ax, xs[known], ys[known], flags(rows[f"{metric}_noisy"])[known], series)
    return True


def _panel(
    ax: Any, series: Sequence[tuple[Series, pd.DataFrame]], kind: str, metric: str
) -> list[Series]:
    drawn = [s for s, rows in series if draw_mean(ax, s, rows[rows["load_kind"] == kind], metric)]
    values = [
        v for _, rows in series for v in floats(rows[rows["load_kind"] == kind]["load_value"])
    ]
    load_axis(ax, [kind], values)
    name, unit = metric_name(metric)
    ax.set_title(f"{name} ({unit})" if unit else name, fontsize=10)
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    return drawn


def load_figure(
    agg: pd.DataFrame,
    metrics: Sequence[str] = LOAD_METRICS,
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """The figure (the caller closes it) of an aggregate (``stats.aggregate``) holding
    ``metrics``; ``labels`` names the results folders of a compare."""
    require(agg, tuple(metrics))
    kinds = kinds_of(agg) or ["concurrency"]
    plt = pyplot()
    fig, axes = plt.subplots(
        len(kinds),
        len(metrics),
        squeeze=False,
        layout="constrained",
        figsize=(4.6 * len(metrics) + 0.6, 4.2 * len(kinds) + 0.8),
    )
    series = series_of(agg, colors=colors, labels=labels)
    drawn: list[Series] = []
    for row, kind in zip(axes, kinds, strict=True):
        for ax, metric in zip(row, metrics, strict=True):
            drawn += _panel(ax, series, kind, metric)
    shown = [s for s, _ in series if s in drawn]
    noisy = any(str(c.get_gid()).startswith("noisy:") for ax in axes.flat for c in ax.collections)
    legend(fig, shown, extra=[(noisy_text(agg), hollow_handle())] if noisy else ())
    names = " / ".join(metric_name(m)[0] for m in metrics)
    load = " / ".join(KIND_WORDS.get(k, k) for k in kinds)
    counts = pd.concat([agg[f"{m}_n"] for m in metrics]) if len(agg) else []
    stat = statistic(counts, ci=f"band: {CI}") + unmeasured(series, shown)
    fig.suptitle(title(f"{names} vs {load}", setup_line(agg), stat))
    return fig


def load_plot(
    agg: pd.DataFrame,
    metrics: Sequence[str] = LOAD_METRICS,
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> bytes:
    """PNG bytes of ``load_figure``."""
    return to_png(load_figure(agg, metrics, colors=colors, labels=labels))
