"""``orch compare A B [C ...]``: the same figures of several results folders side by side, with the
relative difference of each to the first folder's, as a ``Document``.

Folders are lettered A, B, C ... in the order given; A is the baseline. A configuration is
matched across folders by its run name (and its host too when a folder ran that name on several
hosts), so the same playbook run on two machines or two days lines up. A row is shown for each
configuration and load point that at least two folders measured. The relative difference is
(other - A) / |A| of the means over repeats ("+4.1%"); when either side is noisy (its 95%
interval wider than its ``noisy_ci`` of its mean) the difference is marked noisy: it is within
the spread of the measurements and says nothing. Two sides measured on unlike workloads
(another model, other prompts, another max_tokens ...: ``results.likeness``) get no difference
at all: their figures stay side by side, the cell says "not compared" and names what differs,
and a table lists each such pair with the values.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from orchestrator import __version__
from orchestrator.metrics import catalogue
from orchestrator.results.document import Document, Figure, Section, Table, Value, figure_value
from orchestrator.results.likeness import Workload, differences, workload_of
from orchestrator.results.report_doc import TABLE_COLUMNS, Column, figure_cell, load_label
from orchestrator.results.setup_info import setup_section
from orchestrator.results.stats import aggregate

COMPARED = TABLE_COLUMNS  # the catalogue's table metrics; its direction colours a difference
FOLDERS, SIDE_BY_SIDE = "Folders", "Figures side by side"  # section headings the CLI prints
ROW_KEYS = ("match", "load_kind", "load_value")


def relative_difference(base: float | None, other: float | None) -> float | None:
    """(other - base) / |base|; None when either is unknown or the base is 0."""
    if base is None or other is None or not (math.isfinite(base) and math.isfinite(other)):
        return None
    if base == 0:
        return None
    return (other - base) / abs(base)


def relative_text(diff: float | None) -> str:
    """ "+4.1%", "-12.0%", "-" when unknown."""
    return "-" if diff is None else f"{diff * 100:+.1f}%"


def letters(count: int) -> list[str]:
    """A, B, ... Z, then A2, B2 ...: the folders' names in tables."""
    return [
        string.ascii_uppercase[i % 26] + (str(i // 26 + 1) if i >= 26 else "") for i in range(count)
    ]


def match_labels(frame: pd.DataFrame) -> pd.Series:
    """Per row, what identifies its configuration across folders: the run name, or name@host
    when the folder ran that name on several hosts."""
    hosts = frame.groupby(["results_dir", "run"])["host"].transform("nunique")
    return frame["run"].where(hosts <= 1, frame["key"])


@dataclass(frozen=True)
class Side:
    """One folder's aggregated figures, indexed by (match, load_kind, load_value)."""

    letter: str
    folder: str
    points: dict[tuple[object, ...], pd.Series]
    workloads: dict[tuple[object, ...], Workload] = field(default_factory=dict)

    def unlike(self, base: Side, key: tuple[object, ...]) -> list[str]:
        """What differs between this side's workload at ``key`` and ``base``'s."""
        mine, theirs = self.workloads.get(key), base.workloads.get(key)
        return differences(theirs, mine) if mine is not None and theirs is not None else []


def sides(frame: pd.DataFrame, folders: Sequence[str]) -> list[Side]:
    framed = frame.assign(match=match_labels(frame))
    metrics = tuple(c.metric for c in COMPARED)
    found = []
    for letter, folder in zip(letters(len(folders)), folders, strict=True):
        rows = framed[framed["results_dir"] == folder]
        agg = aggregate(rows, metrics).merge(
            rows[["key", "match"]].drop_duplicates(), on="key", how="left"
        )
        points = {tuple(p[k] for k in ROW_KEYS): p for _, p in agg.iterrows()}
        workloads: dict[tuple[object, ...], Workload] = {}
        for row in rows.to_dict("records"):
            workloads.setdefault(tuple(row[k] for k in ROW_KEYS), workload_of(row))
        found.append(Side(letter, folder, points, workloads))
    return found


def shared_rows(found: Sequence[Side]) -> list[tuple[object, ...]]:
    """(match, load_kind, load_value) measured by two folders or more, in the order they come."""
    order: dict[tuple[object, ...], int] = {}
    for side in found:
        for key in side.points:
            order[key] = order.get(key, 0) + 1
    return [k for k, n in order.items() if n >= 2]


def diff_value(column: Column, base: pd.Series | None, other: pd.Series | None) -> Value:
    if base is None or other is None:
        return Value("-")
    mean = f"{column.metric}_mean"
    diff = relative_difference(_float(base[mean]), _float(other[mean]))
    noisy = bool(base[f"{column.metric}_noisy"]) or bool(other[f"{column.metric}_noisy"])
    tone = "plain"
    better = catalogue.get(column.metric).better(diff) if diff is not None else None
    if better is not None and not noisy:
        tone = "good" if better else "bad"
    text = relative_text(diff) + (" (noisy)" if noisy and diff is not None else "")
    return Value(text, tone="muted" if noisy else tone)  # type: ignore[arg-type]


def _float(value: object) -> float | None:
    if value is None or value is pd.NA:
        return None
    x = float(value)  # type: ignore[arg-type]
    return None if math.isnan(x) else x


def compare_table(
    column: Column, found: Sequence[Side], keys: Sequence[tuple[object, ...]]
) -> Table:
    base = found[0]
    headers = ["configuration", "load", base.letter]
    for side in found[1:]:
        headers += [side.letter, f"{side.letter} vs {base.letter}"]
    rows = []
    for key in keys:
        match, kind, value = key
        first = next(s.points[key] for s in found if key in s.points)
        line = [Value(str(match)), Value(load_label(kind, value, first["origin"]))]
        line.append(_cell(column, base.points.get(key)))
        for side in found[1:]:
            unlike = side.unlike(base, key)
            diff = diff_value(column, base.points.get(key), side.points.get(key))
            if unlike:
                names = ", ".join(d.split(" ", 1)[0] for d in unlike)
                diff = Value(f"not compared: {names} differ", tone="muted")
            line += [_cell(column, side.points.get(key)), diff]
        rows.append(tuple(line))
    return Table(f"{column.header}", tuple(headers), tuple(rows))


UNLIKE_TITLE = "Not compared: unlike workloads"


def unlike_table(found: Sequence[Side], keys: Sequence[tuple[object, ...]]) -> Table | None:
    """Each pair of a folder with A measured on unlike workloads, and what differs (A first)."""
    base, rows = found[0], []
    for key in keys:
        match, kind, value = key
        for side in found[1:]:
            unlike = side.unlike(base, key)
            if unlike:
                origin = side.points[key]["origin"] if key in side.points else None
                rows.append(
                    (
                        Value(str(match)),
                        Value(load_label(kind, value, origin)),
                        Value(f"{side.letter} vs {base.letter}"),
                        Value("; ".join(unlike)),
                    )
                )
    if not rows:
        return None
    columns = ("configuration", "load", "folders", f"what differs ({base.letter} first)")
    return Table(UNLIKE_TITLE, columns, tuple(rows))


def _cell(column: Column, point: pd.Series | None) -> Value:
    if point is None:
        return figure_value(None, None, noisy=False, spec=column.spec)
    return figure_cell(point, column)


def compare_tables(frame: pd.DataFrame, folders: Sequence[str]) -> list[Table]:
    """A table per compared figure with a row per configuration and load point two folders or
    more measured; figures no folder measured are left out."""
    found = sides(frame, folders)
    keys = shared_rows(found)
    tables = []
    for column in COMPARED:
        if frame[column.metric].notna().any():
            tables.append(compare_table(column, found, keys))
    unlike = unlike_table(found, keys)
    return tables if unlike is None else [unlike, *tables]


def build_compare(
    frame: pd.DataFrame,
    folders: Sequence[str],
    figures: Sequence[Figure],
    plot_notes: Sequence[str] = (),
) -> Document:
    """The comparison of ``folders`` (results_dir values of ``frame``, A first)."""
    names = letters(len(folders))
    legend = tuple(zip(names, folders, strict=True))
    tables = compare_tables(frame, folders)
    figures_tables = [t for t in tables if t.title != UNLIKE_TITLE]
    shared = len(figures_tables[0].rows) if figures_tables else 0
    intro = (
        f"{shared} configuration × load point pair(s) measured in two folders or more. Each cell "
        "is the mean over repeats ± its 95% t-interval half-width; 'B vs A' is (B - A) / |A|; "
        "green: better, red: worse (throughput up, latency down); a difference next to a noisy "
        "figure is marked noisy and not coloured. Figures measured on unlike workloads (another "
        "model, prompts, max_tokens, ...) are never compared: their difference reads 'not "
        "compared' and the table of unlike workloads says what differs."
    )
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [
        Section(FOLDERS, facts=legend),
        Section(SIDE_BY_SIDE, paragraphs=(intro,), tables=tuple(tables)),
    ]
    if figures or plot_notes:
        why = ("Every folder's curves overlaid; folders are told apart by line style.",)
        sections.append(Section("Plots", why, figures=tuple(figures), notes=tuple(plot_notes)))
    for letter, folder in zip(names, folders, strict=True):
        sections.append(
            setup_section(
                frame[frame["results_dir"] == folder], f"Setup of {letter}: {Path(folder).name}"
            )
        )
    return Document(
        f"orch compare: {' vs '.join(names)}",
        f"{len(folders)} results folders · written by orch {__version__} on {generated}",
        tuple(sections),
    )
