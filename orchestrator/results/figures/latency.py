"""Latency distributions at one load point: empirical CDFs, one per configuration.

A percentile in a table hides the shape; the CDF shows whether a configuration is uniformly
faster or trades a better median for a longer tail. The samples come from a point's
``requests.jsonl`` (``request_latencies``), computed by the definitions of
``orchestrator.metrics.summary``, so the curve's median is the table's median.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy

from orchestrator.errors import OrchError
from orchestrator.loadgen.records import MAX_LINE, RequestRecord, record_problem
from orchestrator.metrics.summary import PER_CHUNK_COUNTS
from orchestrator.remote.wire import WireError
from orchestrator.results.figures.style import keyed_series, legend, pyplot, title
from orchestrator.results.figures.style import png as to_png

if TYPE_CHECKING:
    from matplotlib.figure import Figure

GUIDES = (0.5, 0.9, 0.99)
MAX_CDF_POINTS = 4000  # per line: far more than a figure's pixels
LOG_SPAN = 50.0  # values spread wider than this factor: log x axis


def read_records(path: Path, notes: list[str] | None = None) -> list[RequestRecord]:
    """A requests.jsonl's records. A line that is not a record, or one whose figures cannot be
    true (``record_problem``), is left out and named (file:line) in ``notes``: one hostile line
    must neither stop a report nor drive its memory. OrchError when the file cannot be read."""
    try:
        with path.open("rb") as f:
            return list(_records(path, f, notes if notes is not None else []))
    except OSError as exc:
        raise OrchError(f"{path}: cannot read: {exc.strerror}", hint=_HINT) from exc


def _lines(f: BinaryIO) -> Iterator[bytes | int]:
    """Each line, or the length of one past ``MAX_LINE``: read in bounded pieces, so a line
    with no end never sits in memory whole."""
    while True:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        if len(raw) <= MAX_LINE or raw.endswith(b"\n"):
            yield raw
            continue
        size = len(raw)
        while raw and not raw.endswith(b"\n"):  # the rest of the long line, dropped
            raw = f.readline(MAX_LINE + 1)
            size += len(raw)
        yield size


def _records(path: Path, f: BinaryIO, notes: list[str]) -> Iterator[RequestRecord]:
    for n, raw in enumerate(_lines(f), start=1):
        if isinstance(raw, int) or len(raw) > MAX_LINE:
            size = raw if isinstance(raw, int) else len(raw)
            notes.append(f"{path}:{n}: skipped: a line of {size} bytes")
            continue
        if not raw.strip():
            continue
        try:
            record = RequestRecord.from_json(json.loads(raw))
        except (ValueError, WireError) as exc:  # JSONDecodeError is a ValueError
            notes.append(f"{path}:{n}: skipped: not a request record: {str(exc)[:200]}")
            continue
        problem = record_problem(record)
        if problem is not None:
            notes.append(f"{path}:{n}: skipped: {problem}")
            continue
        yield record


_HINT = "requests.jsonl files are written by `orch run`, one request per line"


def request_latencies(
    records_path: Path | str, notes: list[str] | None = None
) -> dict[str, list[float]]:
    """The measured (warm-up left out), completed requests' latencies in ms, as
    ``metrics.summary.request_stats`` defines them: ``ttft_ms`` and ``e2el_ms`` per request,
    ``tpot_ms`` per request with more than one token, ``itl_ms`` per token (a chunk's gap
    split over its tokens, only where per-chunk token counts are known), with
    ``itl_weight`` the number of tokens each ``itl_ms`` value stands for (one value per
    chunk, never one per token). Lines left out are named in ``notes``."""
    done = [r for r in read_records(Path(records_path), notes) if not r.warmup and r.ok]
    out: dict[str, list[float]] = {
        "ttft_ms": [],
        "itl_ms": [],
        "itl_weight": [],
        "tpot_ms": [],
        "e2el_ms": [],
    }
    for r in done:
        if r.ttft is not None:
            out["ttft_ms"].append(r.ttft * 1000.0)
        if r.e2el is not None:
            out["e2el_ms"].append(r.e2el * 1000.0)
        n, span = r.output_tokens or 0, (r.e2el or 0.0) - (r.ttft or 0.0)
        if n > 1 and span > 0:
            out["tpot_ms"].append(span / (n - 1) * 1000.0)
        if r.token_count_method in PER_CHUNK_COUNTS:
            c = r.chunks
            for i in range(1, len(c)):
                gap, k = c[i].t - c[i - 1].t, c[i].tokens
                out["itl_ms"].append(gap / k * 1000.0)
                out["itl_weight"].append(float(k))
    return out


def ecdf(
    values: Sequence[float], weights: Sequence[float] | None = None
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """(x, y) of the empirical CDF as a step line from (min, 0): y = share of values <= x,
    each value counted ``weights[i]`` times (once when None)."""
    xs = numpy.array(values, dtype=float)
    ws = numpy.ones(len(xs)) if weights is None else numpy.array(weights, dtype=float)
    keep = ~numpy.isnan(xs)
    order = numpy.argsort(xs[keep], kind="stable")
    xs, ws = xs[keep][order], ws[keep][order]
    if not len(xs):
        return xs, xs
    ys = numpy.cumsum(ws) / ws.sum()
    return numpy.concatenate([xs[:1], xs]), numpy.concatenate([[0.0], ys])


def thinned(
    xs: numpy.ndarray, ys: numpy.ndarray, limit: int = MAX_CDF_POINTS
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """At most ``limit`` points of a CDF's step line, evenly spaced in y, the first and last
    kept: a line of millions of per-token ITL values draws the same at a figure's resolution,
    in a fraction of the time."""
    if len(xs) <= limit:
        return xs, ys
    keep = numpy.unique(numpy.linspace(0, len(xs) - 1, limit).round().astype(int))
    return xs[keep], ys[keep]


def cdf_figure(
    samples: Mapping[str, Sequence[float]],
    *,
    metric: str = "TTFT",
    unit: str = "ms",
    point_label: str = "c=8",
    setup: str = "",
    colors: Mapping[str, str] | None = None,
    weights: Mapping[str, Sequence[float]] | None = None,
) -> Figure:
    """The figure (the caller closes it). ``samples`` keys: a configuration ("vllm dflash"), or
    "<configuration> · <folder label>" in a compare; ``setup``: ``style.setup_line(frame)``;
    ``weights``: per key, how many values each sample stands for (per-token ITL)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.0, 5.6), layout="constrained")
    series = keyed_series(list(samples), colors)
    drawn, empty = [], []
    for s in series:
        xs, ys = thinned(*ecdf(samples[s.key], (weights or {}).get(s.key)))
        if not len(xs):
            empty.append(s.label)
            continue
        ax.plot(
            xs,
            ys,
            drawstyle="steps-post",
            color=s.color,
            linestyle=s.linestyle,
            linewidth=1.5,
            gid=f"cdf:{s.label}",
        )
        drawn.append(s)
    _axes(ax, [x for s in drawn for x in samples[s.key]], metric, unit)
    legend(fig, drawn)
    stat = "empirical CDF over the measured, completed requests"
    stat += f"; no samples: {', '.join(empty)}" if empty else ""
    fig.suptitle(title(f"{metric} distribution at {point_label}", setup, stat))
    return fig


def _axes(ax: Any, values: Sequence[float], metric: str, unit: str) -> None:
    positive = [v for v in values if v > 0]
    log = bool(positive) and max(positive) / min(positive) > LOG_SPAN
    if log:
        ax.set_xscale("log")
    for q in GUIDES:
        ax.axhline(q, color="grey", linestyle=":", linewidth=0.7)
        ax.annotate(
            f"p{100 * q:g}",
            (1.0, q),
            xycoords=("axes fraction", "data"),
            xytext=(2, 0),
            textcoords="offset points",
            fontsize=7,
            va="center",
        )
    ax.set_xlabel(f"{metric} ({unit}{', log scale' if log else ''})")
    ax.set_ylabel("share of values ≤ x")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


def cdf_plot(
    samples: Mapping[str, Sequence[float]],
    *,
    metric: str = "TTFT",
    unit: str = "ms",
    point_label: str = "c=8",
    setup: str = "",
    colors: Mapping[str, str] | None = None,
    weights: Mapping[str, Sequence[float]] | None = None,
) -> bytes:
    """PNG bytes of ``cdf_figure``."""
    return to_png(
        cdf_figure(
            samples,
            metric=metric,
            unit=unit,
            point_label=point_label,
            setup=setup,
            colors=colors,
            weights=weights,
        )
    )
