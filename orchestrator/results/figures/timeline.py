"""Acceptance length and generation throughput over a server's life, from its log events.

A sweep measures its points in turn on one running server, so the server's ``events.jsonl``
(the engine's metrics lines, parsed by ``orchestrator.metrics.logparse``) is a time series:
warm-up shows at its start, drift (a cache filling, acceptance falling as the prompts change)
along it. Each line's figure is what the engine printed for its own interval: vLLM's
``SpecDecoding metrics`` / ``Engine NNN`` lines (every 10 s by default; an interval without
drafts says nothing about acceptance and is skipped), SGLang's ``Decode batch`` lines (every
``--decode-log-interval`` steps). x = seconds since the server's first event, from the log's
own clock (whole seconds; vLLM prints no year, a new year is recognised by time going back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.results.figures.style import (
    Series,
    is_speculative,
    keyed_series,
    legend,
    note,
    number,
    pyplot,
    title,
)
from orchestrator.results.figures.style import png as to_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Event = Mapping[str, object]
Span = tuple[float, float, str]  # (start s, end s, label) on the server's timeline
ACCEPTANCE = {"spec_decode": "mean_acceptance_length", "decode_batch": "accept_length"}
THROUGHPUT = {"engine_stats": "generation_throughput", "decode_batch": "gen_throughput"}
FULL = "%Y-%m-%d %H:%M:%S"  # SGLang; vLLM prints "%m-%d %H:%M:%S"
NO_YEAR = 2000  # a leap year, so that 02-29 parses


def _parse(text: object, previous: datetime | None) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, FULL)
    except ValueError:
        pass
    year = previous.year if previous else NO_YEAR
    for y in (year, year + 1):
        try:
            t = datetime.strptime(f"{y}-{text}", FULL)
        except ValueError:
            continue
        if previous is None or t >= previous - timedelta(days=1):
            return t
    return None


def log_clock(events: Sequence[Event], *, after: datetime | None = None) -> list[datetime | None]:
    """Each event's ``time`` as a datetime (None without one); ``after``: the clock reading
    that precedes them (gives a year-less log its year)."""
    out: list[datetime | None] = []
    for event in events:
        t = _parse(event.get("time"), after)
        out.append(t)
        after = t or after
    return out


def log_seconds(events: Sequence[Event], origin: datetime | None = None) -> list[float | None]:
    """Seconds since ``origin`` (default: the first event with a time) per event."""
    clock = log_clock(events, after=origin)
    start = origin or next((t for t in clock if t is not None), None)
    return [None if t is None or start is None else (t - start).total_seconds() for t in clock]


def metric_points(
    events: Sequence[Event], fields: Mapping[str, str]
) -> dict[str, tuple[list[float], list[float]]]:
    """Engine ("" or "engine N") -> (seconds, values) of the events that print the metric
    (``fields``: event kind -> its field), idle speculation intervals left out."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for t, event in zip(log_seconds(events), events, strict=True):
        field = fields.get(str(event.get("kind")))
        value = number(event.get(field)) if field else None
        if t is None or value is None or event.get("drafted_tokens") == 0:
            continue
        engine = event.get("engine_index", event.get("dp_rank"))
        xs, ys = out.setdefault("" if engine is None else f"engine {engine}", ([], []))
        xs.append(t)
        ys.append(value)
    return out


def measurement_spans(
    server_events: Sequence[Event], points: Mapping[str, Sequence[Event]]
) -> list[Span]:
    """Where each measurement lies on the server's timeline, as its log saw it: label -> the
    point's own events (its ``events.jsonl``, a subset of the server's by ``line_no``). A log
    line sums up the interval since the line before it, so a span starts at the server's last
    event before the point's first one and ends at the point's last event (at least a second
    wide: times are whole seconds). A point without events has no span."""
    origin = next((t for t in log_clock(server_events) if t is not None), None)
    if origin is None:
        return []
    known = zip(server_events, log_seconds(server_events, origin), strict=True)
    timeline = [(n, t) for e, t in known if t is not None and (n := number(e.get("line_no")))]
    spans = []
    for label, events in points.items():
        ts = [t for t in log_seconds(events, origin) if t is not None]
        lines = [n for e in events if (n := number(e.get("line_no"))) is not None]
        if not ts:
            continue
        before = [t for n, t in timeline if lines and n < min(lines)]
        start = max(before) if before else min(ts)
        spans.append((start, max(max(ts), start + 1.0), label))
    return spans


def shade(ax: Any, spans: Sequence[Span], *, labelled: bool) -> None:
    """Grey bands where the measurements lie (``labelled``: their labels written in)."""
    for i, (start, end, label) in enumerate(spans):
        ax.axvspan(start, end, color="grey", alpha=0.1 + 0.08 * (i % 2), lw=0, gid=f"span:{label}")
        if labelled:
            ax.text(start, 0.98, label, transform=ax.get_xaxis_transform(), rotation=90,
                    fontsize=6, va="top", ha="left", color="dimgrey")  # fmt: skip


def _panel(ax: Any, s: Series, events: Sequence[Event], what: str, spans: Sequence[Span]) -> None:
    fields, name, unit = {
        "acceptance": (ACCEPTANCE, "acceptance length", "tokens/step"),
        "throughput": (THROUGHPUT, "generation throughput", "tok/s"),
    }[what]
    groups = metric_points(events, fields)
    for i, (engine, (xs, ys)) in enumerate(groups.items()):
        suffix = f" · {engine}" if engine and len(groups) > 1 else ""
        ax.plot(xs, ys, color=s.color, linestyle=s.linestyle, marker=".", markersize=3,
                linewidth=1.0, alpha=1.0 if i == 0 else 0.6, gid=f"{what}:{s.label}{suffix}")  # fmt: skip
    if not groups:
        plain = what == "acceptance" and not is_speculative(s.config)
        note(
            ax,
            "no speculation: no acceptance length" if plain else f"no {name} logged",
            ticks=False,
        )
    ax.set_ylim(bottom=0)
    ax.set_title(f"{s.label}: {name} ({unit})", fontsize=9)
    ax.grid(alpha=0.3)
    shade(ax, spans, labelled=what == "acceptance")


Panel = Callable[[Any, Series, Sequence[Any], str, Sequence[Span]], None]


def rows_figure(
    data: Mapping[str, Sequence[Any]],
    panel: Panel,
    fields: tuple[str, str],
    *,
    spans: Mapping[str, Sequence[Span]] | None,
    colors: Mapping[str, str] | None,
    row_height: float,
    empty: str,
    xlabel: str,
    heading: str,
) -> Figure:
    """A row per server (``data``'s keys), ``panel`` drawing each of its two ``fields`` from
    its items, its ``spans`` shaded: the shape the timeline and the GPU series share."""
    plt = pyplot()
    series = keyed_series(list(data), colors)
    rows = max(1, len(series))
    fig, axes = plt.subplots(rows, 2, squeeze=False, sharex=True, layout="constrained",
                             figsize=(12.0, 1.2 + row_height * rows))  # fmt: skip
    for (left, right), s in zip(axes, series, strict=False):
        for ax, field in ((left, fields[0]), (right, fields[1])):
            panel(ax, s, data[s.key], field, (spans or {}).get(s.key, ()))
    if not series:
        note(axes[0][0], empty, ticks=False)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    legend(fig, series)
    fig.suptitle(heading)
    return fig


def timeline_figure(
    events: Mapping[str, Sequence[Event]],
    *,
    spans: Mapping[str, Sequence[Span]] | None = None,
    setup: str = "",
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """The figure (the caller closes it): a row per server, ``events`` keyed by configuration
    ("vllm dflash", or "<configuration> · <folder label>" in a compare) holding its
    ``events.jsonl`` objects; ``spans`` (same keys) shades its measurements
    (``measurement_spans``)."""
    stat = "each log line's own interval figure" + ("; shaded: measurements" if spans else "")
    return rows_figure(
        events,
        _panel,
        ("acceptance", "throughput"),
        spans=spans,
        colors=colors,
        row_height=2.6,
        empty="no log events",
        xlabel="seconds since the server's first log event",
        heading=title("Acceptance length and generation throughput over time", setup, stat),
    )


def timeline_plot(
    events: Mapping[str, Sequence[Event]],
    *,
    spans: Mapping[str, Sequence[Span]] | None = None,
    setup: str = "",
    colors: Mapping[str, str] | None = None,
) -> bytes:
    """PNG bytes of ``timeline_figure``."""
    return to_png(timeline_figure(events, spans=spans, setup=setup, colors=colors))
