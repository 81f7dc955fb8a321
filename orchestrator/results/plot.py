"""`comparison.png`: side-by-side bars per run, readable at a glance.

Three panels share the run order: output throughput (tok/s over the measured window), per-request
decode speed (median with the p10-p90 range: the single-stream tok/s people quote), and
acceptance length, labelled with the most a step can give (draft tokens + 1) and the acceptance
rate, because 2.96 with 3 draft tokens and 5.66 with 15 are not on one scale. Each configuration
(engine and speculative method) has its own colour, so vLLM with and without a drafter never look
alike. The subtitle says what load was measured. A collapsed speculative run is drawn hatched in
red and labelled, so it cannot be missed; a failed run gets an empty slot that says so.

What to draw is decided by pure functions of the runs' results (``bar_specs``, ``legend_entries``,
``workload_line`` ...) so it can be tested without looking at pixels; ``comparison_figure`` only
hands those to matplotlib.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.methods import display_name
from orchestrator.engines import get_engine
from orchestrator.errors import SpecError
from orchestrator.results.model import RunResult, WorkloadSettings
from orchestrator.results.store import write_bytes

# One colour per configuration, in order of appearance; red is kept for collapse.
PALETTE = ("#3b6fb6", "#e08a1e", "#2e9e5b", "#8e5bb5", "#17a2b8", "#8c6d31", "#d45fa0", "#5c6b73")
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


def engine_display_name(engine: str) -> str:
    """The registry's name for people ("vLLM"); a result of an engine this orch does not know
    (written by another version) keeps the name it was written with."""
    try:
        return get_engine(engine).display_name
    except SpecError:
        return engine


def method_label(engine: str, method: str) -> str:
    """ "vLLM DFlash", "SGLang MTP", "vLLM (no speculation)": the legend's words for a colour."""
    name = engine_display_name(engine)
    if method == "none":
        return f"{name} (no speculation)"
    return f"{name} {display_name(method)}"


def configuration_label(result: RunResult) -> str:
    return method_label(result.settings.engine, result.settings.speculative.method)


def palette(configurations: Iterable[str]) -> dict[str, str]:
    """Configuration ("vllm dflash") -> colour, in order of first appearance (the palette
    repeats past eight): the one mapping every figure of a report or a compare uses."""
    configs = dict.fromkeys(configurations)
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(configs)}


def configuration_colors(results: Sequence[RunResult]) -> dict[str, str]:
    """Configuration -> colour, in order of first appearance (the palette repeats past eight)."""
    return palette(r.settings.configuration for r in results)


def run_label(name: str, host: str) -> str:
    if len(name) > LONG_RUN_NAME and "[" in name:
        name = name.replace("[", "\n[", 1)
    return f"{name}\n{host}"


def bar_color(result: RunResult, colors: dict[str, str]) -> str:
    if result.collapse is not None:
        return COLLAPSE_COLOR
    return colors[result.settings.configuration]


def bar_specs(
    results: Sequence[RunResult],
    values: Sequence[float | None],
    *,
    fmt: Callable[[RunResult, float], str] = lambda _r, v: f"{v:.1f}",
    errors: Sequence[tuple[float, float]] | None = None,
) -> list[BarSpec]:
    """The bars of one panel: one per result, with the panel's values."""
    colors = configuration_colors(results)
    specs = []
    for i, (result, value) in enumerate(zip(results, values, strict=True)):
        low, high = errors[i] if errors else (0.0, 0.0)
        collapsed = result.collapse is not None
        if result.error is not None:
            text, text_color, value = "failed", COLLAPSE_COLOR, None
        elif value is None:
            text, text_color = "n/a", "black"
        elif collapsed:
            text, text_color = fmt(result, value) + "\ncollapse", COLLAPSE_COLOR
        else:
            text, text_color = fmt(result, value), "black"
        specs.append(
            BarSpec(
                label=run_label(result.run.name, result.run.host),
                value=value,
                height=value if value is not None else 0.0,
                color=bar_color(result, colors),
                hatch=COLLAPSE_HATCH if collapsed else None,
                text=text,
                text_color=text_color,
                err_low=low if value is not None else 0.0,
                err_high=high if value is not None else 0.0,
            )
        )
    return specs


def acceptance_text(result: RunResult, length: float) -> str:
    """ "2.96 of max 4" over "65% accepted": the length against the most a step can give
    (draft tokens + 1), and the share of drafted tokens accepted, (length - 1) / draft tokens."""
    k = result.settings.speculative.num_draft_tokens
    if not k:
        return f"{length:.2f}"
    rate = 100.0 * (length - 1.0) / k
    return f"{length:.2f} of max {k + 1}\n{rate:.{0 if abs(rate) >= 10 else 1}f}% accepted"


def legend_entries(results: Sequence[RunResult]) -> list[tuple[str, str, str | None]]:
    """(label, color, hatch) for the configurations drawn, in order of appearance, then the
    collapse marker if a run collapsed: a legend never names what the plot does not show (a
    collapsed bar is red whatever its configuration, a failed run has no bar)."""
    colors = configuration_colors(results)
    drawn = [r for r in results if r.collapse is None and r.error is None]
    entries: list[tuple[str, str, str | None]] = []
    for config in dict.fromkeys(r.settings.configuration for r in drawn):
        first = next(r for r in drawn if r.settings.configuration == config)
        entries.append((configuration_label(first), colors[config], None))
    if any(r.collapse is not None for r in results):
        entries.append((COLLAPSE_LABEL, COLLAPSE_COLOR, COLLAPSE_HATCH))
    return entries


def _span(values: Sequence[float | int]) -> str:
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _load(w: WorkloadSettings) -> str:
    if w.request_rate is None:
        return f"concurrency {w.concurrency}"
    cap = f", at most {w.concurrency} in flight" if w.concurrency else ""
    return f"{w.request_rate:g} req/s{cap}"


def workload_line(results: Sequence[RunResult]) -> str:
    """What was measured, in one line: prompts, how many, the load, output length; a setting
    that differs between runs shows its range or its values."""
    loads = [r.settings.workload for r in results if r.settings.workload is not None]
    if not loads:
        return "workload: not recorded (results written before orch recorded it)"
    parts = [" / ".join(dict.fromkeys(w.prompts for w in loads))]
    timed = [w.duration_s for w in loads if w.duration_s is not None]
    counted = [w.num_prompts for w in loads if w.duration_s is None]
    if counted:
        parts.append(f"{_span(counted)} prompts")
    if timed:
        parts.append(f"{_span(timed)} s")
    parts.append(" / ".join(dict.fromkeys(_load(w) for w in loads)))
    parts.append(f"max_tokens {_span([w.max_tokens for w in loads])}")
    if all(w.ignore_eos for w in loads):
        parts[-1] += " (ignore_eos)"
    return "workload: " + ", ".join(parts)


def tick_style(n: int) -> TickStyle:
    """Few runs: slanted labels; from 5 on, vertical ones in a smaller font so that neighbours
    never overlap (the figure also widens with the run count)."""
    if n <= 4:
        return TickStyle(rotation=20, fontsize=8, ha="right")
    return TickStyle(rotation=90, fontsize=7, ha="center")


def figure_width(n: int) -> float:
    """Inches: three panels of ``n`` bars, about 0.55 in per bar, within 11..36 in."""
    return min(36.0, max(11.0, 3 * (0.8 + 0.55 * n)))


def panel_specs(results: Sequence[RunResult]) -> list[tuple[str, list[BarSpec]]]:
    """(title, bars) of the three panels."""
    decode = [r.requests.decode_tok_s if r.requests else None for r in results]
    med = [d.median if d else None for d in decode]
    errors = []
    for m, d in zip(med, decode, strict=True):
        m0 = m or 0.0
        lo = d.p10 if d is not None and d.p10 is not None else m0
        hi = d.p90 if d is not None and d.p90 is not None else m0
        errors.append((max(0.0, m0 - lo), max(0.0, hi - m0)))
    return [
        (
            "Output throughput (tok/s)\nall requests, measured window",
            bar_specs(
                results, [r.requests.output_throughput if r.requests else None for r in results]
            ),
        ),
        (
            "Per-request decode speed (tok/s)\nmedian, p10-p90",
            bar_specs(results, med, errors=errors),
        ),
        (
            "Acceptance length (tokens per step)\nvs. its max: draft tokens + 1",
            bar_specs(
                results,
                [r.acceptance.length if r.acceptance else None for r in results],
                fmt=acceptance_text,
            ),
        ),
    ]


def _draw_panel(ax: Any, title: str, specs: Sequence[BarSpec], ticks: TickStyle) -> None:
    xs = list(range(len(specs)))
    has_err = any(s.err_low or s.err_high for s in specs)
    yerr = [[s.err_low for s in specs], [s.err_high for s in specs]] if has_err else None
    bars = ax.bar(
        xs,
        [s.height for s in specs],
        color=[s.color for s in specs],
        yerr=yerr,
        capsize=4 if has_err else 0,
        edgecolor="black",
        linewidth=0.6,
    )
    for bar, spec in zip(bars, specs, strict=True):
        if spec.hatch:
            bar.set_hatch(spec.hatch)
        ax.annotate(
            spec.text,
            (bar.get_x() + bar.get_width() / 2, spec.height + spec.err_high),
            ha="center",
            va="bottom",
            fontsize=8 if len(specs) > 4 else 9,
            color=spec.text_color,
            xytext=(0, 3),
            textcoords="offset points",
        )
    ax.set_title(title, fontsize=11)
    ax.set_xticks(xs)
    ax.set_xticklabels(
        [s.label for s in specs],
        fontsize=ticks.fontsize,
        rotation=ticks.rotation,
        ha=ticks.ha,
        rotation_mode="anchor" if ticks.rotation < 90 else "default",
    )
    ax.margins(y=0.2)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def comparison_figure(results: Sequence[RunResult], *, title: str) -> Any:
    """The matplotlib Figure. Built without pyplot: importing pyplot costs every run half a
    second, and a Figure of its own needs no closing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    ticks = tick_style(len(results))
    fig = Figure(figsize=(figure_width(len(results)), 6.0), layout="constrained")
    FigureCanvasAgg(fig)  # draws to PNG, and measures text for the tests
    axes = fig.subplots(1, 3)
    for ax, (panel_title, specs) in zip(axes, panel_specs(results), strict=True):
        _draw_panel(ax, panel_title, specs, ticks)
    axes[2].axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    entries = legend_entries(results)
    handles = [
        Rectangle((0, 0), 1, 1, facecolor=color, hatch=hatch, edgecolor="black", linewidth=0.6)
        for _, color, hatch in entries
    ]
    if entries:
        fig.legend(
            handles,
            [label for label, _, _ in entries],
            loc="outside lower center",
            ncols=len(entries),
            fontsize=9,
            frameon=False,
        )
    fig.suptitle(
        f"{title}\n{workload_line(results)}; client-side, warm-up excluded",
        fontsize=11,
        x=0.01,
        ha="left",
    )
    return fig


def render_comparison(results: Sequence[RunResult], *, title: str) -> bytes:
    buf = io.BytesIO()
    comparison_figure(results, title=title).savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def write_comparison(path: Path, results: Sequence[RunResult], *, title: str) -> Path:
    return write_bytes(path, render_comparison(results, title=title))
