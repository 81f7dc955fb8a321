"""Controller side of the session agent: one ``serve`` process per host, many calls over it.

``AgentSession`` keeps ``<python> <agent.pyz> serve <tag>`` running over one channel, writes
request frames to its stdin (the spec inline: no SFTP write per call) and hands each request
the final line tagged with its id. When the process or the channel ends, every call still
waiting gets ``SessionLost`` with what the one-shot call would have raised (the connection's
error, or the process's exit without a result); ``Agent`` decides what follows (a one-shot
call for a verb that only reads, a new session for the next call).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Sequence
from typing import Any, Protocol

from orchestrator.errors import OrchError
from orchestrator.remote.wire import Wire, request_frame


def decode_line(line: str) -> dict[str, Any] | None:
    """One JSON-lines event, or None for a line that is not one (e.g. a login banner)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return (
        obj if isinstance(obj, dict) and isinstance(obj.get("event"), str) else None
    )  # the one line reader of both paths


class SessionStream(Protocol):
    """What a session needs of ``transport.RemoteStream``."""

    @property
    def returncode(self) -> int | None: ...
    @property
    def stderr(self) -> str: ...
    async def __aenter__(self) -> SessionStream: ...
    async def __aexit__(self, *exc_info: object) -> None: ...
    def __aiter__(self) -> Any: ...
    def write(self, text: str) -> None: ...
    async def finish(self, wait_s: float = ...) -> None: ...


class SessionLost(Exception):
    """The session ended before answering; ``error`` is what a one-shot call would raise
    (None: the process ended without a result: the caller words it as ``_no_result``)."""

    def __init__(self, error: OrchError | None, returncode: int | None, stderr: str) -> None:
        super().__init__(str(error) if error else f"session ended (status {returncode})")
        self.error = error
        self.returncode = returncode
        self.stderr = stderr
        self.noise: list[str] = []


class AgentSession:
    """One running ``serve`` agent; ``await start()``, ``await request(...)``, ``await close()``."""

    def __init__(self, stream: SessionStream, argv: Sequence[str], conn: object) -> None:
        self.argv = list(argv)
        self.conn = conn  # the connection it runs over: a new one means a new session
        self.answered = 0  # requests answered: a session that never answered cannot serve
        self._stream = stream
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._lost: SessionLost | None = None
        self._noise: list[str] = []

    @property
    def tag(self) -> str:
        """The argument unique to this session's process (what ``pgrep -f`` finds it by)."""
        return self.argv[-1]

    @property
    def alive(self) -> bool:
        return self._lost is None and not getattr(self.conn, "closed", False)

    async def start(self) -> None:
        await self._stream.__aenter__()
        self._reader = asyncio.ensure_future(self._read())

    async def request(self, verb: str, spec: Wire) -> dict[str, Any]:
        """Send one request; its final line (``result`` or ``error``), without the id.

        Raises SessionLost when the session ended first. Cancelling the wait forgets the
        request (its thread on the host runs on to its end, unread)."""
        if self._lost is not None:
            raise self._lost
        request_id = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        try:
            line = json.dumps(request_frame(request_id, verb, spec), ensure_ascii=True)
            self._stream.write(line + "\n")
            return await answer
        finally:
            self._pending.pop(request_id, None)

    async def close(self) -> None:
        """End the process (stdin EOF, a few seconds to exit, then SIGTERM) and the channel;
        idempotent. Waiting for the exit is what lets orch end with no agent of its own left
        on the host."""
        if self._reader is not None:
            with contextlib.suppress(OrchError, OSError):
                await self._stream.finish()
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
            self._reader = None
            with contextlib.suppress(OrchError, OSError):
                await self._stream.__aexit__(None, None, None)
        self._fail(self._lost or SessionLost(None, None, ""))

    async def _read(self) -> None:
        error: OrchError | None = None
        try:
            async for line in self._stream:
                obj = decode_line(line)
                if obj is None:
                    if line.strip():
                        self._noise.append(line)
                    continue
                request_id = obj.pop("id", None)
                answer = self._pending.get(request_id) if isinstance(request_id, int) else None
                if answer is None:
                    if obj.get("event") == "error":  # a frame the agent could not read: a bug
                        self._noise.append(line)
                    continue
                if obj.get("event") in ("result", "error") and not answer.done():
                    self.answered += 1
                    answer.set_result(obj)
        except OrchError as exc:
            error = exc
        lost = SessionLost(error, self._stream.returncode, self._stream.stderr)
        lost.noise = self._noise[-15:]
        self._fail(lost)

    def _fail(self, lost: SessionLost) -> None:
        self._lost = self._lost or lost
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(self._lost)


class SpareStream:
    """A load generator's process started ahead of its load point, waiting for its spec.

    Starting the agent and importing the load generator cost 0.2-0.4 s per load point. Started
    after the previous point (or the launch), ``<agent.pyz> loadgen -spare-<uuid>`` does that
    while the controller is busy elsewhere, then blocks reading its spec from stdin; the next
    ``loadgen`` call writes the spec there and reads the stream as usual. It stays a process of
    its own, so nothing shares its interpreter while it times requests, and an unused one ends
    at stdin EOF (its channel closed) with a ``bad_spec`` no one reads.
    """

    def __init__(self, stream: SessionStream, argv: Sequence[str], conn: object) -> None:
        self.argv = list(argv)
        self.conn = conn
        self.stream = stream

    @property
    def alive(self) -> bool:
        return self.stream.returncode is None and not getattr(self.conn, "closed", False)

    def fed(self, text: str) -> _Fed:
        """The stream, for ``async with``: entering sends the spec (one JSON line)."""
        return _Fed(self.stream, text)

    async def close(self) -> None:
        """An unused spare reads EOF as its spec and exits (``bad_spec``, unread)."""
        with contextlib.suppress(OrchError, OSError):
            await self.stream.finish()
        with contextlib.suppress(OrchError, OSError):
            await self.stream.__aexit__(None, None, None)


class _Fed:
    def __init__(self, stream: SessionStream, text: str) -> None:
        self._stream = stream
        self._text = text

    async def __aenter__(self) -> SessionStream:
        self._stream.write(self._text)
        return self._stream

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stream.__aexit__(*exc_info)
