"""`orch report RESULTS_DIR [...]`: earlier `orch run`s' results, read back from their summary.json
files (the run result model only, ``results/report.py: load_results``), and their report:
``report.html`` (self-contained) and ``report.md`` with its plots in ``report-files/``.

Reports are derived files: `orch report` writes nothing else, and regenerating one replaces the
previous report files (each written to a temporary file, then renamed over the old one), while
measurements (summary.json, requests.jsonl, logs ...) are never touched. The never-overwrite
rule of ``results/store.py`` is for measurements; it does not apply to these files.

The report of a night (a folder holding ``nightly.json``, written by `orch nightly`) starts with
a "Nightly trend" section: the verdict, and a plot per metric over the last nights from the
playbook's history beside the folder (``nightly/trend.py``, ``results/figures/trend.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.commands.run import PlaybookOutcome
from orchestrator.errors import OrchError
from orchestrator.nightly.trend import folder_trend
from orchestrator.results.document import Section, WrittenReport, write_document
from orchestrator.results.frame import frame_of, results_folders
from orchestrator.results.model import RunResult
from orchestrator.results.report import load_results
from orchestrator.results.report_doc import TREND_HEADING, build_report, trend_section
from orchestrator.results.report_figures import report_figures, slo_marks, trend_figures
from orchestrator.results.report_html import render_html
from orchestrator.results.report_markdown import render_markdown
from orchestrator.results.slo_answer import slo_answers, slo_targets
from orchestrator.results.store import utc_stamp

REPORT_STEM = "report"
DEFAULT_ROOT = Path("results")


@dataclass(frozen=True)
class ReportOutcome:
    """Each results folder as `orch run` returned it, and the report written from them all."""

    outcomes: list[PlaybookOutcome]
    written: WrittenReport
    plots: int


def parse_point(text: str) -> tuple[str, float]:
    """``c=8`` / ``concurrency=8`` / ``rate=2.5`` / ``request_rate=2.5`` -> (kind, value)."""
    name, sep, raw = text.partition("=")
    kinds = {"c": "concurrency", "concurrency": "concurrency"}
    kinds |= {"rate": "request_rate", "request_rate": "request_rate"}
    kind = kinds.get(name.strip().lower())
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not sep or kind is None or not value > 0:
        raise OrchError(
            f"--cdf-at {text!r}: not a load point",
            hint="write it as a table shows it: c=8 (concurrency) or rate=2.5 (requests/s)",
        )
    return kind, value


def outcome_of(folder: Path, results: list[RunResult]) -> PlaybookOutcome:
    plot = folder / "comparison.png"
    return PlaybookOutcome(folder, results, folder / "summary.csv", plot if plot.exists() else None)


def default_out(now_stamp: str | None = None) -> Path:
    return DEFAULT_ROOT / f"report-{now_stamp or utc_stamp()}"


def night_sections(folders: Sequence[Path]) -> tuple[Section, ...]:
    """The "Nightly trend" section of a report of one night's folder (one holding
    nightly.json); none for any other report. A trend that cannot be made is said in the
    section, never fatal: the measurements' report is still worth writing."""
    if len(folders) != 1:
        return ()
    try:
        trend = folder_trend(folders[0])
    except (OrchError, ValueError) as exc:
        return (Section(TREND_HEADING, notes=(f"no trend: {exc}",)),)
    if trend is None:
        return ()
    return (trend_section(trend, trend_figures(trend)),)


def report(
    results_dirs: Sequence[Path], *, out: Path | None = None, cdf_at: str | None = None
) -> ReportOutcome:
    """Read the folders (a results folder, several, or a parent of several), then write the
    report into the folder for one, into ``out`` (default ``results/report-<UTC stamp>``) for
    several. OrchError when a folder holds no result or a result cannot be read."""
    point = parse_point(cdf_at) if cdf_at else None
    folders = results_folders(list(results_dirs))
    loaded = [(folder, load_results(folder)) for folder in folders]
    for folder, results in loaded:
        if not results:  # a folder emptied between the look and the read
            raise OrchError(f"{folder} holds no run results (summary.json files)")
    frame = frame_of((str(folder), r) for folder, results in loaded for r in results)
    answers = [a for folder, results in loaded for a in slo_answers(folder, results)]
    targets = slo_targets([r for _, results in loaded for r in results])
    plots = report_figures(frame, cdf_at=point, slo=slo_marks(frame, targets, answers))
    target = out if out is not None else folders[0] if len(folders) == 1 else default_out()
    doc = build_report(frame, plots.figures, plots.notes, night_sections(folders), answers)
    written = write_document(doc, target, REPORT_STEM, html=render_html, markdown=render_markdown)
    outcomes = [outcome_of(f, rs) for f, rs in loaded]
    return ReportOutcome(outcomes, written, len(doc.figures))
