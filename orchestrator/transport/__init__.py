"""The one asyncssh boundary: connect (strict host keys), run an argv, stream lines, move files.

Only this package imports asyncssh; everything it raises is an ``orchestrator.errors`` type.
"""

from __future__ import annotations

from orchestrator.transport.ssh import (
    CompletedProcess,
    Connection,
    ConnectionPool,
    RemoteStream,
    command_line,
)

__all__ = ["CompletedProcess", "Connection", "ConnectionPool", "RemoteStream", "command_line"]
