"""The report of one or several results folders as a ``Document``: the set-up, a table per
configuration with a row per load point, what failed or was never measured, then the plots.
A night's report starts with its "Nightly trend" (``trend_section``).

Every figure in a table is the mean over the point's repeats that measured it, with the
half-width of its 95% Student-t interval (``stats.aggregate``); failed and never-made
measurements are left out of the figures and counted in their own columns, so a number is never
shown as measured when it was not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from orchestrator import __version__
from orchestrator.config.methods import display_name
from orchestrator.metrics import catalogue
from orchestrator.results.document import (
    Document,
    Figure,
    Section,
    Table,
    Tone,
    Value,
    figure_value,
)
from orchestrator.results.model import CPU_DEVICE
from orchestrator.results.plot import engine_display_name
from orchestrator.results.setup_info import setup_section
from orchestrator.results.slo_answer import SloAnswer
from orchestrator.results.stats import aggregate

if TYPE_CHECKING:
    from orchestrator.results.trend import NightTrend


@dataclass(frozen=True)
class Column:
    metric: str
    header: str
    spec: str  # format of the mean and the ± half-width


def column(metric: catalogue.Metric) -> Column:
    return Column(metric.name, metric.header, metric.spec)


# the catalogue's table metrics, in its order: throughput, latency, acceptance, goodput
TABLE_COLUMNS = tuple(column(m) for m in catalogue.TABLE)
METRICS = tuple(c.metric for c in TABLE_COLUMNS)

COLUMNS_NOTE = (
    "Each figure: the mean over the repeats that measured the point ± the half-width of its 95% "
    "t-interval. tok/s/GPU: output throughput / GPUs the server used; tok/s/user "
    "(interactivity): 1000 / median TPOT; TTFT, TPOT: over the requests of a measurement; "
    "accept len: tokens per decode step; goodput: requests per second meeting every SLO target; "
    "SLO met: measurements meeting every target / measured; n: measurements in the figures; "
    "failed and not run are left out of them."
)


SLO_VERDICT_NOTE = (
    "The verdict column says whether orch measured a point correctly (ok, failed, collapse, "
    "sources disagree), not whether it met the SLO: a point measured correctly shows verdict "
    "ok even when it missed its targets (SLO met 0/2)."
)
SLO_HEADING = "SLO search"
SLO_SEARCH_NOTE = (
    "Each run's search for the highest load at which every measurement met every SLO target "
    "(targets: {targets}): bisection over the playbook's slo.range, the answer being the "
    "highest load measured below every load that missed; the Pareto plots star it."
)


def slo_section(answers: Sequence[SloAnswer], several: bool) -> Section:
    """The answer of every run's SLO search, in a table, with how it was found."""
    rows = []
    for a in answers:
        where = f"[{Path(a.results_dir).name}] " if several else ""
        tone: Tone = "good" if a.best is not None else "bad"
        rows.append(
            (
                Value(where + a.run),
                Value(a.host),
                Value(a.label, tone=tone),
                Value(a.detail),
            )
        )
    targets = ", ".join(dict.fromkeys(t for a in answers for t in a.targets)) or "-"
    table = Table("", ("run", "host", "answer", "what the search found"), tuple(rows))
    return Section(
        SLO_HEADING,
        paragraphs=(SLO_SEARCH_NOTE.format(targets=targets),),
        tables=(table,),
    )


def config_label(engine: str, method: str) -> str:
    """ "SGLang MTP", "vLLM DFlash", "vLLM (no speculation)"."""
    name = engine_display_name(engine)
    return f"{name} (no speculation)" if method == "none" else f"{name} {display_name(method)}"


def load_label(kind: object, value: object, origin: object = None) -> str:
    x = value if isinstance(value, int | float) and not pd.isna(value) else None
    if kind not in ("concurrency", "request_rate") or x is None:
        return "-"
    text = f"c={x:g}" if kind == "concurrency" else f"rate={x:g}"
    return text + (" (SLO search)" if origin == "slo_search" else "")


def _known(value: object) -> bool:
    return (
        value is not None
        and value is not pd.NA
        and not (isinstance(value, float) and pd.isna(value))
    )


def figure_cell(point: pd.Series, column: Column) -> Value:
    mean, high = point[f"{column.metric}_mean"], point[f"{column.metric}_high"]
    mean_v = float(mean) if _known(mean) else None
    half = float(high) - mean_v if _known(high) and mean_v is not None else None
    noisy = bool(point[f"{column.metric}_noisy"])
    return figure_value(mean_v, half, noisy=noisy, spec=column.spec)


def slo_cell(rows: pd.DataFrame) -> Value:
    """Measurements meeting every target, of the measured ones that had targets."""
    known = [bool(v) for v in rows["slo_met"] if _known(v)]
    if not known:
        return Value("-")
    met = sum(known)
    return Value(f"{met}/{len(known)}", tone="good" if met == len(known) else "bad")


def verdict_cell(rows: pd.DataFrame) -> Value:
    verdicts = [v for v in dict.fromkeys(rows["verdict"]) if v != "ok"]
    if not verdicts:
        return Value("ok", tone="good") if len(rows) else Value("-")
    return Value(", ".join(verdicts), tone="bad")


def count_cell(n: int) -> Value:
    return Value(str(n), tone="bad" if n else "muted")


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """The measurements whose figures count (not failed, not never made)."""
    return rows[(rows["verdict"] != "failed") & ~rows["not_run"].astype(bool)]


def config_columns(rows: pd.DataFrame) -> tuple[list[Column], bool]:
    """The figure columns a configuration's table shows (acceptance when it speculates), and
    whether it shows goodput and SLO (when its workload had targets)."""
    shown: set[catalogue.TableRule] = {"always"}
    if (rows["method"] != "none").any():
        shown.add("speculation")
    if rows["j_per_output_token"].notna().any():
        shown.add("energy")
    if rows["roofline_pct"].notna().any():
        shown.add("roofline")
    slo = bool(rows["slo_met"].notna().any())
    if slo:
        shown.add("slo")
    columns = [column(m) for m in catalogue.TABLE if m.table in shown]
    return columns, slo


def config_title(first: pd.Series, folder: str | None) -> str:
    gpus = "" if pd.isna(first["gpu_count"]) else f" · {first['gpu_count']} GPU"
    if first["gpu_name"] == CPU_DEVICE:  # a CPU host: no GPU to count
        gpus = f" · {CPU_DEVICE}"
    elif _known(first["gpu_name"]):
        gpus += f" × {first['gpu_name']}"
    drafter = f" ({first['draft_model']})" if _known(first["draft_model"]) else ""
    tokens = first["num_draft_tokens"]
    drafts = f", {tokens} draft tokens" if _known(tokens) else ""
    where = f"[{folder}] " if folder else ""
    label = config_label(first["engine"], first["method"])
    return (
        f"{where}{first['run']} on {first['host']} · {label}{drafter}{drafts} · "
        f"{first['model']}{gpus}"
    )


def point_rows(rows: pd.DataFrame, point: pd.Series) -> pd.DataFrame:
    """The measurements of one aggregated load point (a result without a point: NaN)."""
    if not _known(point["load_value"]):
        return rows[rows["load_value"].isna()]
    same = (rows["load_kind"] == point["load_kind"]) & (rows["load_value"] == point["load_value"])
    return rows[same.fillna(False).astype(bool)]


def config_table(rows: pd.DataFrame, points: pd.DataFrame, folder: str | None) -> Table:
    """One configuration (a run of one results folder): a row per load point."""
    columns, slo = config_columns(rows)
    headers = ["load", "n", *(c.header for c in columns), *(["SLO met"] if slo else [])]
    body = []
    for _, point in points.iterrows():
        at = point_rows(rows, point)
        kept = measured(at)
        failed = int(((at["verdict"] == "failed") & ~at["not_run"]).sum())
        line = [
            Value(load_label(point["load_kind"], point["load_value"], point["origin"])),
            Value(str(len(kept))),
            *(figure_cell(point, c) for c in columns),
            *([slo_cell(kept)] if slo else []),
            count_cell(failed),
            count_cell(int(at["not_run"].sum())),
            verdict_cell(kept),
        ]
        body.append(tuple(line))
    headers += ["failed", "not run", "verdict"]
    return Table(config_title(rows.iloc[0], folder), tuple(headers), tuple(body))


def point_tables(frame: pd.DataFrame, agg: pd.DataFrame) -> list[Table]:
    """A table per configuration, in run order (the order of the frame)."""
    several = frame["results_dir"].nunique() > 1
    tables = []
    for (where, key), rows in frame.groupby(["results_dir", "key"], sort=False):
        points = agg[(agg["results_dir"] == where) & (agg["key"] == key)]
        tables.append(config_table(rows, points, Path(where).name if several else None))
    return tables


def problem_notes(frame: pd.DataFrame) -> list[str]:
    """Each failed measurement with its error, and each run's never-made ones once per cause."""
    notes: list[str] = []
    not_run: dict[tuple[str, str, str], list[str]] = {}
    for _, r in frame.iterrows():
        where = load_label(r["load_kind"], r["load_value"])
        if _known(r["repeats"]) and r["repeats"] > 1:
            where += f" #{r['repeat']}"
        if r["not_run"]:
            not_run.setdefault((r["run"], r["host"], str(r["error"])), []).append(where)
        elif r["verdict"] == "failed":
            notes.append(f"{r['run']} on {r['host']} at {where} failed: {r['error']}")
    for (run, host, why), points in not_run.items():
        notes.append(f"{run} on {host}: {len(points)} not run ({', '.join(points)}): {why}")
    return notes


def sweep_tables(frame: pd.DataFrame) -> list[Table]:
    """The report's tables of ``frame`` alone (a row per configuration and load point), for
    the console at the end of a sweep."""
    return point_tables(frame, aggregate(frame, METRICS))


def report_title(frame: pd.DataFrame) -> str:
    folders = [Path(d).name for d in dict.fromkeys(frame["results_dir"])]
    if len(folders) == 1:
        return f"orch report: {folders[0]}"
    return f"orch report: {len(folders)} results folders"


TREND_HEADING = "Nightly trend"
TREND_NOTE = (
    "A plot per metric the night judged, over the last {nights} nights: a line per case with "
    "± one standard deviation over its repeats, tonight's baseline ± the practical threshold "
    "shaded, violating nights in red, rejected (or otherwise uncounted) nights in grey, dashed "
    "lines where the shift began (since, and the change point). nightly.md has the details."
)
VERDICT_TONES: dict[str, Tone] = {
    "failure": "bad",
    "regression": "bad",
    "drift": "bad",
    "suspicious": "bad",
    "could_not_measure": "muted",
    "insufficient_data": "muted",
    "inconclusive": "muted",
    "recovered": "good",
    "improvement": "good",
    "ok": "good",
}


def trend_section(trend: NightTrend, figures: Sequence[Figure]) -> Section:
    """A night's verdict in one line, its cases, and its trend plots (``trend_figures``)."""
    rows = tuple(
        (
            Value(c.case_id),
            Value(c.verdict, tone=VERDICT_TONES[c.verdict]),
            Value(", ".join(f"{m} {v}" for m, v in c.findings) or "-"),
            Value(c.label),
        )
        for c in trend.cases
    )
    table = Table("", ("case", "verdict", "not ok", "case label"), rows)
    return Section(
        TREND_HEADING,
        paragraphs=(trend.summary, TREND_NOTE.format(nights=len(trend.nights))),
        tables=(table,) if rows else (),
        figures=tuple(figures),
        notes=trend.notes,
    )


def build_report(
    frame: pd.DataFrame,
    figures: Sequence[Figure],
    plot_notes: Sequence[str] = (),
    lead: Sequence[Section] = (),
    answers: Sequence[SloAnswer] = (),
) -> Document:
    """The report of the measurements in ``frame`` (``frame.load``) with ``figures`` drawn;
    ``plot_notes``: why a plot is missing; ``lead``: sections before all others (a night's
    trend); ``answers``: the runs' SLO searches (``slo_answer.slo_answers``), a section of
    their own before the tables."""
    agg = aggregate(frame, METRICS)
    configs = frame.groupby(["results_dir", "key"], sort=False).ngroups
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = (
        f"{configs} configuration{'s' if configs != 1 else ''} · {len(frame)} measurements · "
        f"written by orch {__version__} on {generated}"
    )
    folders = list(dict.fromkeys(frame["results_dir"]))
    setups = [
        setup_section(
            frame[frame["results_dir"] == d],
            "Setup" if len(folders) == 1 else f"Setup: {Path(d).name}",
        )
        for d in folders
    ]
    has_slo = bool(frame["slo_met"].notna().any())
    results = Section(
        "Results by configuration and load point",
        paragraphs=(COLUMNS_NOTE, *((SLO_VERDICT_NOTE,) if has_slo else ())),
        tables=tuple(point_tables(frame, agg)),
        notes=tuple(problem_notes(frame)),
    )
    plots = Section("Plots", figures=tuple(figures), notes=tuple(plot_notes))
    searches = (slo_section(answers, len(folders) > 1),) if answers else ()
    sections = (
        *lead,
        *setups,
        *searches,
        results,
        *((plots,) if figures or plot_notes else ()),
    )
    return Document(report_title(frame), subtitle, sections)
