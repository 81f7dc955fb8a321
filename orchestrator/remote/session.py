"""The session agent: ``<agent.pyz> serve <tag>``, many verbs over one process and channel.

Starting a process per call (Python's start, importing the contract, a channel, an SFTP write
of the spec) cost 0.1-0.3 s each, about ten times for a first run. A session reads request
frames on stdin, one JSON line each: ``{"id": 7, "verb": "status", "spec": {"v": 1, ...}}``
(the spec as a spec file holds it, secrets included: stdin, never argv or a file), and answers
each with the very lines a one-shot call writes, each with the request's ``"id"`` in front.
Requests run concurrently, one thread each, so a slow ``stop`` does not hold up a ``status``.
Only verbs the contract marks ``session`` are served here; the others are refused
(``bad_usage``), since first contact and the long-lived streams stay one process per call.

It ends when stdin reaches EOF (the controller closed the session or went away): the threads
still running are abandoned with the process, as a one-shot call's process would be. The
``tag`` argument is not read: it is unique per session, so the controller can find this
process on the host (``pgrep -f``) when a request hangs.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import json
import threading
from typing import IO, Any, Dict, Optional

from .dispatch import checked_version, dispatch
from .protocol import AgentFailure, write_event
from .wire import CONTRACT, ErrorEvent, ErrorKind, error_line


class TaggedOut:
    """A protocol stream for one request: each line gets the request's id, written whole."""

    def __init__(self, out: Any, lock: threading.Lock, request_id: int) -> None:
        self._out = out
        self._lock = lock
        self._prefix = '{"id":%d,' % request_id

    def write(self, text: str) -> None:
        if not text.startswith("{"):  # write_event writes one compact object per call
            raise ValueError(f"not a protocol line: {text[:40]!r}")
        with self._lock:
            self._out.write(self._prefix + text[1:])
            self._out.flush()

    def flush(self) -> None:
        """Every write is flushed already (under the lock, so lines never interleave)."""


def serve(stdin: IO[bytes], out: Any) -> int:
    """Answer request frames from ``stdin`` until EOF; the exit status (0)."""
    lock = threading.Lock()
    for raw in iter(stdin.readline, b""):
        if not raw.strip():
            continue
        request_id, verb, spec, failure = read_frame(raw)
        if request_id is None:
            with lock:
                write_event(error_line(_frame_error(failure)), out)
            continue
        tagged = TaggedOut(out, lock, request_id)
        thread = threading.Thread(
            target=dispatch,
            args=(verb, spec, failure, tagged),
            name=f"request-{request_id}-{verb}",
            daemon=True,
        )
        thread.start()
    return 0


def read_frame(raw: bytes) -> tuple[Optional[int], str, Dict[str, Any], Optional[AgentFailure]]:
    """(id, verb, spec without "v", the failure to answer instead); id None: not a frame."""
    try:
        frame = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, "", {}, AgentFailure(ErrorKind.BAD_SPEC, f"a request frame is not JSON: {exc}")
    request_id = frame.get("id") if isinstance(frame, dict) else None
    if not isinstance(request_id, int) or isinstance(request_id, bool):
        return None, "", {}, AgentFailure(ErrorKind.BAD_SPEC, "a request frame has no integer id")
    verb, spec = frame.get("verb"), frame.get("spec")
    if not isinstance(verb, str) or not isinstance(spec, dict):
        failure = AgentFailure(ErrorKind.BAD_SPEC, "a request frame needs a verb and a spec object")
        return request_id, str(verb), {}, failure
    contract = CONTRACT.get(verb)
    if contract is not None and not contract.session:
        failure = AgentFailure(
            ErrorKind.BAD_USAGE,
            f"verb {verb!r} is not served in a session: run it as its own process",
            {"verb": verb},
        )
        return request_id, verb, {}, failure
    try:
        return request_id, verb, checked_version(spec), None
    except AgentFailure as failure:
        return request_id, verb, {}, failure


def _frame_error(failure: Optional[AgentFailure]) -> ErrorEvent:
    assert failure is not None
    return ErrorEvent(failure.kind, failure.message, failure.details)
