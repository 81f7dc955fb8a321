"""What the console shows while a playbook runs: one row per run, updated live.

``Display`` is the CLI's ``Observer`` (``runner/progress.py``): the runner tells it typed events
and all the text and markup is made here. On a terminal it drives a rich Live table (host, run,
phase, requests, live tok/s, latest acceptance length from the log). Elsewhere (CI,
`make demo | tee`) a redrawn table would be garbage, so each phase change becomes one plain line,
and while a run is measuring a compact progress line (requests done/total, live tok/s, latest
acceptance length) follows at most every ``progress_every_s`` per run: a long run is never
silent, and a log is never flooded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from orchestrator.runner.progress import (
    Connecting,
    DoctorNotice,
    ExecutionEnded,
    ExecutionStarted,
    LatestAcceptance,
    LiveThroughput,
    PhaseChanged,
    PointDone,
    PointStarted,
    RequestsDone,
    RunAdded,
    RunEvent,
    RunPhase,
    ServerLeftRunning,
    StoppingServers,
)

REASON_CHARS = 60  # of a failure's message, in the phase column
RUN_PREFIX = re.compile(r"^\w+ server of run '[^']*':? ")  # "vllm server of run 'r' died"
NUMBER_CHARS = 24  # a word with a digit up to this long is never cut (a pid, a port, a time)


@dataclass
class RunRow:
    run: str
    host: str
    phase: RunPhase = RunPhase.WAITING
    reason: str | None = None
    done: int = 0
    failed: int = 0
    total: int | None = None
    tok_s: float | None = None
    acceptance: float | None = None
    gpu: str | None = None  # the GPUs' newest read: "412 W 1740 MHz"
    since: float = field(default_factory=time.monotonic)
    last_progress: float = 0.0  # when the last plain progress line was printed
    point: str | None = None  # the sweep point under way ("c=8 #2")

    @property
    def phase_text(self) -> str:
        text = phase_text(self.phase, self.reason)
        return f"{text} ({self.point})" if self.point and self.phase.under_way else text


@dataclass
class HostProgress:
    """A host's measurements: done of total over all its runs, and when the first began."""

    total: int = 0
    done: int = 0
    first_at: float | None = None
    done_at_first: int = 0  # measurements an earlier session kept, not timed here

    def left_s(self, now: float) -> float | None:
        """Time left at the pace of the measurements made so far (None before one ended)."""
        made = self.done - self.done_at_first
        if self.first_at is None or made <= 0:
            return None
        return (now - self.first_at) / made * max(0, self.total - self.done)


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = 0 if total <= 0 else min(width, round(width * done / total))
    return "#" * filled + "-" * (width - filled)


def duration_text(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def host_line(host: str, progress: HostProgress, now: float) -> str:
    """``sim-a6000-1 [########------------] 7/20 points, ~1m20s left``"""
    left = progress.left_s(now)
    tail = "" if left is None else f", ~{duration_text(left)} left"
    bar = progress_bar(progress.done, progress.total)
    return f"{host} [{bar}] {progress.done}/{progress.total} points{tail}"


def phase_text(phase: RunPhase, reason: str | None) -> str:
    """How a phase reads: a failure with its reason, loading with the server's readiness."""
    if phase is RunPhase.FAILED and reason:
        # the row names the run already: its room goes to what happened
        return f"failed: {short_reason(RUN_PREFIX.sub('', reason))}"
    if phase is RunPhase.COLLAPSE:
        return "done: COLLAPSE"
    if phase is RunPhase.QUEUED and reason:
        return f"queued: {reason}"
    if phase is RunPhase.LOADING and reason:
        return reason
    return str(phase.value)


def short_reason(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to about ``limit`` characters between words: a pid or port cut short
    reads as another (``pid 332`` for 3322). A number (a word with a digit, up to
    ``NUMBER_CHARS``) begun before the limit is kept whole, and so is one named by the word
    the limit falls in (``pid 3322``); only prose is dropped, which the results table and
    summary.json carry in full. A first word longer than the limit is cut, marked by "…".
    """
    if len(text) <= limit:
        return text
    words = text.split(" ")
    kept: list[str] = []
    used = 0  # characters of the kept words, a space after each
    for i, word in enumerate(words):
        if used + len(word) > limit:
            after = words[i + 1] if i + 1 < len(words) else ""
            if used < limit and _number(word):
                kept.append(word)  # begun before the limit: whole
            elif used < limit and _number(after) and len(word) <= NUMBER_CHARS:
                kept += [word, after]  # "pid" keeps its "3322"
            break
        kept.append(word)
        used += len(word) + 1
    if not kept:
        return text[:limit] + "…"
    return " ".join(kept) + ("" if len(kept) == len(words) else " …")


def _number(word: str) -> bool:
    return 0 < len(word) <= NUMBER_CHARS and any(c.isdigit() for c in word)


def progress_line(row: RunRow) -> str:
    """The plain (off-terminal) progress line of a run that is measuring."""
    total = "?" if row.total is None else str(row.total)
    parts = [f"{row.done}/{total} requests" + (f" ({row.failed} failed)" if row.failed else "")]
    parts.append("- tok/s" if row.tok_s is None else f"{row.tok_s:.1f} tok/s")
    parts.append("accept len -" if row.acceptance is None else f"accept len {row.acceptance:.2f}")
    if row.gpu:
        parts.append(f"GPUs {row.gpu}")
    return f"{row.host} {row.run}: {RunPhase.MEASURING.value}: " + ", ".join(parts)


def gpu_text(power_w: float | None, sm_mhz: float | None) -> str | None:
    """The GPUs' newest read as the live line shows it: ``412 W 1740 MHz``; None if unknown."""
    parts = [f"{power_w:.0f} W"] if power_w is not None else []
    parts += [f"{sm_mhz:.0f} MHz"] if sm_mhz is not None else []
    return " ".join(parts) or None


def doctor_line(notice: DoctorNotice) -> str:
    """A doctor finding on a run that launches anyway, in one line (its first sentence)."""
    f = notice.finding
    tail = (
        "warning" if notice.overridden_by is None else f"launching anyway: {notice.overridden_by}"
    )
    return (
        f"[yellow]doctor {f.severity}[/] {escape(notice.run)} on {escape(notice.host)}: "
        f"{escape(f'[{f.check}]')} {escape(f.message.split('. ')[0])} ({escape(tail)})"
    )


class Display:
    def __init__(
        self,
        console: Console,
        *,
        live: bool | None = None,
        progress_every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.rows: dict[str, RunRow] = {}
        self.hosts: dict[str, HostProgress] = {}
        self.live_enabled = console.is_terminal if live is None else live
        self.progress_every_s = progress_every_s
        self.clock = clock
        self._live: Live | None = None

    def on_event(self, event: RunEvent) -> None:
        if isinstance(event, RunAdded):
            self.rows[event.key] = RunRow(
                run=event.run, host=event.host, total=event.total, since=self.clock()
            )
            host = self.hosts.setdefault(event.host, HostProgress())
            host.total += event.points
            host.done += event.kept
            host.done_at_first += event.kept
        elif isinstance(event, PointStarted):
            self._point(event)
        elif isinstance(event, PointDone):
            self.hosts.setdefault(event.host, HostProgress()).done += 1
            self.refresh()
        elif isinstance(event, PhaseChanged):
            self._phase(self.rows[event.key], event.phase, event.reason)
        elif isinstance(event, RequestsDone):
            row = self.rows[event.key]
            row.done, row.failed = event.done, event.failed
            self._figures_changed(row)
        elif isinstance(event, LiveThroughput):
            self.rows[event.key].tok_s = event.tok_s
            self.rows[event.key].gpu = gpu_text(event.gpu_power_w, event.gpu_sm_mhz)
            self._figures_changed(self.rows[event.key])
        elif isinstance(event, LatestAcceptance):
            self.rows[event.key].acceptance = event.length
            self._figures_changed(self.rows[event.key])
        elif isinstance(event, Connecting):
            self.console.print(f"connecting to {event.hosts} host(s) ...")
        elif isinstance(event, DoctorNotice):
            self.console.print(doctor_line(event))
        elif isinstance(event, ExecutionStarted):
            self.open()
        elif isinstance(event, ExecutionEnded):
            self.close()
        elif isinstance(event, StoppingServers):
            many = "server" if event.count == 1 else "servers"
            self.console.print(
                f"stopping {event.count} {many} on {escape(event.host)} "
                f"(SIGTERM, up to {event.timeout_s:g} s) ..."
            )
        elif isinstance(event, ServerLeftRunning):
            self.console.print(f"[bold red]{escape(event.host)}:[/] {escape(event.message)}")
            if event.hint:
                self.console.print(f"  {escape(event.hint)}", soft_wrap=True)

    def _point(self, event: PointStarted) -> None:
        row = self.rows[event.key]
        row.point, row.done, row.failed, row.tok_s = event.label, 0, 0, None
        host = self.hosts.setdefault(event.host, HostProgress())
        now = self.clock()
        if host.first_at is None:
            host.first_at = now
        host.total = max(host.total, host.done + event.total - event.done)
        if not self.live_enabled and host.total > 1:
            self.console.print(
                f"[bold]{escape(row.host)}[/] {escape(row.run)}: {escape(event.label)} "
                f"({escape(host_line(event.host, host, now))})",
                highlight=False,
            )
        self.refresh()

    def _phase(self, row: RunRow, phase: RunPhase, reason: str | None) -> None:
        if (phase, reason) == (row.phase, row.reason):
            self.refresh()
            return
        row.phase, row.reason = phase, reason
        row.since = row.last_progress = self.clock()
        if not self.live_enabled:
            self.console.print(
                f"[bold]{escape(row.host)}[/] {escape(row.run)}: {escape(row.phase_text)}"
            )
        self.refresh()

    def _figures_changed(self, row: RunRow) -> None:
        now = self.clock()
        if (
            not self.live_enabled
            and row.phase is RunPhase.MEASURING
            and now - row.last_progress >= self.progress_every_s
        ):
            row.last_progress = now
            self.console.print(escape(progress_line(row)), highlight=False)
        self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.renderable())

    def renderable(self) -> RenderableType:
        """The runs' table, then a progress bar per host when a host has a sweep."""
        if not any(h.total > 1 for h in self.hosts.values()):
            return self.table()
        now = self.clock()
        lines = [escape(host_line(name, h, now)) for name, h in self.hosts.items()]
        return Group(self.table(), *lines)

    def table(self) -> Table:
        table = Table(box=None, pad_edge=False)
        gpus = any(row.gpu for row in self.rows.values())
        for col in ("host", "run", "phase", "requests", "tok/s", "accept len", "GPUs")[
            : 7 if gpus else 6
        ]:
            table.add_column(col)
        for row in self.rows.values():
            elapsed = self.clock() - row.since
            total = "?" if row.total is None else str(row.total)
            requests = f"{row.done}/{total}" + (
                f" ([red]{row.failed} failed[/])" if row.failed else ""
            )
            table.add_row(
                escape(row.host),
                escape(row.run),
                f"{escape(row.phase_text)} [dim]{elapsed:.0f}s[/]",
                requests,
                "-" if row.tok_s is None else f"{row.tok_s:.1f}",
                "-" if row.acceptance is None else f"{row.acceptance:.2f}",
                *((row.gpu or "-",) if gpus else ()),
            )
        return table

    def open(self) -> None:
        """Start the live table (on a terminal)."""
        if self.live_enabled and self._live is None:
            self._live = Live(
                self.renderable(), console=self.console, refresh_per_second=4, transient=False
            )
            self._live.__enter__()

    def close(self) -> None:
        """Stop the live table, leaving its last state on screen (and the cursor visible)."""
        if self._live is not None:
            self._live.update(self.renderable())
            self._live.__exit__(None, None, None)
            self._live = None

    def __enter__(self) -> Display:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
