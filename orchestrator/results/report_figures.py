"""The plots of a report and of a comparison, drawn by ``orchestrator.results.figures`` from the
results frame and the files beside each measurement (``requests.jsonl``, ``events.jsonl``).

One colour per configuration across every plot of a document (``figure_colors`` of the whole
frame); in a comparison the folders are told apart by line style, their legend names being the
folders' letters (A, B ...), as in the tables.

The latency distributions (TTFT, per-token ITL) are drawn at one load point for every
configuration: the one asked for (``--cdf-at c=8``), else the highest load every configuration
measured. They pool the requests of the point's measured repeats. The timeline reads each
server's ``events.jsonl`` and shades where each measurement lies on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from orchestrator.errors import OrchError
from orchestrator.metrics.energy import TELEMETRY_FILE, read_telemetry_csv
from orchestrator.remote.wire import GpuSample
from orchestrator.results import figures as fg
from orchestrator.results.document import Figure
from orchestrator.results.figures.slo import SloMarks
from orchestrator.results.figures.style import folder_labels
from orchestrator.results.figures.trend import trend_plot
from orchestrator.results.model import RunResult
from orchestrator.results.report_doc import load_label, measured
from orchestrator.results.setup_info import run_folder
from orchestrator.results.slo_answer import SloAnswer
from orchestrator.results.stats import aggregate
from orchestrator.results.trend import NightTrend

# every metric a plot reads from the per-point aggregate
PLOT_METRICS = (
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "interactivity",
    "output_tok_s",
    "tpot_ms_median",
    "ttft_ms_p99",
    "acceptance_length",
    "output_tok_s_per_w",
)
LoadAt = tuple[str, float]  # (load_kind, load_value)
CDFS = (("ttft_ms", "TTFT", "cdf-ttft"), ("itl_ms", "per-token ITL", "cdf-itl"))


@dataclass
class Plots:
    """The figures drawn, and why any expected one is missing (said under the plots)."""

    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, caption: str, png: bytes) -> None:
        self.figures.append(Figure(name, caption, png))


def series_keys(frame: pd.DataFrame, folder_label: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """(results_dir, key) -> the figure key of that run: its configuration, "<config> · <folder
    label>" in a comparison, and the run's name after it when a configuration has several runs
    in one folder (so none is drawn over another)."""
    runs = frame[["results_dir", "key", "config", "run"]].drop_duplicates(["results_dir", "key"])
    keys: dict[tuple[str, str], str] = {}
    for (where, config), group in runs.groupby(["results_dir", "config"], sort=False):
        for _, r in group.iterrows():
            parts = [folder_label.get(where, ""), r["run"] if len(group) > 1 else ""]
            suffix = " ".join(p for p in parts if p)
            keys[(where, r["key"])] = config + (fg.SEPARATOR + suffix if suffix else "")
    return keys


def cdf_point(frame: pd.DataFrame, asked: LoadAt | None) -> LoadAt | None:
    """The point the distributions are drawn at: ``asked``, else the highest load of the load
    kind measured by every run; None when the runs share no point."""
    if asked is not None:
        return asked
    done = measured(frame).dropna(subset=["load_value"])
    shared: set[tuple[str, float]] | None = None
    for _, rows in done.groupby(["results_dir", "key"], sort=False):
        points = set(zip(rows["load_kind"], rows["load_value"], strict=True))
        shared = points if shared is None else shared & points
    return max(shared, key=lambda p: (p[0] == "concurrency", p[1])) if shared else None


def latency_samples(
    frame: pd.DataFrame, at: LoadAt, keys: Mapping[tuple[str, str], str], notes: list[str]
) -> dict[str, dict[str, list[float]]]:
    """Figure key -> metric -> the pooled samples of the point's measured repeats."""
    rows = measured(frame)
    rows = rows[(rows["load_kind"] == at[0]) & (rows["load_value"] == at[1])]
    found: dict[str, dict[str, list[float]]] = {}
    for _, r in rows.iterrows():
        path = Path(r["results_dir"]) / r["folder"] / "requests.jsonl"
        if not path.is_file():
            notes.append(f"{r['run']} on {r['host']}: no {path.name} in {r['folder']}")
            continue
        try:
            samples = fg.request_latencies(path, notes)
        except OrchError as exc:
            notes.append(f"{r['run']} on {r['host']}: {exc.message}")
            continue
        pooled = found.setdefault(keys[(r["results_dir"], r["key"])], {})
        for metric, values in samples.items():
            pooled.setdefault(metric, []).extend(values)
    return found


def read_events(path: Path) -> list[dict[str, object]]:
    """An events.jsonl's objects (a line that is not one is left out)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            events.append(obj)
    return events


def timeline_inputs(
    frame: pd.DataFrame, keys: Mapping[tuple[str, str], str]
) -> tuple[dict[str, list[dict[str, object]]], dict[str, list[fg.Span]]]:
    """Per figure key: its server's events, and where each measurement lies on them."""
    events: dict[str, list[dict[str, object]]] = {}
    spans: dict[str, list[fg.Span]] = {}
    for (where, key), rows in frame.groupby(["results_dir", "key"], sort=False):
        folder = run_folder(where, rows.iloc[0]["folder"])
        server = read_events(folder / "events.jsonl")
        if not server:
            continue
        events[keys[(where, key)]] = server
        points: dict[str, list[dict[str, object]]] = {}
        for _, r in measured(rows).iterrows():
            if Path(r["folder"]).parts[1:2] == ("points",):
                label = load_label(r["load_kind"], r["load_value"])
                label += f" #{r['repeat']}" if r["repeats"] > 1 else ""
                points[label] = read_events(Path(where) / r["folder"] / "events.jsonl")
        spans[keys[(where, key)]] = fg.measurement_spans(server, points) if points else []
    return events, spans


def gpu_inputs(
    frame: pd.DataFrame, keys: Mapping[tuple[str, str], str]
) -> tuple[dict[str, list[GpuSample]], dict[str, list[fg.Span]]]:
    """Per figure key: its server's GPU samples (every measurement's ``telemetry.csv``) and
    its measured windows on them."""
    samples: dict[str, list[GpuSample]] = {}
    spans: dict[str, list[fg.Span]] = {}
    for (where, key), rows in frame.groupby(["results_dir", "key"], sort=False):
        found: list[GpuSample] = []
        windows: list[tuple[float, float, str]] = []
        for _, r in measured(rows).iterrows():
            folder = Path(where) / r["folder"]
            try:
                found += read_telemetry_csv((folder / TELEMETRY_FILE).read_text(encoding="utf-8"))
                loadgen = RunResult.load(folder / "summary.json").loadgen
            except (OSError, ValueError, OrchError):
                continue
            if loadgen is not None and loadgen.started_at and loadgen.ended_at:
                label = load_label(r["load_kind"], r["load_value"])
                label += f" #{r['repeat']}" if r["repeats"] > 1 else ""
                windows.append((loadgen.started_at, loadgen.ended_at, label))
        if found:
            found.sort(key=lambda s: s.t)
            samples[keys[(where, key)]] = found
            spans[keys[(where, key)]] = fg.gpu_spans(found, windows)
    return samples, spans


def draw_cdfs(
    plots: Plots,
    frame: pd.DataFrame,
    at: LoadAt | None,
    keys: Mapping[tuple[str, str], str],
    colors: Mapping[str, str],
) -> None:
    if at is None:
        plots.notes.append(
            "no latency distributions: the runs share no load point (pick one: --cdf-at c=8)"
        )
        return
    label = load_label(*at)
    samples = latency_samples(frame, at, keys, plots.notes)
    if not samples:
        plots.notes.append(f"no latency distributions at {label}: no request records there")
        return
    setup = fg.setup_line(frame)
    for metric, words, name in CDFS:
        per_key = {k: s.get(metric, []) for k, s in samples.items()}
        weights = {k: s.get("itl_weight", []) for k, s in samples.items()}  # per-token ITL
        png = fg.cdf_plot(
            per_key,
            metric=words,
            unit="ms",
            point_label=label,
            setup=setup,
            colors=colors,
            weights=weights if metric == "itl_ms" else None,
        )
        plots.add(name, f"{words} distribution (empirical CDF) at {label}", png)


def slo_marks(
    frame: pd.DataFrame, targets: Sequence[str], answers: Sequence[SloAnswer]
) -> SloMarks:
    """What the Pareto plots draw of the SLO: ``targets``, the points of ``frame`` that a
    measured repeat of missed, and each run's search answer (``slo_answer.slo_answers`` of the
    folders, whose ``results_dir`` is the frame's)."""
    done = measured(frame)
    missed = done[done["slo_met"].eq(False).fillna(False).astype(bool)]
    return SloMarks(
        targets=tuple(targets),
        answers={(a.results_dir, a.key): a.best for a in answers if a.best is not None},
        missed=frozenset(
            (str(w), str(k), float(v))
            for w, k, v in zip(
                missed["results_dir"], missed["key"], missed["load_value"], strict=True
            )
            if not pd.isna(v)
        ),
    )


MAX_TIMELINES = 12  # rows of the timeline figure, one per server


def first_timelines(
    events: dict[str, list[dict[str, object]]],
    spans: dict[str, list[fg.Span]],
    limit: int = MAX_TIMELINES,
) -> tuple[dict[str, list[dict[str, object]]], dict[str, list[fg.Span]], str | None]:
    """The first ``limit`` servers' timelines, and a note when there were more: a row per
    server would make a report over a year of nights a figure hundreds of inches tall."""
    if len(events) <= limit:
        return events, spans, None
    kept = dict(list(events.items())[:limit])
    note = (
        f"timeline: the first {limit} of {len(events)} servers (a report over one results "
        "folder shows all of its own)"
    )
    return kept, {k: v for k, v in spans.items() if k in kept}, note


def report_figures(
    frame: pd.DataFrame, *, cdf_at: LoadAt | None = None, slo: SloMarks | None = None
) -> Plots:
    """The report's plots: Pareto fronts (output and total throughput per GPU vs
    interactivity, with ``slo`` drawn), figures against the load, acceptance, latency CDFs, the
    servers' timelines."""
    plots = Plots()
    agg = aggregate(frame, PLOT_METRICS)
    colors = fg.figure_colors(frame)
    dirs = list(dict.fromkeys(frame["results_dir"]))
    keys = series_keys(frame, folder_labels(dirs) if len(dirs) > 1 else {})
    for y, what in (("output_tok_s_per_gpu", "Output"), ("total_tok_s_per_gpu", "Total")):
        png = fg.pareto_plot(agg, y=y, colors=colors, slo=slo)
        caption = f"{what} throughput per GPU vs interactivity"
        if slo:
            caption += " with the SLO: target lines, misses crossed, the search's answer starred"
        plots.add(f"pareto-{what.lower()}", caption, png)
    if agg.get("output_tok_s_per_w_mean", pd.Series(dtype=float)).notna().any():
        png = fg.pareto_plot(agg, y="output_tok_s_per_w", colors=colors)
        plots.add("pareto-energy", "Output throughput per watt vs interactivity", png)
    plots.add(
        "by-load", "Throughput and latency against the load", fg.load_plot(agg, colors=colors)
    )
    if (frame["method"] != "none").any():
        plots.add(
            "acceptance",
            "Acceptance against the load",
            fg.acceptance_plot(agg, frame, colors=colors),
        )
    draw_cdfs(plots, frame, cdf_point(frame, cdf_at), keys, colors)
    events, spans, cut = first_timelines(*timeline_inputs(frame, keys))
    if cut:
        plots.notes.append(cut)
    if events:
        png = fg.timeline_plot(events, spans=spans, setup=fg.setup_line(frame), colors=colors)
        plots.add("timeline", "Acceptance length and generation throughput over time", png)
    else:
        plots.notes.append("no timeline: no server wrote log events (events.jsonl)")
    gpu, windows = gpu_inputs(frame, keys)
    if gpu:
        kept = dict(list(gpu.items())[:MAX_TIMELINES])
        png = fg.gpu_plot(kept, spans=windows, setup=fg.setup_line(frame), colors=colors)
        plots.add("gpu", "GPU power and SM clock over time, measured windows shaded", png)
    else:
        plots.notes.append("no GPU power or clock series: no measurement sampled its GPUs")
    return plots


def trend_figures(trend: NightTrend) -> list[Figure]:
    """A night's trend plots, one per metric it judged (``trend-<metric>``)."""
    return [
        Figure(
            f"trend-{m.metric}",
            f"{m.metric} over the last {len(trend.nights)} nights: tonight {m.verdict}",
            trend_plot(m, nights=trend.nights),
        )
        for m in trend.metrics
    ]


def compare_figures(frame: pd.DataFrame, folders: Sequence[str], letters: Sequence[str]) -> Plots:
    """The comparison's plots, every folder's curves overlaid (line style: the folder)."""
    plots = Plots()
    agg = aggregate(frame, PLOT_METRICS)
    colors = fg.figure_colors(frame)
    labels = dict(zip(folders, letters, strict=True))
    y = "output_tok_s_per_gpu"
    plots.add(
        "pareto-output",
        "Output throughput per GPU vs interactivity",
        fg.pareto_plot(agg, y=y, colors=colors, labels=labels),
    )
    plots.add(
        "by-load",
        "Throughput and latency against the load",
        fg.load_plot(agg, colors=colors, labels=labels),
    )
    if (frame["method"] != "none").any():
        png = fg.acceptance_plot(agg, frame, colors=colors, labels=labels)
        plots.add("acceptance", "Acceptance against the load", png)
    draw_cdfs(plots, frame, cdf_point(frame, None), series_keys(frame, labels), colors)
    plots.notes.append("the servers' timelines are in each folder's own report (orch report)")
    return plots
