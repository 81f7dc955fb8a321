"""Every host at once: concurrent, in order, a host's OrchError is its own failure entry."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.config import HostConfig
from orchestrator.errors import HostUnreachable, OrchError
from orchestrator.runner.fanout import each_host, each_of

HOSTS = [HostConfig(name=n, address="127.0.0.1", workdir="/srv/orch") for n in ("a", "b", "c")]


def test_each_host_runs_every_host_at_once_and_keeps_their_order() -> None:
    started: list[str] = []
    everyone_in = asyncio.Event()

    async def job(host: HostConfig) -> str:
        started.append(host.name)
        if len(started) == len(HOSTS):
            everyone_in.set()
        await everyone_in.wait()  # would hang if the jobs ran one after another
        if host.name == "b":
            raise HostUnreachable("b", "connection refused", hint="is sshd running?")
        return host.name.upper()

    outcomes = asyncio.run(asyncio.wait_for(each_host(HOSTS, job), timeout=30))
    assert [(o.host, o.value, o.ok) for o in outcomes] == [
        ("a", "A", True),
        ("b", None, False),
        ("c", "C", True),
    ]
    failed = outcomes[1]
    assert (failed.message, failed.hint) == ("connection refused", "is sshd running?")
    assert str(failed.error) == "b: connection refused"
    assert outcomes[0].unwrap() == "A"
    with pytest.raises(HostUnreachable):
        failed.unwrap()


def test_each_of_names_the_host_of_each_item_and_lets_bugs_through() -> None:
    async def job(item: tuple[str, int]) -> int:
        if item[1] == 0:
            raise OrchError("no work")
        return 10 // item[1]

    outcomes = asyncio.run(each_of([("a", 2), ("a", 0)], job, host=lambda item: item[0]))
    assert [(o.host, o.value, o.message) for o in outcomes] == [
        ("a", 5, None),
        ("a", None, "no work"),
    ]

    async def buggy(item: str) -> int:
        raise ZeroDivisionError(item)

    with pytest.raises(ZeroDivisionError):
        asyncio.run(each_of(["x"], buggy, host=str))
