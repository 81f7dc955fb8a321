"""`orch report RESULTS_DIR`: an earlier `orch run`'s results, read back from its summary.json
files (the run result model only, ``results/report.py: load_results``)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.commands.run import PlaybookOutcome
from orchestrator.errors import OrchError
from orchestrator.results.report import load_results


def report(results_dir: Path) -> PlaybookOutcome:
    """The results folder as `orch run` returned it; OrchError when it holds no result."""
    results = load_results(results_dir) if results_dir.is_dir() else []
    if not results:
        raise OrchError(
            f"{results_dir} holds no run results (summary.json files)",
            hint="give a folder like results/20261202T095948Z-demo",
        )
    plot = results_dir / "comparison.png"
    return PlaybookOutcome(
        results_dir, results, results_dir / "summary.csv", plot if plot.exists() else None
    )
