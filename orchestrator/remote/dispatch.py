"""Dispatch: one verb's call, from its read spec to its result or error line.

Verbs are looked up in ``VERBS`` and their modules imported only when called, so a verb written
later plugs in by adding its module (and, if new, one line in ``wire.CONTRACT``) and a broken
verb module cannot stop the others from working. A spec of another contract version is refused
rather than misread (``checked_version``). Both the one-shot agent (``main``) and the session
agent (``session``) come through here, so neither imports the other.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import traceback
from typing import Any, Callable, Dict, Optional, Union

from .protocol import AgentFailure, Emit, write_event
from .wire import (
    CONTRACT,
    CONTRACT_VERSION,
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


def make_emit(out: Any) -> Emit:
    """An ``emit`` that writes a streamed event of the contract, and refuses anything else."""

    def emit(event: Wire) -> None:
        if not isinstance(event, Wire):
            raise TypeError(f"emit() needs a wire event, got {event!r}")
        write_event(event_line(event), out)

    return emit


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
        write_failure(failure, out)
    except Exception as exc:  # noqa: BLE001 - any bug must still end as one error event
        write_internal(exc, out)
    return 1


def write_internal(exc: Exception, out: Any) -> None:
    """A bug (any exception but ``AgentFailure``) as one ``internal`` error line."""
    details = {"type": type(exc).__name__, "traceback": traceback.format_exc()}
    if isinstance(exc, OSError) and exc.errno is not None:
        # by name (ENOSPC): the controller tells a full disk from a bug on any platform
        details["errno"] = errno.errorcode.get(exc.errno, str(exc.errno))
        if exc.filename is not None:
            details["path"] = os.fsdecode(exc.filename)
    message = f"agent failed: {type(exc).__name__}: {exc}"
    write_event(error_line(ErrorEvent(ErrorKind.INTERNAL, message, details)), out)


def write_failure(failure: AgentFailure, out: Any) -> None:
    """A verb's refusal as its error line; details JSON cannot hold are sent as their repr."""
    try:
        line = error_line(ErrorEvent(failure.kind, failure.message, failure.details))
        json.dumps(line)
    except (TypeError, ValueError):  # details a verb filled with something JSON cannot hold
        line = error_line(
            ErrorEvent(failure.kind, failure.message, {"repr": repr(failure.details)})
        )
    write_event(line, out)
