"""Where `orch run` hears "stop": the injectable interrupts (the run itself, in-process, is in
tests/integration/test_run_inprocess.py)."""

from __future__ import annotations

import asyncio
import signal
import threading

from orchestrator.cli.interrupts import (
    ManualInterrupts,
    SignalInterrupts,
    from_context,
    given,
)


def test_manual_interrupt_reaches_the_run_from_another_thread() -> None:
    interrupts = ManualInterrupts()
    got: list[signal.Signals] = []

    async def run() -> None:
        done = asyncio.Event()

        def deliver(sig: signal.Signals) -> None:
            got.append(sig)
            done.set()

        interrupts.install(asyncio.get_running_loop(), deliver)
        threading.Thread(target=interrupts.interrupt, args=(signal.SIGTERM,)).start()
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(run())
    assert got == [signal.SIGTERM]
    interrupts.interrupt()  # after the loop closed: nothing to stop, no error
    assert got == [signal.SIGTERM]


def test_an_interrupt_before_the_run_installs_is_delivered_at_once() -> None:
    interrupts = ManualInterrupts()
    interrupts.interrupt(signal.SIGINT)
    got: list[signal.Signals] = []

    async def run() -> None:
        interrupts.install(asyncio.get_running_loop(), got.append)
        await asyncio.sleep(0)

    asyncio.run(run())
    assert got == [signal.SIGINT]
    assert interrupts.pending == []


def test_commands_take_the_given_interrupts_else_the_signals() -> None:
    assert isinstance(from_context(), SignalInterrupts)
    mine = ManualInterrupts()
    with given(mine):
        assert from_context() is mine
    assert isinstance(from_context(), SignalInterrupts)
