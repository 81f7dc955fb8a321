"""The SLO on a Pareto plot (throughput per GPU vs interactivity): the targets the axes can show
as lines with the side that misses them shaded, the points that missed a target crossed out,
and each SLO search's answer starred.

Only a target the axes measure exactly is drawn as a line: ``tpot_ms_median <= b`` is
interactivity >= 1000 / b (x = 1000 / median TPOT); ``output_tok_s >= b`` is output throughput
per GPU >= b / GPUs, drawn when every configuration on the plot has the same GPU count. Any other
target (a TTFT, a p99 ...) is not a place on these axes: the plot names it instead, and the
crosses show where any target was missed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from orchestrator.config.slo import SloTarget, parse_target

MISS_SHADE = "#cf222e"


@dataclass(frozen=True)
class SloMarks:
    """What to draw: the targets (as written), each run's search answer by (results_dir, key),
    and the points that missed a target, (results_dir, key, load_value)."""

    targets: tuple[str, ...] = ()
    answers: Mapping[tuple[str, str], float] = field(default_factory=dict)
    missed: frozenset[tuple[str, str, float]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.targets or self.answers)


def _parsed(targets: tuple[str, ...]) -> list[SloTarget]:
    out = []
    for text in targets:
        try:
            out.append(parse_target(text))
        except ValueError:
            continue  # a target this version does not know: named, not drawn
    return out


def axis_bound(target: SloTarget, y: str, agg: pd.DataFrame) -> tuple[str, float] | None:
    """("x" or "y", the bound on that axis) for a target the plot's axes measure, else None."""
    if target.metric == "tpot_ms_median":
        return "x", 1000.0 / target.bound
    if target.metric == "output_tok_s" and y == "output_tok_s_per_gpu":
        gpus = set(agg["gpu_count"].dropna().tolist()) if "gpu_count" in agg else set()
        if len(gpus) == 1:
            return "y", target.bound / float(gpus.pop())
    return None


def draw_targets(ax: Any, marks: SloMarks, agg: pd.DataFrame, y: str) -> list[str]:
    """Lines and shading for the targets the axes show; returns the targets they do not."""
    elsewhere = [t for t in marks.targets if t not in {str(p) for p in _parsed(marks.targets)}]
    for target in _parsed(marks.targets):
        bound = axis_bound(target, y, agg)
        if bound is None:
            elsewhere.append(str(target))
            continue
        axis, at = bound
        name = f"slo:{target}"
        if axis == "x":
            ax.axvline(at, color=MISS_SHADE, linestyle="--", linewidth=1.2, gid=name)
            ax.axvspan(0, at, color=MISS_SHADE, alpha=0.06, linewidth=0, gid=f"miss:{target}")
        else:
            ax.axhline(at, color=MISS_SHADE, linestyle="--", linewidth=1.2, gid=name)
            ax.axhspan(0, at, color=MISS_SHADE, alpha=0.06, linewidth=0, gid=f"miss:{target}")
        ax.annotate(
            str(target),
            (at, 1.0) if axis == "x" else (1.0, at),
            xycoords=("data", "axes fraction") if axis == "x" else ("axes fraction", "data"),
            xytext=(3, -10) if axis == "x" else (-3, 3),
            textcoords="offset points",
            ha="left" if axis == "x" else "right",
            fontsize=7,
            color=MISS_SHADE,
        )
    return elsewhere


def draw_missed(ax: Any, rows: pd.DataFrame, xs: Any, ys: Any, marks: SloMarks, label: str) -> None:
    """A cross over each point of ``rows`` (already filtered to known xs, ys) that missed."""
    keys = zip(rows["results_dir"], rows["key"], rows["load_value"], strict=True)
    hit = [(k[0], k[1], float(k[2])) in marks.missed for k in keys]
    if any(hit):
        ax.scatter(
            xs[hit], ys[hit], marker="x", color=MISS_SHADE, s=22, zorder=4, gid=f"missed:{label}"
        )


def draw_answer(
    ax: Any, rows: pd.DataFrame, xs: Any, ys: Any, marks: SloMarks, label: str, color: str
) -> None:
    """A star on the point a run's SLO search found, labelled with it."""
    for i, (where, key, value) in enumerate(
        zip(rows["results_dir"], rows["key"], rows["load_value"], strict=True)
    ):
        best = marks.answers.get((where, key))
        if best is None or float(value) != best:
            continue
        ax.scatter(
            [xs[i]],
            [ys[i]],
            marker="*",
            s=220,
            facecolors=color,
            edgecolors="black",
            linewidths=0.8,
            zorder=5,
            gid=f"slo-answer:{label}",
        )
        kind = rows["load_kind"].iloc[i]
        text = f"c={best:g}" if kind == "concurrency" else f"rate={best:g}"
        ax.annotate(
            f"SLO answer {text}",
            (xs[i], ys[i]),
            xytext=(-9, -15),
            textcoords="offset points",
            ha="right",
            fontsize=8,
            fontweight="bold",
            color=color,
        )


def legend_entries(marks: SloMarks, elsewhere: list[str], crossed: bool) -> list[tuple[str, Any]]:
    """(label, handle) for the legend: the lines, the crosses, the star, the targets not drawn."""
    from matplotlib.lines import Line2D

    out: list[tuple[str, Any]] = []
    drawn = [t for t in marks.targets if t not in elsewhere]
    if drawn:
        handle = Line2D([], [], color=MISS_SHADE, linestyle="--")
        out.append((f"SLO {', '.join(drawn)} (shaded: misses it)", handle))
    if crossed:
        line = "missed an SLO target" + (f" (incl. {', '.join(elsewhere)})" if elsewhere else "")
        out.append((line, Line2D([], [], color=MISS_SHADE, marker="x", linestyle="none")))
    elif elsewhere:
        out.append((f"SLO {', '.join(elsewhere)}: not on these axes", Line2D([], [])))
    if marks.answers:
        star = Line2D(
            [], [], marker="*", color="grey", markeredgecolor="black", markersize=11, ls="none"
        )
        out.append(("SLO search answer: highest load meeting every target", star))
    return out
