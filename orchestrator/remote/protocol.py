"""The agent's side of the wire: events written as JSON lines on stdout, failures as errors.

Standard library only, Python 3.9+: this module runs on the GPU hosts. What each line holds is
defined in ``wire``; this module only writes them.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, Optional, Type, TypeVar

from .wire import ErrorKind, Wire, WireError

Emit = Callable[[Wire], None]
S = TypeVar("S", bound=Wire)


class AgentFailure(Exception):
    """Raised by a verb handler for a failure the controller should show to a person.

    ``kind`` is what the controller branches on; ``details`` are JSON values for the record.
    """

    def __init__(
        self, kind: ErrorKind, message: str, details: Optional[Dict[str, Any]] = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details or {}


def parse_spec(spec_type: Type[S], raw: Dict[str, Any]) -> S:
    """The verb's typed spec; a spec that does not fit the contract is a ``bad_spec`` failure."""
    try:
        return spec_type.from_json(raw)
    except WireError as exc:
        raise AgentFailure(ErrorKind.BAD_SPEC, f"bad spec: {exc}") from exc


def write_event(obj: Dict[str, Any], stream: Any = None) -> None:
    """Write one JSON line and flush at once so the controller sees it live."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    out.flush()
