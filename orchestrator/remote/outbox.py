"""The load generator's outbox: what a run emits is written after the requests due now went out.

Serialising and writing a finished record costs about 0.2 ms of CPU (its chunks walked, JSON,
the write). Done inline, a closed loop paid it between a response's end and the next send of
the same worker, so when a wave of 256 streams ended at once the last of them went out some
50 ms late: send lag of the client's own making, at every wave boundary. Here ``put`` only
queues the event; a task of its own writes the queue in slices of at most ``SLICE_S``, each
started after the callbacks already due (the sends of the same wave), so the writing waits
for an idle moment instead of the requests waiting for the writing.

Not a thread: a thread doing CPU work holds the GIL, and the event loop would wait for it
after every system call (a send, a read), up to the interpreter's switch interval each time.

Nothing is lost and the order is kept: events are written in the order they were put, and
``close`` writes the rest before the verb returns its result. Bounded: past ``LIMIT`` queued
events, ``put`` writes the oldest itself (the client is then behind its own writing, and the
send lag shows it). A failed write fails the run: the next ``put`` and ``close`` raise it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Deque, Optional

from .protocol import Emit
from .wire import Wire

SLICE_S = 0.002  # the longest the writing holds the event loop at a time
LIMIT = 4096  # events queued at most (a finished record: a few kB)


class Outbox:
    """Events written in order by a task of their own (see the module docstring)."""

    def __init__(self, emit: Emit, *, slice_s: float = SLICE_S, limit: int = LIMIT) -> None:
        self.emit, self.slice_s, self.limit = emit, slice_s, limit
        self.queue: Deque[Wire] = collections.deque()
        self.error: Optional[BaseException] = None
        self.task: Optional["asyncio.Future[None]"] = None
        self.wake: Optional[asyncio.Event] = None

    def start(self) -> None:
        """Start the writing task (in the running loop: Python 3.9 binds an Event to one)."""
        self.wake = asyncio.Event()
        self.task = asyncio.ensure_future(self._drain())

    def put(self, event: Wire) -> None:
        """Queue ``event``; raises the error of a write that failed before."""
        if self.error is not None:
            raise self.error
        self.queue.append(event)
        if len(self.queue) > self.limit:
            self._write(len(self.queue) - self.limit)
        if self.wake is None:  # not started (no loop): written at once
            self._write(len(self.queue))
        else:
            self.wake.set()

    def _write(self, count: int) -> None:
        """Write the ``count`` oldest events; a failure is kept (and raised) for the run."""
        try:
            for _ in range(count):
                self.emit(self.queue[0])
                self.queue.popleft()
        except BaseException as exc:
            self.error = exc
            raise

    async def _drain(self) -> None:
        assert self.wake is not None
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.queue:
                await asyncio.sleep(0)  # the callbacks due now (a wave's sends) go first
                deadline = time.perf_counter() + self.slice_s
                while self.queue and time.perf_counter() < deadline:
                    self._write(1)

    async def close(self) -> None:
        """Write what is left and stop; raises the error of a failed write."""
        await self._stop()
        if self.error is not None:
            raise self.error
        self._write(len(self.queue))

    async def abandon(self) -> None:
        """Stop on a run that failed: what is queued is still written, errors ignored (the
        run's own failure is the one to report)."""
        await self._stop()
        if self.error is None:
            with contextlib.suppress(Exception):  # the run already fails for another reason
                self._write(len(self.queue))

    async def _stop(self) -> None:
        task, self.task = self.task, None
        self.wake = None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
