"""Throughput per GPU vs interactivity, one Pareto front per configuration.

The view public engine comparisons decide on: x = interactivity (tok/s/user = 1000 / median
TPOT), y = throughput per GPU, a point per load level. A configuration's front (``stats.
pareto_front``) is what it can offer: at each level of interactivity, the most throughput any
of its points reached. Every point is drawn, labelled with its load, with its 95% interval in
both directions when repeated, hollow when a figure of it is noisy. With ``slo`` (``SloMarks``)
the SLO is drawn too (``figures/slo.py``): target lines, missed points crossed, search answers
starred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy
import pandas as pd

from orchestrator.results.figures.slo import (
    SloMarks,
    draw_answer,
    draw_missed,
    draw_targets,
    legend_entries,
)
from orchestrator.results.figures.style import (
    Series,
    draw_points,
    figure_colors,
    flags,
    floats,
    hollow_handle,
    legend,
    metric_name,
    noisy_text,
    point_label,
    pyplot,
    series_of,
    setup_line,
    statistic,
    title,
    unmeasured,
)
from orchestrator.results.figures.style import png as to_png
from orchestrator.results.frame import frame_of
from orchestrator.results.model import RunResult
from orchestrator.results.stats import aggregate, pareto_front
from orchestrator.results.store import write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

X = "interactivity"


def require(agg: pd.DataFrame, metrics: tuple[str, ...]) -> None:
    """An aggregate (``stats.aggregate``) with these metrics, or a ValueError naming them."""
    missing = [f"{m}_mean" for m in metrics if f"{m}_mean" not in agg.columns]
    if missing:
        raise ValueError(
            f"the aggregate has no {', '.join(missing)}: aggregate the frame with "
            f"metrics {', '.join(repr(m) for m in metrics)}"
        )


def _errorbars(ax: Any, rows: pd.DataFrame, y: str, series: Series) -> None:
    """95% intervals of the points with repeats, in x and in y."""
    half = {}
    for m in (X, y):
        mean = floats(rows[f"{m}_mean"])
        low = numpy.nan_to_num(mean - floats(rows[f"{m}_low"]))
        high = numpy.nan_to_num(floats(rows[f"{m}_high"]) - mean)
        half[m] = numpy.vstack([low, high])
    shown = (half[X].sum(axis=0) + half[y].sum(axis=0)) > 0
    if shown.any():
        ax.errorbar(
            floats(rows[f"{X}_mean"])[shown],
            floats(rows[f"{y}_mean"])[shown],
            xerr=half[X][:, shown],
            yerr=half[y][:, shown],
            fmt="none",
            ecolor=series.color,
            elinewidth=0.8,
            capsize=2,
            alpha=0.7,
            gid=f"ci:{series.label}",
        )


def _draw(ax: Any, series: Series, rows: pd.DataFrame, y: str, slo: SloMarks) -> int:
    """One configuration's points, intervals, front and load labels (and what ``slo`` marks on
    them); the points drawn."""
    xs, ys = floats(rows[f"{X}_mean"]), floats(rows[f"{y}_mean"])
    known = ~(numpy.isnan(xs) | numpy.isnan(ys))
    rows, xs, ys = rows[known], xs[known], ys[known]
    if not len(rows):
        return 0
    _errorbars(ax, rows, y, series)
    noisy = flags(rows[f"{X}_noisy"]) | flags(rows[f"{y}_noisy"])
    draw_points(ax, xs, ys, noisy, series)
    if slo:
        draw_missed(ax, rows, xs, ys, slo, series.label)
        draw_answer(ax, rows, xs, ys, slo, series.label, series.color)
    front = pareto_front(list(zip(xs.tolist(), ys.tolist(), strict=True)))
    ax.plot(
        xs[front],
        ys[front],
        color=series.color,
        linestyle=series.linestyle,
        linewidth=1.6,
        gid=f"front:{series.label}",
    )
    for kind, value, xv, yv in zip(rows["load_kind"], rows["load_value"], xs, ys, strict=True):
        ax.annotate(
            point_label(kind, value),
            (xv, yv),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=7,
            color=series.color,
        )
    return len(rows)


def pareto_figure(
    agg: pd.DataFrame,
    *,
    y: str = "output_tok_s_per_gpu",
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    slo: SloMarks | None = None,
) -> Figure:
    """The figure (the caller closes it) of an aggregate (``stats.aggregate``) holding
    ``interactivity`` and ``y``; ``labels`` names the results folders of a compare; ``slo``:
    the targets and search answers to draw."""
    require(agg, (X, y))
    slo = slo or SloMarks()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 6.8), layout="constrained")
    series = series_of(agg, colors=colors, labels=labels)
    elsewhere = draw_targets(ax, slo, agg, y) if slo else []
    drawn = [s for s, rows in series if _draw(ax, s, rows, y, slo)]
    name, unit = metric_name(y)
    ax.set_xlabel("Interactivity (tok/s/user = 1000 / median TPOT)")
    ax.set_ylabel(f"{name} ({unit})")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    noisy = any(c.startswith("noisy:") for c in _gids(ax))
    crossed = any(c.startswith("missed:") for c in _gids(ax))
    extra = [(noisy_text(agg), hollow_handle())] if noisy else []
    extra += legend_entries(slo, elsewhere, crossed) if slo else []
    legend(fig, drawn, extra=extra)
    counts = pd.concat([agg[f"{X}_n"], agg[f"{y}_n"]]) if len(agg) else []
    what = f"{name} vs interactivity, Pareto front per configuration"
    fig.suptitle(title(what, setup_line(agg), statistic(counts) + unmeasured(series, drawn)))
    return fig


def _gids(ax: Any) -> list[str]:
    return [str(c.get_gid()) for c in ax.collections]


def pareto_plot(
    agg: pd.DataFrame,
    *,
    y: str = "output_tok_s_per_gpu",
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    slo: SloMarks | None = None,
) -> bytes:
    """PNG bytes of ``pareto_figure``."""
    return to_png(pareto_figure(agg, y=y, colors=colors, labels=labels, slo=slo))


def write_pareto(path: Path, results_dir: Path, results: Sequence[RunResult]) -> Path | None:
    """A sweep's Pareto fronts (output throughput per GPU vs interactivity), as ``orch report``
    draws them; None when no measurement has the figures for it. ``orch run`` writes it for a
    sweep, where a bar per measurement says nothing."""
    measured = [r for r in results if r.requests is not None and r.error is None]
    if not measured:
        return None
    frame = frame_of((str(results_dir), r) for r in results)
    agg = aggregate(frame, ["output_tok_s_per_gpu", "interactivity"])
    png = pareto_plot(agg, colors=figure_colors(frame))
    return write_bytes(path, png)
