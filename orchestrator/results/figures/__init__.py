"""The plots of sweep results, for ``orch report`` and ``orch compare`` (and notebooks).

Each takes the results as data: the per-point aggregate (``stats.aggregate``) of the
per-measurement frame (``orchestrator.results.load``), or samples a caller read from a point's
files. Each ``*_plot`` returns PNG bytes (deterministic: same input, same bytes), each
``*_figure`` the matplotlib Figure it renders (the caller closes it). Give every figure of one
report the same ``colors=figure_colors(frame)``: a configuration then has one colour throughout,
the one the bar chart (``plot.configuration_colors``) gives it.
"""

from orchestrator.results.figures.acceptance import acceptance_figure, acceptance_plot
from orchestrator.results.figures.by_load import LOAD_METRICS, load_figure, load_plot
from orchestrator.results.figures.gpu import gpu_figure, gpu_plot, gpu_spans
from orchestrator.results.figures.latency import cdf_figure, cdf_plot, request_latencies
from orchestrator.results.figures.pareto import pareto_figure, pareto_plot
from orchestrator.results.figures.style import SEPARATOR, figure_colors, setup_line
from orchestrator.results.figures.timeline import (
    Span,
    measurement_spans,
    timeline_figure,
    timeline_plot,
)

__all__ = [
    "LOAD_METRICS",
    "SEPARATOR",
    "Span",
    "acceptance_figure",
    "acceptance_plot",
    "cdf_figure",
    "cdf_plot",
    "figure_colors",
    "gpu_figure",
    "gpu_plot",
    "gpu_spans",
    "load_figure",
    "load_plot",
    "measurement_spans",
    "pareto_figure",
    "pareto_plot",
    "request_latencies",
    "setup_line",
    "timeline_figure",
    "timeline_plot",
]
