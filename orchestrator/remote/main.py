"""Entry point of the agent: ``<agent.pyz> <verb> <spec.json>`` -> JSON lines on stdout.

Verbs are looked up in ``VERBS`` and their modules imported only when called, so a verb written
later plugs in by adding its module (and, if new, one line here) and a broken verb module cannot
stop the others from working. The spec file is deleted as soon as it is read because it may
hold secrets (tokens in engine environments), unless it says ``"keep_spec": true``. What the
lines and the spec hold is the contract in ``wire``; a spec of another contract version is
refused rather than misread.

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
import errno
import importlib
import io
import json
import os
import signal
import stat
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .protocol import AgentFailure, Emit, write_event
from .wire import (
    CONTRACT,
    CONTRACT_VERSION,
    SERVE_VERB,
    ErrorEvent,
    ErrorKind,
    Wire,
    error_line,
    event_line,
    result_line,
)

Handler = Callable[[Dict[str, Any], Emit], Wire]

# verb -> "module:function" (relative to this package), or a handler itself: the contract's
# table (``wire.CONTRACT``) says which, so a verb is declared in one place.
VERBS: Dict[str, Union[str, Handler]] = {verb: c.handler for verb, c in CONTRACT.items()}

USAGE = "usage: agent.pyz <verb> <spec.json | ->"
STDIN_SPEC = "-"
WATCHED = ("tail", "loadgen")
EXIT_GRACE_S = 10.0


def resolve(verb: str) -> Handler:
    """The handler for ``verb``; AgentFailure(unknown_verb) when it is not in this agent."""
    target = VERBS.get(verb)
    if target is None:
        raise AgentFailure(
            ErrorKind.UNKNOWN_VERB, f"unknown verb {verb!r}", {"verb": verb, "known": sorted(VERBS)}
        )
    if callable(target):
        return target
    module_name, _, func_name = target.partition(":")
    qualified = f"{__package__}.{module_name}"
    try:
        module = importlib.import_module(f".{module_name}", __package__)
    except ModuleNotFoundError as exc:
        if exc.name != qualified:
            raise
        raise AgentFailure(
            ErrorKind.UNKNOWN_VERB,
            f"verb {verb!r} is registered but its module {module_name!r} is not in this agent",
            {"verb": verb, "known": sorted(VERBS)},
        ) from exc
    return getattr(module, func_name)


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


def checked_version(spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec`` without its ``"v"``; contract_mismatch when it is missing or another one."""
    if "v" not in spec:
        raise AgentFailure(
            ErrorKind.CONTRACT_MISMATCH,
            f'the spec carries no contract version ("v"); this agent speaks v{CONTRACT_VERSION}',
            {"theirs": None, "ours": CONTRACT_VERSION},
        )
    version = spec.pop("v")
    if version != CONTRACT_VERSION:
        raise AgentFailure(
            ErrorKind.CONTRACT_MISMATCH,
            f"the spec is of contract v{version}, this agent speaks v{CONTRACT_VERSION}",
            {"theirs": version, "ours": CONTRACT_VERSION},
        )
    return spec


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


def make_emit(out: Any) -> Emit:
    """An ``emit`` that writes a streamed event of the contract, and refuses anything else."""

    def emit(event: Wire) -> None:
        if not isinstance(event, Wire):
            raise TypeError(f"emit() needs a wire event, got {event!r}")
        write_event(event_line(event), out)

    return emit


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
        _write_failure(failure, out)
        return 1
    except Exception as exc:  # noqa: BLE001 - any bug must still end as one error event
        _write_internal(exc, out)
        return 1
    return dispatch(verb, spec, spec_failure, out)


def dispatch(
    verb: str, spec: Dict[str, Any], spec_failure: Optional[AgentFailure], out: Any
) -> int:
    """Run ``verb`` on its read spec, writing its events and its result or error to ``out``;
    the exit status. The one-shot agent and each request of a session come through here."""
    try:
        handler = resolve(verb)  # an unknown verb wins over a bad spec: it is the bigger mistake
        if spec_failure is not None:
            raise spec_failure
        data = handler(spec, make_emit(out))
        contract = CONTRACT.get(verb)
        expected = contract.result if contract is not None else Wire
        if not isinstance(data, expected):
            raise TypeError(
                f"verb {verb!r} returned {type(data).__name__}, not {expected.__name__}"
            )
        write_event(result_line(data), out)
        return 0
    except AgentFailure as failure:
        _write_failure(failure, out)
    except Exception as exc:  # noqa: BLE001 - any bug must still end as one error event
        _write_internal(exc, out)
    return 1


def _write_internal(exc: Exception, out: Any) -> None:
    details = {"type": type(exc).__name__, "traceback": traceback.format_exc()}
    if isinstance(exc, OSError) and exc.errno is not None:
        # by name (ENOSPC): the controller tells a full disk from a bug on any platform
        details["errno"] = errno.errorcode.get(exc.errno, str(exc.errno))
        if exc.filename is not None:
            details["path"] = os.fsdecode(exc.filename)
    message = f"agent failed: {type(exc).__name__}: {exc}"
    write_event(error_line(ErrorEvent(ErrorKind.INTERNAL, message, details)), out)


def _write_failure(failure: AgentFailure, out: Any) -> None:
    try:
        line = error_line(ErrorEvent(failure.kind, failure.message, failure.details))
        json.dumps(line)
    except (TypeError, ValueError):  # details a verb filled with something JSON cannot hold
        line = error_line(
            ErrorEvent(failure.kind, failure.message, {"repr": repr(failure.details)})
        )
    write_event(line, out)


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
    """
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    return io.TextIOWrapper(io.FileIO(fd, "w"), encoding="utf-8", newline="\n", line_buffering=True)


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
