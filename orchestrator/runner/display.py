"""What the console shows while a playbook runs: one row per run, updated live.

The pipeline only calls ``update()`` and ``note()``; on a terminal that drives a rich Live
table (host, run, phase, requests, live tok/s, latest acceptance length from the log), and
elsewhere (CI, `make demo | tee`) each phase change becomes one plain line, so progress is
never silent.
"""

from __future__ import annotations

import time
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


class Display:
    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.rows: dict[str, RunRow] = {}
        self.live_enabled = console.is_terminal if live is None else live
        self._live: Live | None = None

    def add(self, key: str, *, run: str, host: str, total: int | None) -> None:
        self.rows[key] = RunRow(run=run, host=host, total=total)

    def update(self, key: str, **changes: Any) -> None:
        row = self.rows[key]
        phase_changed = "phase" in changes and changes["phase"] != row.phase
        for name, value in changes.items():
            setattr(row, name, value)
        if phase_changed:
            row.since = time.monotonic()
            if not self.live_enabled:
                self.console.print(f"[bold]{escape(row.host)}[/] {escape(row.run)}: {escape(row.phase)}")
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
            elapsed = time.monotonic() - row.since
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
