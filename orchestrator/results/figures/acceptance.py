"""Speculative decoding against the load: acceptance length per load point, and the acceptance
rate at each draft position where the engine reports it (vLLM's per-position counters).

Plain decoding drafts nothing, so it has no acceptance length: its configurations are left out
and the title says so. Per-position curves are drawn for a configuration's lowest and highest
load only (filled and hollow markers), each the mean over the point's measured repeats, so the
panel stays readable and still shows whether acceptance moves with the load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from orchestrator.results.figures.by_load import draw_mean
from orchestrator.results.figures.style import (
    Series,
    config_label,
    figure_colors,
    flags,
    floats,
    hollow_handle,
    is_speculative,
    kinds_of,
    legend,
    load_axis,
    noisy_text,
    note,
    number,
    point_label,
    pyplot,
    series_of,
    setup_line,
    statistic,
    title,
)
from orchestrator.results.figures.style import png as to_png
from orchestrator.results.stats import aggregate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METRIC = "acceptance_length"


def mean_positions(lists: Sequence[Sequence[float | None]]) -> list[float]:
    """Per position, the mean of the lists' known rates there (lists may differ in length)."""
    out = []
    for i in range(max(map(len, lists), default=0)):
        known = [v for x in lists if i < len(x) and (v := number(x[i])) is not None]
        out.append(math.fsum(known) / len(known) if known else math.nan)
    return out


def per_position(rows: pd.DataFrame) -> dict[tuple[str, float], list[float]]:
    """(load kind, value) -> mean per-position acceptance over the point's measurements that
    reported it (failed and not-run ones left out), in load order."""
    measured = rows[~(flags(rows["not_run"]) | (rows["verdict"] == "failed"))]
    out: dict[tuple[str, float], list[float]] = {}
    for (kind, value), group in measured.groupby(["load_kind", "load_value"], sort=True):
        lists = [list(v) for v in group["acceptance_per_position"] if isinstance(v, list | tuple)]
        if lists:
            out[(str(kind), float(value))] = mean_positions(lists)
    return out


def _positions(ax: Any, series: Series, rows: pd.DataFrame) -> bool:
    """The lowest and highest load's curves (gid "position:"); False when none is reported."""
    curves = per_position(rows)
    ends = list(dict.fromkeys([min(curves), max(curves)])) if curves else []
    for i, point in enumerate(ends):
        rates = curves[point]
        ax.plot(
            range(1, len(rates) + 1),
            rates,
            color=series.color,
            linestyle=series.linestyle,
            marker=series.marker,
            markerfacecolor=series.color if i == 0 else "none",
            markersize=4,
            label=f"{series.label} · {point_label(*point)}",
            gid=f"position:{series.label} · {point_label(*point)}",
        )
    return bool(ends)


def _panels(
    fig: Figure, series: Sequence[tuple[Series, pd.DataFrame]], frame: pd.DataFrame
) -> list[Series]:
    left, right = fig.subplots(1, 2)
    drawn = [s for s, rows in series if draw_mean(left, s, rows, METRIC)]
    rows = pd.concat([r for _, r in series])
    load_axis(left, kinds_of(rows), floats(rows["load_value"]))
    left.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
    left.set_title("Acceptance length (tokens per step; 1 = no gain)", fontsize=10)
    left.set_ylabel("tokens/step")
    reported = False
    for s, _ in series:
        mine = frame[(frame["results_dir"] == s.results_dir) & (frame["key"] == s.key)]
        reported |= _positions(right, s, mine)
    if reported:
        right.set_title(
            "Per-position acceptance rate (filled: lowest load, hollow: highest)", fontsize=10
        )
        right.set_xlabel("Draft position")
        right.set_ylabel("accepted / drafted")
        right.set_ylim(0, 1.02)
        right.grid(alpha=0.3)
        right.legend(fontsize=7, frameon=False)
    else:
        note(right, "no configuration here reports per-position acceptance")
    return drawn


def acceptance_figure(
    agg: pd.DataFrame,
    frame: pd.DataFrame,
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """The figure (the caller closes it): ``agg`` (``stats.aggregate``; aggregated here from
    ``frame`` when it lacks ``acceptance_length``) and the per-measurement ``frame``, whose
    ``acceptance_per_position`` lists give the curves."""
    if f"{METRIC}_mean" not in agg.columns:
        agg = aggregate(frame, [METRIC])
    colors = figure_colors(agg, colors)  # every configuration's, before plain ones go
    series = [
        (s, rows)
        for s, rows in series_of(agg, colors=colors, labels=labels)
        if is_speculative(s.config)
    ]
    plain = [config_label(c) for c in dict.fromkeys(agg["config"]) if not is_speculative(c)]
    plt = pyplot()
    fig = plt.figure(figsize=(13.0, 6.0), layout="constrained")
    drawn = _panels(fig, series, frame) if series else []
    if not series:
        note(fig.subplots(), "no speculative configuration: plain decoding has no acceptance")
    noisy = any(str(c.get_gid()).startswith("noisy:") for a in fig.axes for c in a.collections)
    legend(fig, drawn, extra=[(noisy_text(agg), hollow_handle())] if noisy else ())
    sources = dict.fromkeys(x for x in frame.get("acceptance_source", []) if isinstance(x, str))
    stat = statistic(agg[f"{METRIC}_n"] if len(agg) else [])
    stat += f"; source: {', '.join(sources)}" if sources else ""
    stat += f"; not shown (no speculation): {', '.join(plain)}" if plain else ""
    fig.suptitle(title("Acceptance length vs load, per-position acceptance", setup_line(agg), stat))
    return fig


def acceptance_plot(
    agg: pd.DataFrame,
    frame: pd.DataFrame,
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> bytes:
    """PNG bytes of ``acceptance_figure``."""
    return to_png(acceptance_figure(agg, frame, colors=colors, labels=labels))
