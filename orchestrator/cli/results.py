"""`orch results [DIR ...]`: the results DataFrame (``orchestrator.results.load``) on the terminal,
or every column of it as CSV for a spreadsheet or a script."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.common import out
from orchestrator.metrics import catalogue

if TYPE_CHECKING:  # pandas takes a second to import: only `orch results` pays for it
    import pandas as pd

RESULTS_ROOT = Path("results")

# (column, header, format) of the default table: who and what, then the catalogue's table
# metrics; the frame has every other column too
KEY_COLUMNS = (
    ("run", "run", ""),
    ("host", "host", ""),
    ("config", "config", ""),
    ("load", "load", ""),
    ("repeat", "#", ""),
    ("verdict", "verdict", ""),
    *((m.name, m.header, m.spec) for m in catalogue.TABLE),
    ("slo_met", "SLO", ""),
)


def cell_text(value: object, spec: str = "") -> str:
    """A frame value for the table: "-" when unknown, floats fixed-point."""
    if value is None or type(value).__name__ == "NAType":  # pandas.NA
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if spec:
            return format(value, spec)
        return f"{value:.4f}".rstrip("0").rstrip(".") or "0"  # fixed point, never an exponent
    if isinstance(value, list):
        return ", ".join(cell_text(v, ".2f") for v in value)
    return str(value)


def load_text(kind: object, value: object) -> str:
    if not isinstance(value, float) or math.isnan(value):
        return "-"
    return f"c={value:g}" if kind == "concurrency" else f"rate={value:g}"


def _row_text(row: pd.Series, column: str, spec: str = "") -> str:
    value = row[column]
    return cell_text(value.item() if hasattr(value, "item") else value, spec)


def frame_table(frame: pd.DataFrame) -> Table:
    """The key columns, a row per measurement (the folder's name too when there are several)."""
    several = frame["results_dir"].nunique() > 1
    columns = [*((("results_dir", "results", ""),) if several else ()), *KEY_COLUMNS]
    table = Table(box=box.SIMPLE_HEAD)
    for _, header, _spec in columns:
        table.add_column(escape(header), no_wrap=header in ("run", "host", "config", "load"))
    for _, row in frame.iterrows():
        cells = []
        for column, _, spec in columns:
            if column == "load":
                text = load_text(row["load_kind"], row["load_value"])
            elif column == "results_dir":
                text = Path(row[column]).name
            else:
                text = _row_text(row, column, spec)
            cells.append(escape(text))
        table.add_row(*cells)
    return table


def frame_records(frame: pd.DataFrame) -> list[Table]:
    """Every column, one block per measurement (column, value): 57 columns side by side would
    not fit a terminal."""
    blocks = []
    for _, row in frame.iterrows():
        load = load_text(row["load_kind"], row["load_value"])
        title = f"{row['run']} on {row['host']} · {load} #{_row_text(row, 'repeat')}"
        block = Table(title=escape(title), title_justify="left", box=box.SIMPLE, show_header=False)
        block.add_column("column", style="bold", no_wrap=True)
        block.add_column("value")
        for column in frame.columns:
            block.add_row(escape(column), escape(_row_text(row, column)))
        blocks.append(block)
    return blocks


def results_command(
    results_dirs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Results folders (or a folder holding several); default: the newest under "
            "./results.",
            show_default=False,
            metavar="RESULTS_DIR",
        ),
    ] = None,
    as_csv: Annotated[
        bool, typer.Option("--csv", help="Every column as CSV on stdout (one row a measurement).")
    ] = False,
    all_columns: Annotated[
        bool,
        typer.Option(
            "--all-columns", help="Show every column (a block per measurement), not the key ones."
        ),
    ] = False,
) -> None:
    """Print the results as data: one row per measurement (run x load point x repeat), the
    DataFrame `orchestrator.results.load()` returns in Python."""
    from orchestrator.results.frame import load, newest_results_folder

    dirs = results_dirs or [newest_results_folder(RESULTS_ROOT)]
    frame = load(dirs)
    if as_csv:
        frame.to_csv(sys.stdout, index=False, lineterminator="\n")
        sys.stdout.flush()
        return
    for table in frame_records(frame) if all_columns else [frame_table(frame)]:
        out.print(table)
    out.print(
        f"[dim]{len(frame)} measurements; every column: --all-columns or --csv; in Python: "
        "orchestrator.results.load(path)[/]"
    )
