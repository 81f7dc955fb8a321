"""The seam to hosts served inside this process (``transport: embedded``).

The transport does not know how such a host is made: orch's simulator does
(``orchestrator.sim.embedded``), and the entry point that opens the pool hands in its factory
(``commands/session.py``), so nothing of the product below that entry point imports the
simulator. What ``start`` returns is logged in to through the same client code as any host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncssh

from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import HostError


@dataclass(frozen=True)
class EmbeddedLogin:
    """Where one embedded host listens, and how to log in trusting exactly its key."""

    address: str
    port: int
    user: str
    client_key: asyncssh.SSHKey
    known_hosts: asyncssh.SSHKnownHosts


class EmbeddedHosts(Protocol):
    """The servers of one pool's embedded hosts."""

    async def start(self, host: HostConfig, base: Path | None) -> EmbeddedLogin:
        """The host's server, started on the first call and reused after (a reconnect finds
        the same sandbox); ``base`` is the pool's ``embedded_root``."""
        ...

    async def stop(self) -> None:
        """Stop every server started: the pool is closing."""
        ...


# Called once, on the pool's first embedded host: a pool that meets none never builds one.
EmbeddedFactory = Callable[[], EmbeddedHosts]


def no_embedded_hosts(host: HostConfig) -> HostError:
    """The error for an embedded host reached through a pool given no factory."""
    return HostError(
        host.name,
        "transport: embedded needs orch's simulator, and this connection pool was given none",
        hint="reach embedded hosts through orch's commands (orch run, orch hosts check ...); "
        "in code, pass ConnectionPool(embedded=SimulatedHosts) from orchestrator.sim.embedded",
    )
