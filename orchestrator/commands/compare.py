"""`orch compare A B [C ...]`: results folders (across days and machines) side by side.

Writes ``compare.html`` and ``compare.md`` (plots in ``compare-files/``) into ``--out``
(default ``results/compare-<UTC stamp>``); like reports, these are derived files that a later
comparison into the same folder replaces, and no measurement is ever touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchError
from orchestrator.results.compare import build_compare, letters
from orchestrator.results.document import Document, WrittenReport, write_document
from orchestrator.results.frame import frame_of, load_pairs, results_folders
from orchestrator.results.report_figures import compare_figures
from orchestrator.results.report_html import render_html
from orchestrator.results.report_markdown import render_markdown
from orchestrator.results.store import utc_stamp

COMPARE_STEM = "compare"
DEFAULT_ROOT = Path("results")


@dataclass(frozen=True)
class CompareOutcome:
    folders: list[Path]
    document: Document
    written: WrittenReport


def compare(results_dirs: Sequence[Path], *, out: Path | None = None) -> CompareOutcome:
    """Compare two results folders or more (a parent folder counts as the folders in it); the
    first is the baseline. OrchError with fewer than two."""
    folders = results_folders(list(results_dirs))
    if len(folders) < 2:
        raise OrchError(
            f"orch compare needs two results folders or more, got {len(folders)}",
            hint="orch compare results/<stamp>-a results/<stamp>-b",
        )
    names = [str(f) for f in folders]
    frame = frame_of(load_pairs(folders))
    plots = compare_figures(frame, names, letters(len(names)))
    doc = build_compare(frame, names, plots.figures, plots.notes)
    target = out if out is not None else DEFAULT_ROOT / f"compare-{utc_stamp()}"
    written = write_document(doc, target, COMPARE_STEM, html=render_html, markdown=render_markdown)
    return CompareOutcome(folders, doc, written)
