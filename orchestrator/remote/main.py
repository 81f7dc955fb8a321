"""Entry point of the agent: ``<agent.pyz> <verb> <spec.json>`` -> JSON lines on stdout.

The verb is run by ``dispatch`` (which the session agent shares: it looks verbs up, refuses a
spec of another contract version, writes the result or error line). The spec file is deleted as
soon as it is read because it may hold secrets (tokens in engine environments), unless it says
``"keep_spec": true``. What the lines and the spec hold is the contract in ``wire``.

A spec path of ``-`` means the spec is the first line of stdin: the controller's fallback when
the host's disk is full and no spec file can be written (still never on a command line). So
does ``-<tag>`` (the tag unique per process, for ``pgrep -f``): a spare load generator started
ahead of its load point, which imports its verb's module while it waits for the spec.

The long-running verbs (``WATCHED``) end when their controller goes away: the controller keeps
the command's stdin open, so when stdin reaches EOF (the SSH channel closed, the controller was
interrupted or lost its connection) a watcher thread interrupts the verb (SIGINT to this
process: the load generator's asyncio tasks are cancelled, closing its in-flight requests), and
exits it outright if it has not ended ``EXIT_GRACE_S`` later. sshd does not forward signals for
every login (root's, for one), and a closed channel alone only ends a verb on its next write, so
without this a load generator would keep an engine busy after Ctrl-C.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import stat
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .dispatch import checked_version, dispatch, resolve, write_failure, write_internal
from .protocol import AgentFailure
from .wire import SERVE_VERB, ErrorKind

USAGE = "usage: agent.pyz <verb> <spec.json | ->"
STDIN_SPEC = "-"
WATCHED = ("tail", "loadgen")
EXIT_GRACE_S = 10.0


def load_spec(path: str) -> Dict[str, Any]:
    """Read the spec (a JSON object) and delete its file unless it asks to be kept.

    ``-``: the spec is stdin's first line (nothing to delete)."""
    try:
        if from_stdin(path):
            raw = sys.stdin.buffer.readline()
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except OSError as exc:
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"cannot read spec file {path}: {exc.strerror}", {"path": path}
        ) from exc
    try:
        spec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        if not from_stdin(path):
            _remove(path)
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"spec file {path} is not valid JSON: {exc}", {"path": path}
        ) from exc
    if not isinstance(spec, dict):
        if not from_stdin(path):
            _remove(path)
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            f"spec file {path} holds a {type(spec).__name__}, not an object",
            {"path": path},
        )
    if spec.pop("keep_spec", None) is not True and not from_stdin(path):
        _remove(path)
    return checked_version(spec)


def from_stdin(path: str) -> bool:
    """Whether the spec comes on stdin (``-``, or ``-<tag>``) rather than from a file."""
    return path.startswith(STDIN_SPEC)


def _preload(verb: str) -> None:
    """Import ``verb``'s module before waiting for a spec on stdin (a spare process): the
    imports then cost nothing when the spec comes. A failure is said later, by ``resolve``."""
    with contextlib.suppress(Exception):
        resolve(verb)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def run_verb(argv: List[str], out: Any, *, spec_read: Optional[Callable[[], object]] = None) -> int:
    """Dispatch one invocation, writing events to ``out``; returns the exit status.

    ``spec_read`` is called once the spec was read (stdin is then free for a watcher)."""
    try:
        if len(argv) != 2:
            raise AgentFailure(ErrorKind.BAD_USAGE, USAGE, {"argv": list(argv)})
        verb, spec_path = argv
        if from_stdin(spec_path):
            _preload(verb)
        spec, spec_failure = _load_quietly(spec_path)
        if spec_read is not None:
            spec_read()
    except AgentFailure as failure:
        write_failure(failure, out)
        return 1
    except Exception as exc:  # noqa: BLE001 - any bug must still end as one error event
        write_internal(exc, out)
        return 1
    return dispatch(verb, spec, spec_failure, out)


def _load_quietly(path: str) -> Tuple[Dict[str, Any], Optional[AgentFailure]]:
    try:
        return load_spec(path), None
    except AgentFailure as failure:
        return {}, failure


def _protocol_stream() -> io.TextIOWrapper:
    """Keep fd 1 for our JSON lines only: anything else that writes there goes to stderr.

    Handlers, the libraries they call and the processes they start may print; one stray line
    on stdout would corrupt the protocol, so stdout is re-pointed at stderr and the protocol
    gets a private duplicate of the original fd, always UTF-8 whatever the remote locale.

    Buffered: a write to a pipe or socket that a signal interrupts returns short, and a text
    wrapper straight over the raw file drops the rest: a long result line (a load point's
    /metrics scrapes) arrived cut at 64-128 kB, "exited with status 0 without a result".
    ``BufferedWriter`` writes the rest.
    """
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    raw = io.BufferedWriter(io.FileIO(fd, "w"))
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n", line_buffering=True)


def stdin_is_a_channel() -> bool:
    """Whether stdin is a pipe or socket (what sshd gives a command), not a terminal or
    /dev/null: only then does its EOF mean the controller went away."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def watch_controller(grace_s: float = EXIT_GRACE_S) -> threading.Thread:
    """Interrupt this process when stdin reaches EOF; exit it if still running ``grace_s``
    later. Reads through ``sys.stdin.buffer`` so a spec read from stdin first is not lost."""

    def watch() -> None:
        stream = sys.stdin.buffer
        try:
            while stream.read1(65536):  # type: ignore[union-attr]
                pass
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(grace_s)
        os._exit(130)

    thread = threading.Thread(target=watch, name="controller-watch", daemon=True)
    thread.start()
    return thread


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    out = _protocol_stream()
    try:
        if args and args[0] == SERVE_VERB:
            from .session import serve  # the session agent: requests on stdin until EOF

            return serve(sys.stdin.buffer, out)
        if args and args[0] in WATCHED and stdin_is_a_channel():
            signal.signal(signal.SIGINT, signal.default_int_handler)
            return run_verb(args, out, spec_read=watch_controller)
        return run_verb(args, out)
    except KeyboardInterrupt:  # the controller went away (or Ctrl-C on a manual run)
        return 130
    finally:
        with contextlib.suppress(OSError, ValueError):
            out.flush()


def exit_now(code: int) -> None:
    """Flush and leave without tearing the interpreter down.

    The controller waits for the agent process to end, and tearing down the modules a verb
    imported took 0.1-0.3 s (aiohttp, which the load generator used then), paid on every load
    point. Every file a verb writes is closed by the verb itself, and nothing here registers an
    atexit handler, so nothing is lost.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
