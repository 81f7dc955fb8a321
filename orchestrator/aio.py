"""Asyncio helpers every layer may use (the runner's registry, a Slurm submission)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def shielded(coro: Awaitable[T]) -> T:
    """Run ``coro`` to the end even if we are cancelled meanwhile (Ctrl-C), then re-cancel."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()
