"""`orch report RESULTS_DIR [...]` on the command line: the results table of earlier runs again,
and their report (report.html, report.md) written from the results alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import JsonOpt, out, print_json
from orchestrator.cli.run import outcome_json, render_outcome

if TYPE_CHECKING:  # pandas and scipy take seconds to import: only `orch report` pays for them
    from orchestrator.commands.report import ReportOutcome


def report_json(done: ReportOutcome) -> dict[str, object]:
    """One folder: `orch run --json`'s object; several: their list under "results"; both with
    the report's files under "report"."""
    if len(done.outcomes) == 1:
        doc = outcome_json(done.outcomes[0])
    else:
        doc = {"results": [outcome_json(o) for o in done.outcomes]}
    written = done.written
    doc["report"] = {
        "html": str(written.html),
        "markdown": str(written.markdown),
        "images": [str(p) for p in written.images],
        "plots": done.plots,
    }
    return doc


def report_command(
    results_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Results folders written by `orch run` (or a folder holding several).",
            show_default=False,
            metavar="RESULTS_DIR",
        ),
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for report.html and report.md (default: the results folder; for "
            "several folders, results/report-STAMP, STAMP the UTC time).",
            show_default=False,
        ),
    ] = None,
    cdf_at: Annotated[
        str | None,
        typer.Option(
            "--cdf-at",
            help="Load point of the TTFT and ITL distributions, as tables show it: c=8 or "
            "rate=2.5 (default: the highest load every configuration measured).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the results table of earlier `orch run`s again (from their summary.json files) and
    write their report: report.html (self-contained, plots embedded) and report.md (plots in
    report-files/). Only the report files are written; measurements are never touched."""
    from orchestrator.commands.report import report

    done = report(results_dirs, out=out_dir, cdf_at=cdf_at)
    if as_json:
        print_json(report_json(done))
        return
    for outcome in done.outcomes:
        render_outcome(outcome)
    plots = f"{done.plots} plot{'' if done.plots == 1 else 's'}"
    out.print(f"report:  {done.written.html} ({plots})")
    out.print(f"         {done.written.markdown}")
