"""What every sweep figure shares, so that they read as one set.

- One colour per configuration (engine + method, the frame's ``config``: "vllm dflash"), from
  ``plot.palette``, the mapping the bar chart uses: give every figure of a report the same
  ``colors`` (``figure_colors(frame)``) and a configuration looks the same everywhere.
- One line style per results folder (a compare overlays several), and a marker per run of the
  configuration, so two lines of one colour are told apart; the legend says
  "<configuration> · <folder>".
- Titles say what was measured, on what (model, GPUs) and with which statistic.
- Hollow markers: a noisy figure (95% interval wider than the run's ``noisy_ci`` of its mean).
- PNG bytes are deterministic: the Agg backend, a fixed dpi, no metadata (no version, no date).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy
import pandas as pd

from orchestrator.metrics import catalogue
from orchestrator.results.model import LoadPoint
from orchestrator.results.plot import method_label, palette

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110
LineStyle = Literal["-", "--", ":", "-."]
LINESTYLES: tuple[LineStyle, ...] = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
SEPARATOR = " · "
CI = "95% CI"  # stats.aggregate's default confidence
MAX_TITLE_LINE = 100
LEGEND_CHARS_PER_IN = 15  # characters of an 8-point legend entry per inch of figure

# (words, unit) of every catalogued metric: a plot's axis
METRICS: dict[str, tuple[str, str]] = {m.name: (m.title, m.unit) for m in catalogue.CATALOGUE}


@dataclass(frozen=True)
class Series:
    """One line of a figure: a run (a server configuration on a host) of one results folder,
    or one key of a caller's mapping (``keyed_series``)."""

    results_dir: str
    key: str
    config: str
    label: str
    color: str
    linestyle: LineStyle
    marker: str


def pyplot() -> Any:
    """matplotlib takes a second to import: only what draws pays for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes (then closed): same figure, same bytes."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    finally:
        pyplot().close(fig)
    return buf.getvalue()


def number(value: object) -> float | None:
    """A float, None for None / NaN / pandas' NA / text."""
    if value is None or value is pd.NA or isinstance(value, str):
        return None
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def floats(values: Iterable[object]) -> numpy.ndarray:
    """A float array, NaN where a value is unknown."""
    return numpy.array([math.nan if (x := number(v)) is None else x for v in values], dtype=float)


def flags(values: Iterable[object]) -> numpy.ndarray:
    """A bool array: True only where a value is true (NA and None are False)."""
    return numpy.array([v is True or v is numpy.True_ for v in values], dtype=bool)


def metric_name(metric: str) -> tuple[str, str]:
    """(words, unit) of a frame column: ("p99 TTFT", "ms")."""
    return METRICS.get(metric, (metric, ""))


def point_label(kind: object, value: object) -> str:
    """ "c=8" / "rate=2.5", as tables and folder names show a load point."""
    x = number(value)
    if kind not in ("concurrency", "request_rate") or x is None:
        return "?"
    return LoadPoint(kind=kind, value=x).label


def config_label(config: str) -> str:
    """The legend's words for a frame's ``config`` ("vllm dflash" -> "vLLM DFlash")."""
    engine, _, method = config.partition(" ")
    return method_label(engine, method or "none")


def is_speculative(config: str) -> bool:
    """``config`` is the engine alone without speculation ("vllm"), "engine method" with."""
    return bool(config.partition(" ")[2])


def figure_colors(frame: pd.DataFrame, colors: Mapping[str, str] | None = None) -> dict[str, str]:
    """Configuration -> colour for a frame's ``config`` column (order of first appearance);
    ``colors`` given wins for the configurations it names."""
    own = palette(str(c) for c in frame["config"].dropna())
    return own | {c: colors[c] for c in own if colors and c in colors}


def folder_labels(dirs: Iterable[str], labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """results_dir -> its legend name: ``labels`` if given, else the folder's name (its path
    when two folders share a name)."""
    unique = list(dict.fromkeys(dirs))
    given = labels or {}
    names = {d: given.get(d, Path(d).name or d) for d in unique}
    if len(set(names.values())) < len(names):
        names = {d: given.get(d, d) for d in unique}
    return names


def _style(folder: int, twin: int) -> tuple[LineStyle, str]:
    """(line style, marker): line style by folder, marker by run of the configuration."""
    return LINESTYLES[folder % len(LINESTYLES)], MARKERS[twin % len(MARKERS)]


def series_of(
    frame: pd.DataFrame,
    *,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[tuple[Series, pd.DataFrame]]:
    """The figure's lines, a run (``key``) of a results folder each, with its rows: grouped by
    configuration (first appearance), then folder. A label names the run when its
    configuration has several in one folder, and the folder when there are several."""
    runs = frame[["results_dir", "key", "config"]].drop_duplicates(["results_dir", "key"])
    palette_ = figure_colors(frame, colors)
    folders = folder_labels(runs["results_dir"], labels)
    folder_index = {d: i for i, d in enumerate(folders)}
    out = []
    for config in dict.fromkeys(runs["config"]):
        mine = runs[runs["config"] == config]
        for twin, (where, key) in enumerate(zip(mine["results_dir"], mine["key"], strict=True)):
            parts = [config_label(config)]
            if (mine["results_dir"] == where).sum() > 1:
                parts.append(str(key))
            if len(folders) > 1:
                parts.append(folders[where])
            linestyle, marker = _style(folder_index[where], twin)
            rows = frame[(frame["results_dir"] == where) & (frame["key"] == key)]
            label = SEPARATOR.join(parts)
            out.append(
                (Series(where, key, config, label, palette_[config], linestyle, marker), rows)
            )
    return out


def keyed_series(keys: Sequence[str], colors: Mapping[str, str] | None = None) -> list[Series]:
    """Series for a caller's mapping keyed "<config>" or "<config> · <folder label>": colour by
    the configuration, line style by the folder label."""
    split = [(k.split(SEPARATOR, 1) + [""])[:2] for k in keys]
    palette_ = palette(config for config, _ in split)
    palette_ |= {c: colors[c] for c in palette_ if colors and c in colors}
    folders = {f: i for i, f in enumerate(dict.fromkeys(f for _, f in split))}
    out = []
    for key, (config, folder) in zip(keys, split, strict=True):
        linestyle, marker = _style(folders[folder], 0)
        label = config_label(config) + (SEPARATOR + folder if folder else "")
        out.append(Series("", key, config, label, palette_[config], linestyle, marker))
    return out


def _hardware(count: object, name: object) -> str:
    n = number(count)
    gpu = name.removeprefix("NVIDIA ").strip() if isinstance(name, str) else None
    if gpu is None:
        return f"{n:g} GPU{'s' if n != 1 else ''}" if n else "GPUs not recorded"
    return f"{n:g} × {gpu}" if n else gpu


def setup_line(frame: pd.DataFrame) -> str:
    """ "Qwen3.6-27B, 2 × RTX A6000": the models and hardware a frame measured."""
    models = dict.fromkeys(str(m).rsplit("/", 1)[-1] for m in frame["model"].dropna())
    pairs = zip(frame["gpu_count"], frame["gpu_name"], strict=True)
    hardware = dict.fromkeys(_hardware(count, name) for count, name in pairs)
    return f"{' / '.join(models) or 'model not recorded'}, {' / '.join(hardware) or 'no GPUs'}"


def statistic(counts: Iterable[object], *, ci: str = CI) -> str:
    """How many repeats each drawn figure is the mean of ("mean of 2 repeats, 95% CI"), from
    the aggregate's ``<metric>_n`` (failed repeats are not counted)."""
    ns = sorted({int(n) for n in map(number, counts) if n})
    if not ns or ns[-1] <= 1:
        return "one measurement per point"
    span = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    return f"mean of {span} repeats, {ci}"


def title(*parts: str) -> str:
    """Parts joined by " — ", the last on a line of its own when one line would be too long."""
    kept = [p for p in parts if p]
    line = " — ".join(kept)
    if len(line) <= MAX_TITLE_LINE or len(kept) < 2:
        return line
    return " — ".join(kept[:-1]) + "\n" + kept[-1]


def noisy_text(frame: pd.DataFrame) -> str:
    """The legend's words for a hollow marker, with the frame's noise threshold(s)."""
    shares = sorted({x for x in map(number, frame.get("noisy_ci", [])) if x is not None})
    limit = "/".join(f"{100 * s:g}%" for s in shares) or "10%"
    return f"hollow: noisy ({CI} wider than ±{limit} of the mean)"


def draw_points(
    ax: Any, xs: numpy.ndarray, ys: numpy.ndarray, noisy: numpy.ndarray, series: Series
) -> None:
    """Markers: filled, or hollow for a noisy figure (gids "points:" / "noisy:" + label)."""
    quiet = ~noisy
    if quiet.any():
        ax.scatter(
            xs[quiet],
            ys[quiet],
            color=series.color,
            marker=series.marker,
            s=30,
            zorder=3,
            gid=f"points:{series.label}",
        )
    if noisy.any():
        ax.scatter(
            xs[noisy],
            ys[noisy],
            facecolors="none",
            edgecolors=series.color,
            linewidths=1.4,
            marker=series.marker,
            s=36,
            zorder=3,
            gid=f"noisy:{series.label}",
        )


def legend(fig: Figure, series: Sequence[Series], *, extra: Sequence[tuple[str, Any]] = ()) -> None:
    """One entry per series (colour, line style, marker), then ``extra`` (label, handle); past
    ``MAX_LEGEND_ENTRIES`` series, one per configuration and one per line style instead (a
    report over 50 folders had 100 entries, and drawing them took half its time)."""
    entries = legend_key(series) + list(extra)
    if entries:
        names = [name for name, _ in entries]
        fig.legend(
            [handle for _, handle in entries],
            names,
            loc="outside lower center",
            ncols=legend_columns(names, fig.get_figwidth()),
            fontsize=8,
            frameon=False,
        )


MAX_LEGEND_ENTRIES = 16
MAX_FOLDERS_NAMED = 3  # per line style, in a shortened legend


def legend_key(series: Sequence[Series]) -> list[tuple[str, Any]]:
    """(label, handle) per series, or the shortened key: colour = configuration, line style =
    the folders (or runs) drawn with it."""
    from matplotlib.lines import Line2D

    if len(series) <= MAX_LEGEND_ENTRIES:
        return [
            (s.label, Line2D([], [], color=s.color, linestyle=s.linestyle, marker=s.marker))
            for s in series
        ]
    colours = {s.config: s.color for s in reversed(series)}  # first appearance wins
    out: list[tuple[str, Any]] = [
        (config_label(c), Line2D([], [], color=colours[c]))
        for c in dict.fromkeys(s.config for s in series)
    ]
    styles: dict[LineStyle, list[str]] = {}
    for s in series:
        names = styles.setdefault(s.linestyle, [])
        name = s.label.rsplit(SEPARATOR, 1)[-1] if SEPARATOR in s.label else ""
        if name and name not in names:
            names.append(name)
    if len(styles) > 1:
        for style, names in styles.items():
            shown = ", ".join(names[:MAX_FOLDERS_NAMED])
            more = len(names) - MAX_FOLDERS_NAMED
            label = shown + (f" +{more} more" if more > 0 else "")
            out.append((label, Line2D([], [], color="grey", linestyle=style)))
    return out


def legend_columns(names: Sequence[str], width_in: float) -> int:
    """As many columns (at most 4) as the longest entry lets fit the figure's width."""
    fit = int(width_in * LEGEND_CHARS_PER_IN) // (max(map(len, names), default=1) + 6)
    return max(1, min(4, len(names), fit))


def hollow_handle() -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="none")


def note(ax: Any, text: str, *, ticks: bool = True) -> None:
    """A panel that has nothing to draw says why, in its middle (``ticks``: clear its ticks;
    not for an axis shared with others)."""
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        fontsize=9,
        wrap=True,
        transform=ax.transAxes,
        color="dimgrey",
        gid="note",
    )
    if ticks:
        ax.set_xticks([])
        ax.set_yticks([])


def load_axis(ax: Any, kinds: Sequence[str], values: Iterable[float]) -> None:
    """x: concurrency on a log2 axis ticked at the measured values, a request rate linear."""
    from matplotlib.ticker import NullLocator

    ticks = sorted({v for v in values if not math.isnan(v)})
    if list(kinds) == ["concurrency"]:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
        if ticks:
            ax.set_xticks(ticks, labels=[f"{v:g}" for v in ticks])
        ax.set_xlabel("Concurrency (requests in flight, log2 scale)")
    elif list(kinds) == ["request_rate"]:
        ax.set_xlabel("Request rate (req/s)")
    else:
        ax.set_xlabel("Load (concurrency or req/s)")
    ax.grid(alpha=0.3)


def kinds_of(frame: pd.DataFrame) -> list[str]:
    return [str(k) for k in dict.fromkeys(frame["load_kind"].dropna())]


def unmeasured(series: Sequence[tuple[Series, pd.DataFrame]], drawn: Sequence[Series]) -> str:
    """ "; no measured point: X" for the series a figure could not draw (failed, not run)."""
    missing = [s.label for s, _ in series if s not in drawn]
    return f"; no measured point: {', '.join(missing)}" if missing else ""
