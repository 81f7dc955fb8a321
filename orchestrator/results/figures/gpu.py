"""The GPUs' power and SM clock over a server's measurements, from their ``telemetry.csv``.

Beside the timeline of the engine's own figures, this says what the hardware did meanwhile: a
power draw pinned at the board's limit, or an SM clock that falls mid-sweep (thermal or power
throttling), explains a throughput that falls with it. A row per server, power on the left
(one line per GPU) and the SM clock on the right; x = seconds since the server's first sample
(the samples' own epoch clock, the one the measured windows are recorded on), each measured
window shaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.remote.wire import GpuSample
from orchestrator.results.figures.style import Series, note, title
from orchestrator.results.figures.style import png as to_png
from orchestrator.results.figures.timeline import Span, rows_figure, shade

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Window = tuple[float, float, str]  # (start, end epoch s, label): a measured window
PANELS = (("power_w", "power", "W"), ("sm_mhz", "SM clock", "MHz"))


def gpu_spans(samples: Sequence[GpuSample], windows: Sequence[Window]) -> list[Span]:
    """The measured windows on the server's sample timeline (seconds since its first sample)."""
    if not samples:
        return []
    origin = min(s.t for s in samples)
    return [(start - origin, end - origin, label) for start, end, label in windows]


def _panel(
    ax: Any, s: Series, samples: Sequence[GpuSample], field: str, spans: Sequence[Span]
) -> None:
    _, name, unit = next(p for p in PANELS if p[0] == field)
    origin = min((x.t for x in samples), default=0.0)
    gpus = sorted({x.gpu for x in samples})
    drawn = False
    for i, gpu in enumerate(gpus):
        points = [(x.t - origin, getattr(x, field)) for x in samples if x.gpu == gpu]
        points = [(t, v) for t, v in points if v is not None]
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, color=s.color, linestyle=s.linestyle, linewidth=1.0,
                alpha=1.0 - 0.5 * i / max(1, len(gpus)), gid=f"{field}:{s.label}:gpu{gpu}")  # fmt: skip
        drawn = True
    if not drawn:
        note(ax, f"no {name} sampled", ticks=False)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{s.label}: GPU {name} ({unit}; a line per GPU)", fontsize=9)
    ax.grid(alpha=0.3)
    shade(ax, spans, labelled=field == "power_w")


def gpu_figure(
    samples: Mapping[str, Sequence[GpuSample]],
    *,
    spans: Mapping[str, Sequence[Span]] | None = None,
    setup: str = "",
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """The figure (the caller closes it): a row per server, ``samples`` keyed as the timeline's
    are; ``spans`` (``gpu_spans``) shades its measured windows."""
    stat = "every sample" + ("; shaded: measured windows" if spans else "")
    return rows_figure(
        samples,
        _panel,
        ("power_w", "sm_mhz"),
        spans=spans,
        colors=colors,
        row_height=2.4,
        empty="no GPU telemetry",
        xlabel="seconds since the server's first GPU sample",
        heading=title("GPU power and SM clock over time", setup, stat),
    )


def gpu_plot(
    samples: Mapping[str, Sequence[GpuSample]],
    *,
    spans: Mapping[str, Sequence[Span]] | None = None,
    setup: str = "",
    colors: Mapping[str, str] | None = None,
) -> bytes:
    """PNG bytes of ``gpu_figure``."""
    return to_png(gpu_figure(samples, spans=spans, setup=setup, colors=colors))
