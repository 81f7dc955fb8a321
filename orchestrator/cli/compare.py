"""`orch compare A B [C ...]` on the command line: the figures of several results folders side by
side, printed, and written as compare.html / compare.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table as RichTable

from orchestrator.cli.common import out
from orchestrator.results.document import Table, Value

FOLDERS, SIDE_BY_SIDE = "Folders", "Figures side by side"  # results/compare.py's sections
TONES = {"good": "green", "bad": "bold red", "muted": "dim", "plain": ""}


def rich_value(v: Value) -> str:
    text = escape(v.text)
    if TONES[v.tone]:
        text = f"[{TONES[v.tone]}]{text}[/]"
    if v.spread is not None:
        spread = escape(f"± {v.spread}")
        text += f" [bold red]{spread}[/]" if v.noisy else f" [dim]{spread}[/]"
    return text


def rich_table(table: Table) -> RichTable:
    """A report table for the terminal: noisy ± in bold red, as in the HTML report."""
    shown = RichTable(title=table.title, title_justify="left", box=box.SIMPLE_HEAD)
    for i, column in enumerate(table.columns):
        shown.add_column(
            escape(column), justify="right" if table.numeric(i) else "left", no_wrap=i < 2
        )
    for row in table.rows:
        shown.add_row(*(rich_value(v) for v in row))
    return shown


def compare_command(
    results_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Two results folders or more (A first: the baseline), or a folder holding "
            "several.",
            show_default=False,
            metavar="RESULTS_DIR",
        ),
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for compare.html and compare.md (default: results/compare-STAMP, STAMP the UTC time).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Compare results folders (across days and machines): each figure side by side with its
    relative difference to the first folder's, and the plots overlaid (compare.html, .md)."""
    from orchestrator.commands.compare import compare  # pandas, scipy: only when comparing

    done = compare(results_dirs, out=out_dir)
    for section in done.document.sections:
        for letter, folder in section.facts if section.heading == FOLDERS else ():
            out.print(f"{escape(letter)}: {escape(folder)}")
        if section.tables and section.heading == SIDE_BY_SIDE:
            for table in section.tables:
                out.print(rich_table(table))
    out.print("[dim]mean over repeats ± 95% t-interval half-width; bold red ±: noisy[/]")
    out.print(f"compare: {done.written.html}")
    out.print(f"         {done.written.markdown}")
