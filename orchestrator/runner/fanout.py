"""Every host at once: the one way a command touches several hosts.

A dead or slow host must never block or fail the others, and its failure must say which host it
was and what to do; so every fan-out runs the jobs concurrently and turns an ``OrchError`` into
that host's failure entry. Anything else (a bug, a cancellation) still propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.config import HostConfig
from orchestrator.errors import OrchError

T = TypeVar("T")
Item = TypeVar("Item")


def without_host(message: str, host: str) -> str:
    """``message`` without the ``"<host>: "`` a HostError's text starts with, for a line that
    already names the host ("a on gpu-1 failed: gpu-1: connection refused" says it twice)."""
    return message.removeprefix(f"{host}: ")


@dataclass(frozen=True)
class HostOutcome(Generic[T]):
    """One host's answer to a fan-out: its value, or the error that stopped it."""

    host: str
    value: T | None = None
    error: OrchError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def message(self) -> str | None:
        """The error's text without the host's name (every line that shows it names the host)."""
        return None if self.error is None else without_host(str(self.error), self.host)

    @property
    def hint(self) -> str | None:
        return None if self.error is None else self.error.hint

    def unwrap(self) -> T:
        """The value; the host's error when it failed."""
        if self.error is not None:
            raise self.error
        assert self.value is not None, "a host job returned no value"
        return self.value


async def each_of(
    items: Sequence[Item], job: Callable[[Item], Awaitable[T]], *, host: Callable[[Item], str]
) -> list[HostOutcome[T]]:
    """``job(item)`` for every item at once (several may share a host), in ``items`` order."""

    async def one(item: Item) -> HostOutcome[T]:
        try:
            return HostOutcome(host(item), value=await job(item))
        except OrchError as exc:
            return HostOutcome(host(item), error=exc)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def each_host(
    hosts: Sequence[HostConfig], job: Callable[[HostConfig], Awaitable[T]]
) -> list[HostOutcome[T]]:
    """``job(host)`` on every host at once, in ``hosts`` order."""
    return await each_of(hosts, job, host=_name)


def _name(host: HostConfig) -> str:
    return host.name
