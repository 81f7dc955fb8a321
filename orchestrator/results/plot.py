"""`comparison.png`: side-by-side bars per run, readable at a glance.

Three panels share the run order: output throughput (tok/s, all requests), per-request decode
speed (median with the p10-p90 range: the single-stream tok/s people quote), and acceptance
length. A collapsed speculative run is drawn hatched in red and labelled, so it cannot be missed;
a failed run gets an empty slot that says so.

What to draw is decided by pure functions (``bar_specs``, ``legend_entries``, ``tick_style``) so
it can be tested without looking at pixels; ``comparison_figure`` only hands those to matplotlib.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.results.report import summary_row
from orchestrator.results.store import write_bytes

ENGINE_COLORS = {"vllm": "#3b6fb6", "sglang": "#e08a1e"}
OTHER_COLOR = "#777777"
COLLAPSE_COLOR = "#c0392b"
COLLAPSE_HATCH = "//"
COLLAPSE_LABEL = "acceptance collapse"
LONG_RUN_NAME = 20  # longer names break before a matrix suffix ("name\n[concurrency=4]")


@dataclass(frozen=True)
class BarSpec:
    """One bar of one panel."""

    label: str  # tick label: run and host
    value: float | None  # None: unknown (or the run failed)
    height: float  # what is drawn (0 for an unknown value)
    color: str
    hatch: str | None
    text: str  # written above the bar
    text_color: str = "black"
    err_low: float = 0.0  # error bar below / above the top (decode speed's p10-p90)
    err_high: float = 0.0


@dataclass(frozen=True)
class TickStyle:
    rotation: float
    fontsize: float
    ha: str


def run_label(row: dict[str, Any]) -> str:
    run = str(row.get("run") or "?")
    if len(run) > LONG_RUN_NAME and "[" in run:
        run = run.replace("[", "\n[", 1)
    return f"{run}\n{row.get('host') or '?'}"


def bar_color(row: dict[str, Any]) -> str:
    if row["collapse"]:
        return COLLAPSE_COLOR
    return ENGINE_COLORS.get(str(row.get("engine")), OTHER_COLOR)


def bar_specs(rows: Sequence[dict[str, Any]], values: Sequence[float | None], *,
              fmt: str = "{:.1f}",
              errors: Sequence[tuple[float, float]] | None = None) -> list[BarSpec]:
    """The bars of one panel, from ``summary_row`` rows and the panel's values."""
    specs = []
    for i, (row, value) in enumerate(zip(rows, values, strict=True)):
        low, high = errors[i] if errors else (0.0, 0.0)
        if row["error"]:
            text, text_color, value = "failed", COLLAPSE_COLOR, None
        elif value is None:
            text, text_color = "n/a", "black"
        elif row["collapse"]:
            text, text_color = fmt.format(value) + "\ncollapse", COLLAPSE_COLOR
        else:
            text, text_color = fmt.format(value), "black"
        specs.append(BarSpec(
            label=run_label(row), value=value, height=value if value is not None else 0.0,
            color=bar_color(row), hatch=COLLAPSE_HATCH if row["collapse"] else None,
            text=text, text_color=text_color,
            err_low=low if value is not None else 0.0, err_high=high if value is not None else 0.0,
        ))
    return specs


def legend_entries(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(label, color, hatch) for the engines present, in order of appearance, then the collapse
    marker if a run collapsed: a legend never names what the plot does not show (a collapsed
    bar is red whatever its engine, a failed run has no bar)."""
    engines = dict.fromkeys(str(r.get("engine")) for r in rows if not (r["collapse"] or r["error"]))
    entries: list[tuple[str, str, str | None]] = [
        (e, ENGINE_COLORS.get(e, OTHER_COLOR), None) for e in engines
    ]
    if any(r["collapse"] for r in rows):
        entries.append((COLLAPSE_LABEL, COLLAPSE_COLOR, COLLAPSE_HATCH))
    return entries


def tick_style(n: int) -> TickStyle:
    """Few runs: slanted labels; from 5 on, vertical ones in a smaller font so that neighbours
    never overlap (the figure also widens with the run count)."""
    if n <= 4:
        return TickStyle(rotation=20, fontsize=8, ha="right")
    return TickStyle(rotation=90, fontsize=7, ha="center")


def figure_width(n: int) -> float:
    """Inches: three panels of ``n`` bars, about 0.55 in per bar, within 10..36 in."""
    return min(36.0, max(10.0, 3 * (0.8 + 0.55 * n)))


def panel_specs(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[BarSpec]]]:
    """(title, bars) of the three panels."""
    med = [r["decode_tok_s_median"] for r in rows]
    errors = []
    for m, r in zip(med, rows, strict=True):
        m0 = m or 0.0
        lo = r["decode_tok_s_p10"] if r["decode_tok_s_p10"] is not None else m0
        hi = r["decode_tok_s_p90"] if r["decode_tok_s_p90"] is not None else m0
        errors.append((max(0.0, m0 - lo), max(0.0, hi - m0)))
    return [
        ("Output throughput (tok/s)", bar_specs(rows, [r["output_tok_s"] for r in rows])),
        ("Per-request decode speed (tok/s)\nmedian, p10-p90", bar_specs(rows, med, errors=errors)),
        ("Acceptance length\n(tokens per step)",
         bar_specs(rows, [r["acceptance_length"] for r in rows], fmt="{:.2f}")),
    ]


def _draw_panel(ax: Any, title: str, specs: Sequence[BarSpec], ticks: TickStyle) -> None:
    xs = list(range(len(specs)))
    has_err = any(s.err_low or s.err_high for s in specs)
    yerr = [[s.err_low for s in specs], [s.err_high for s in specs]] if has_err else None
    bars = ax.bar(xs, [s.height for s in specs], color=[s.color for s in specs], yerr=yerr,
                  capsize=4 if has_err else 0, edgecolor="black", linewidth=0.6)
    for bar, spec in zip(bars, specs, strict=True):
        if spec.hatch:
            bar.set_hatch(spec.hatch)
        ax.annotate(spec.text, (bar.get_x() + bar.get_width() / 2, spec.height + spec.err_high),
                    ha="center", va="bottom", fontsize=8 if len(specs) > 4 else 9,
                    color=spec.text_color, xytext=(0, 3), textcoords="offset points")
    ax.set_title(title, fontsize=11)
    ax.set_xticks(xs)
    ax.set_xticklabels([s.label for s in specs], fontsize=ticks.fontsize, rotation=ticks.rotation,
                       ha=ticks.ha, rotation_mode="anchor" if ticks.rotation < 90 else "default")
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _pyplot() -> Any:
    """matplotlib takes a second to import: only the commands that draw pay for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def comparison_figure(summaries: Sequence[dict[str, Any]], *, title: str) -> Any:
    """The matplotlib Figure (the caller closes it)."""
    plt = _pyplot()
    rows = [summary_row(s) for s in summaries]
    ticks = tick_style(len(rows))
    fig, axes = plt.subplots(1, 3, figsize=(figure_width(len(rows)), 5.6), constrained_layout=True)
    for ax, (panel_title, specs) in zip(axes, panel_specs(rows), strict=True):
        _draw_panel(ax, panel_title, specs, ticks)
    axes[2].axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    entries = legend_entries(rows)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=color, hatch=hatch, edgecolor="black",
                             linewidth=0.6) for _, color, hatch in entries]
    if entries:
        fig.legend(handles, [label for label, _, _ in entries], loc="outside lower center",
                   ncols=len(entries), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=13, x=0.01, ha="left")
    return fig


def render_comparison(summaries: Sequence[dict[str, Any]], *, title: str) -> bytes:
    plt = _pyplot()
    fig = comparison_figure(summaries, title=title)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    return buf.getvalue()


def write_comparison(path: Path, summaries: Sequence[dict[str, Any]], *, title: str) -> Path:
    return write_bytes(path, render_comparison(summaries, title=title))
