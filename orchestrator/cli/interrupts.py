"""Where `orch run` hears "stop": the process's signals for the CLI, or an object a test (or a
program embedding orch) calls, so a run can go in-process without touching the process's
signal state.

The CLI passes nothing and gets :class:`SignalInterrupts`. In-process callers pass their own
to ``orchestrator.cli.main.run(argv, interrupts=...)`` (it reaches every command that runs a
playbook through a context variable) or to ``orchestrator.cli.run.launch(..., interrupts=...)``.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncio costs `orch --help` tens of ms; only the run's loop needs it
    import asyncio

# Ctrl-C, `kill`, a closed terminal or SSH session: all stop a run the same way.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Deliver = Callable[[signal.Signals], object]


class Interrupts:
    """Where a run's stop requests come from. ``install`` is called once, on the run's event
    loop, with ``deliver``: calling it with a signal stops the run as that signal would
    (the first cancels the run, whose clean-up stops its servers; later ones start the
    clean-up's grace period). The loop's close ends the subscription."""

    def install(self, loop: asyncio.AbstractEventLoop, deliver: Deliver) -> None:
        raise NotImplementedError


class SignalInterrupts(Interrupts):
    """The CLI's: SIGINT, SIGTERM and SIGHUP through the loop's signal handlers, which stay
    until ``asyncio.run`` closes the loop (a signal during its shutdown must not raise
    KeyboardInterrupt there either)."""

    def install(self, loop: asyncio.AbstractEventLoop, deliver: Deliver) -> None:
        for sig in STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, deliver, sig)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, Windows
                continue


class ManualInterrupts(Interrupts):
    """Stop requests delivered by calling :meth:`interrupt`, from any thread (or from the
    run's own loop, e.g. a progress observer): no process signal is involved."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deliver: Deliver | None = None
        self.pending: list[signal.Signals] = []

    @property
    def installed(self) -> bool:
        return self._deliver is not None

    def install(self, loop: asyncio.AbstractEventLoop, deliver: Deliver) -> None:
        self._loop, self._deliver = loop, deliver
        for sig in self.pending:  # asked before the run got going: delivered at once
            loop.call_soon(deliver, sig)
        self.pending.clear()

    def interrupt(self, sig: signal.Signals = signal.SIGINT) -> None:
        """Stop the run as ``sig`` would; before the run installs, kept until it does."""
        if self._loop is None or self._deliver is None:
            self.pending.append(sig)
            return
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._deliver, sig)


_GIVEN: ContextVar[Interrupts | None] = ContextVar("orch_interrupts", default=None)


@contextlib.contextmanager
def given(interrupts: Interrupts | None) -> Iterator[None]:
    """Commands run inside take their stop requests from ``interrupts`` (None: the signals)."""
    token = _GIVEN.set(interrupts)
    try:
        yield
    finally:
        _GIVEN.reset(token)


def from_context() -> Interrupts:
    """The interrupts the running command was given (``main.run(..., interrupts=...)``), else
    the process's signals."""
    found = _GIVEN.get()
    return found if found is not None else SignalInterrupts()
