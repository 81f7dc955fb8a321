"""The agent's wire protocol: JSON lines on stdout, the last one a result or an error.

Standard library only, Python 3.9+: this module runs on the GPU hosts.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, Optional

Emit = Callable[[Dict[str, Any]], None]


class AgentFailure(Exception):
    """Raised by a verb handler for a failure the controller should show to a person.

    ``kind`` is a stable snake_case name the controller can branch on (``port_in_use``,
    ``gpu_busy``, ``not_found``, ``bad_spec`` ...).
    """

    def __init__(self, kind: str, message: str, details: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details or {}


def write_event(obj: Dict[str, Any], stream: Any = None) -> None:
    """Write one JSON line and flush at once so the controller sees it live."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    out.flush()
