"""What the console shows while a playbook runs: one row per run, updated live.

The pipeline only calls ``update()`` and ``note()``; on a terminal that drives a rich Live
table (host, run, phase, requests, live tok/s, latest acceptance length from the log). Elsewhere
(CI, `make demo | tee`) a redrawn table would be garbage, so each phase change becomes one plain
line, and while a run is measuring a compact progress line (requests done/total, live tok/s,
latest acceptance length) follows at most every ``progress_every_s`` per run: a long run is
never silent, and a log is never flooded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table


@dataclass
class RunRow:
    run: str
    host: str
    phase: str = "waiting"
    done: int = 0
    failed: int = 0
    total: int | None = None
    tok_s: float | None = None
    acceptance: float | None = None
    since: float = field(default_factory=time.monotonic)
    last_progress: float = 0.0  # when the last plain progress line was printed


MEASURING = "measuring"


def progress_line(row: RunRow) -> str:
    """The plain (off-terminal) progress line of a run that is measuring."""
    total = "?" if row.total is None else str(row.total)
    parts = [f"{row.done}/{total} requests" + (f" ({row.failed} failed)" if row.failed else "")]
    parts.append("- tok/s" if row.tok_s is None else f"{row.tok_s:.1f} tok/s")
    parts.append("accept len -" if row.acceptance is None else f"accept len {row.acceptance:.2f}")
    return f"{row.host} {row.run}: {MEASURING}: " + ", ".join(parts)


class Display:
    def __init__(self, console: Console, *, live: bool | None = None,
                 progress_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.rows: dict[str, RunRow] = {}
        self.live_enabled = console.is_terminal if live is None else live
        self.progress_every_s = progress_every_s
        self.clock = clock
        self._live: Live | None = None

    def add(self, key: str, *, run: str, host: str, total: int | None) -> None:
        self.rows[key] = RunRow(run=run, host=host, total=total, since=self.clock())

    def update(self, key: str, **changes: Any) -> None:
        row = self.rows[key]
        phase_changed = "phase" in changes and changes["phase"] != row.phase
        for name, value in changes.items():
            setattr(row, name, value)
        now = self.clock()
        if phase_changed:
            row.since = row.last_progress = now
            if not self.live_enabled:
                self.console.print(f"[bold]{escape(row.host)}[/] {escape(row.run)}: {escape(row.phase)}")
        elif (not self.live_enabled and row.phase == MEASURING
              and now - row.last_progress >= self.progress_every_s):
            row.last_progress = now
            self.console.print(escape(progress_line(row)), highlight=False)
        self.refresh()

    def note(self, message: str) -> None:
        self.console.print(message)

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.table())

    def table(self) -> Table:
        table = Table(box=None, pad_edge=False)
        for col in ("host", "run", "phase", "requests", "tok/s", "accept len"):
            table.add_column(col)
        for row in self.rows.values():
            elapsed = self.clock() - row.since
            total = "?" if row.total is None else str(row.total)
            requests = f"{row.done}/{total}" + (f" ([red]{row.failed} failed[/])" if row.failed else "")
            table.add_row(
                escape(row.host),
                escape(row.run),
                f"{escape(row.phase)} [dim]{elapsed:.0f}s[/]",
                requests,
                "-" if row.tok_s is None else f"{row.tok_s:.1f}",
                "-" if row.acceptance is None else f"{row.acceptance:.2f}",
            )
        return table

    def __enter__(self) -> Display:
        if self.live_enabled:
            self._live = Live(self.table(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self.table())
            self._live.__exit__(None, None, None)
            self._live = None
