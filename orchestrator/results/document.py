"""A report's content, apart from how it is shown: sections of text, tables and figures.

``orch report`` and ``orch compare`` build a ``Document`` from results (pure functions of the
results frame); ``report_html`` and ``report_markdown`` render it, and ``write_document``
writes both. Keeping the content in one place is what makes the HTML and the Markdown say the
same thing, and lets tests check the content without parsing either.

A figure over repeats is a mean and the half-width of its 95% t-interval ("488.2 ± 35.1"); a
*noisy* one (the interval wider than the workload's ``noisy_ci`` of its mean) is marked in every
table, so a difference smaller than its spread is never read as a result.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import ResultsWriteError
from orchestrator.results.store import FILE_MODE
from orchestrator.results.store import write_error as _store_write_error

Tone = Literal["plain", "good", "bad", "muted"]

NOISY_LEGEND = (
    "± is the half-width of the 95% Student-t interval over repeats; in bold red (noisy) when "
    "it is wider than the workload's noisy_ci (10% by default) of the mean: a difference that "
    "small says nothing."
)


@dataclass(frozen=True)
class Value:
    """One table cell: its text, and for a figure over repeats the ± part."""

    text: str
    spread: str | None = None  # the interval's half-width, as text ("35.1")
    noisy: bool = False
    tone: Tone = "plain"

    @property
    def plain(self) -> str:
        """The cell as plain text ("488.2 ± 35.1 (noisy)")."""
        if self.spread is None:
            return self.text
        return f"{self.text} ± {self.spread}" + (" (noisy)" if self.noisy else "")


# a figure: a number (a percentage, a count "2/3", "-" unknown), maybe "(noisy)" after it
_NUMERIC = re.compile(r"^(?:[-+]?\d[\d.]*%?|\d+/\d+|-)(?: \(noisy\))?$")


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]
    caption: str = ""

    def numeric(self, column: int) -> bool:
        """Whether a column holds figures (right-aligned): every cell a number or "-"."""
        cells = [row[column].text for row in self.rows if column < len(row)]
        return bool(cells) and all(_NUMERIC.match(c) for c in cells) and column > 0


@dataclass(frozen=True)
class Figure:
    """A plot: ``name`` is its file stem (``pareto-output``), ``caption`` says what it shows."""

    name: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class Section:
    heading: str
    paragraphs: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()  # label -> value lines ("playbook", "sweep-demo")
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()
    notes: tuple[str, ...] = ()  # lines in a list: errors, not-run causes


@dataclass(frozen=True)
class Document:
    title: str
    subtitle: str
    sections: tuple[Section, ...] = field(default_factory=tuple)
    legend: str = NOISY_LEGEND

    @property
    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]


def number(value: float | None, spec: str) -> str:
    """A figure as text, "-" when unknown."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def figure_value(
    mean: float | None, half_width: float | None, *, noisy: bool, spec: str, tone: Tone = "plain"
) -> Value:
    """A mean over repeats with its ± half-width (none with a single measurement)."""
    text = number(mean, spec)
    if text == "-" or half_width is None or not math.isfinite(half_width):
        return Value(text, tone=tone)
    return Value(text, spread=format(half_width, spec), noisy=noisy, tone=tone)


@dataclass(frozen=True)
class WrittenReport:
    html: Path
    markdown: Path
    images: tuple[Path, ...]


def write_error(path: Path, exc: OSError) -> ResultsWriteError:
    """The store's error for a report file, with a hint that fits `orch report`."""
    error = _store_write_error(path, exc)
    hint = "pass --out FOLDER to write the report somewhere you can"
    return ResultsWriteError(error.path, error.reason, errno=error.errno, hint=hint)


def replace_file(path: Path, data: bytes) -> Path:
    """Write ``path`` whole or not at all: a temporary file in the same folder, then
    ``os.replace``. Only for derived files (reports), which a later ``orch report`` may
    replace; measurements are never overwritten (``store.write_bytes``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return path


def write_document(
    doc: Document,
    folder: Path,
    stem: str,
    *,
    html: Callable[[Document], str],
    markdown: Callable[[Document, str], str],
) -> WrittenReport:
    """``<stem>.html`` (self-contained) and ``<stem>.md`` with its images in ``<stem>-files/``,
    each replaced atomically; PNG files of an earlier report there that this one no longer
    draws are removed (that folder is the report's own)."""
    images_dir = folder / f"{stem}-files"
    images = tuple(replace_file(images_dir / f"{f.name}.png", f.png) for f in doc.figures)
    if images_dir.is_dir():
        for stale in images_dir.glob("*.png"):
            if stale not in images:
                with contextlib.suppress(OSError):
                    stale.unlink()
    markdown_path = replace_file(
        folder / f"{stem}.md", markdown(doc, images_dir.name).encode("utf-8")
    )
    html_path = replace_file(folder / f"{stem}.html", html(doc).encode("utf-8"))
    return WrittenReport(html_path, markdown_path, images)
