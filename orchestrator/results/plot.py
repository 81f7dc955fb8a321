"""`comparison.png`: side-by-side bars per run, readable at a glance.

Three panels share the run order: output throughput (tok/s, all requests), per-request decode
speed (median with the p10-p90 range: the single-stream tok/s people quote), and acceptance
length. A collapsed speculative run is drawn hatched in red and labelled, so it cannot be missed.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.results.report import summary_row
from orchestrator.results.store import write_bytes

ENGINE_COLORS = {"vllm": "#3b6fb6", "sglang": "#e08a1e"}
COLLAPSE_COLOR = "#c0392b"


def _label(row: dict[str, Any]) -> str:
    return f"{row['run']}\n{row['host']}"


def _bar_panel(ax, rows, values, title, *, yerr=None, fmt="{:.1f}") -> None:
    """One panel of bars; the value is written above the bar (above its error bar if any)."""
    xs = range(len(rows))
    colors = [COLLAPSE_COLOR if r["collapse"] else ENGINE_COLORS.get(r["engine"], "#777") for r in rows]
    heights = [v if v is not None else 0.0 for v in values]
    bars = ax.bar(xs, heights, color=colors, yerr=yerr, capsize=4 if yerr else 0, edgecolor="black", linewidth=0.6)
    tops = [h + (yerr[1][i] if yerr else 0.0) for i, h in enumerate(heights)]
    for bar, row, v, top in zip(bars, rows, values, tops, strict=True):
        if row["collapse"]:
            bar.set_hatch("//")
        text = "n/a" if v is None else fmt.format(v)
        if row["error"]:
            text = "failed"
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, top),
                    ha="center", va="bottom", fontsize=9, xytext=(0, 3), textcoords="offset points")
    ax.set_title(title, fontsize=11)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([_label(r) for r in rows], fontsize=8, rotation=20, ha="right")
    ax.margins(y=0.12)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _pyplot():
    """matplotlib takes a second to import: only the commands that draw pay for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render_comparison(summaries: Sequence[dict[str, Any]], *, title: str) -> bytes:
    plt = _pyplot()
    rows = [summary_row(s) for s in summaries]
    width = max(10.0, 1.6 * len(rows) * 3 / 2)
    fig, axes = plt.subplots(1, 3, figsize=(width, 5.2), constrained_layout=True)
    _bar_panel(axes[0], rows, [r["output_tok_s"] for r in rows], "Output throughput (tok/s)")
    med = [r["decode_tok_s_median"] for r in rows]
    lo = [max(0.0, (m or 0) - (r["decode_tok_s_p10"] or m or 0)) for m, r in zip(med, rows, strict=True)]
    hi = [max(0.0, (r["decode_tok_s_p90"] or m or 0) - (m or 0)) for m, r in zip(med, rows, strict=True)]
    _bar_panel(axes[1], rows, med, "Per-request decode speed (tok/s)\nmedian, p10-p90", yerr=[lo, hi])
    _bar_panel(axes[2], rows, [r["acceptance_length"] for r in rows], "Acceptance length\n(tokens per step)", fmt="{:.2f}")
    axes[2].axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ENGINE_COLORS.values()]
    labels = list(ENGINE_COLORS)
    if any(r["collapse"] for r in rows):
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=COLLAPSE_COLOR, hatch="//"))
        labels.append("acceptance collapse")
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=13, x=0.01, ha="left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_comparison(path: Path, summaries: Sequence[dict[str, Any]], *, title: str) -> Path:
    return write_bytes(path, render_comparison(summaries, title=title))
