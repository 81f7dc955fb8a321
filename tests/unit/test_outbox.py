"""The load generator's outbox: records are written after the sends due with them, all of them,
in order, and a failed write fails the run."""

from __future__ import annotations

import asyncio
import errno
import socket
import time

import pytest

from orchestrator.remote import loadrunner
from orchestrator.remote.outbox import Outbox
from orchestrator.remote.wire import PhaseEvent, ProgressEvent, RequestRecord, Wire


def progress(i: int) -> ProgressEvent:
    return ProgressEvent(phase="measure", done=i, failed=0, in_flight=0, tok_s=0.0, elapsed_s=0.0)


def test_a_wave_is_sent_before_its_records_are_written() -> None:
    """256 workers end at once: each puts its record and sends again; every send comes before
    the first (slow) write, and every record is written, in order, by ``close``."""
    log: list[str] = []

    def emit(event: Wire) -> None:
        time.sleep(0.0002)  # a record's serialising and writing
        assert isinstance(event, ProgressEvent)
        log.append(f"write {event.done}")

    async def main() -> None:
        outbox = Outbox(emit)
        outbox.start()
        go = asyncio.Event()

        async def worker(i: int) -> None:
            await go.wait()
            outbox.put(progress(i))
            log.append(f"send {i}")

        workers = [asyncio.ensure_future(worker(i)) for i in range(256)]
        await asyncio.sleep(0)
        go.set()
        await asyncio.gather(*workers)
        await outbox.close()

    asyncio.run(main())
    sends = [n for n, line in enumerate(log) if line.startswith("send")]
    writes = [line for line in log if line.startswith("write")]
    assert len(sends) == 256 and max(sends) < log.index("write 0")
    assert writes == [f"write {i}" for i in range(256)]


def test_the_queue_is_bounded() -> None:
    """Past ``limit`` queued events, ``put`` writes the oldest itself."""
    written: list[int] = []

    async def main() -> None:
        outbox = Outbox(lambda e: written.append(e.done), limit=3)  # type: ignore[attr-defined]
        outbox.start()
        for i in range(5):
            outbox.put(progress(i))
        assert written == [0, 1] and len(outbox.queue) == 3
        await outbox.close()

    asyncio.run(main())
    assert written == [0, 1, 2, 3, 4]


def test_a_failed_write_fails_the_next_put_and_close() -> None:
    def emit(event: Wire) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async def main() -> None:
        outbox = Outbox(emit)
        outbox.start()
        outbox.put(progress(0))
        await asyncio.sleep(0.01)  # the writing task runs and fails
        with pytest.raises(OSError) as put:
            outbox.put(progress(1))
        assert put.value.errno == errno.ENOSPC
        with pytest.raises(OSError):
            await outbox.close()

    asyncio.run(main())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spec(prompts: int) -> dict[str, object]:
    """A real run whose requests fail at once (nothing listens): records without a server."""
    return {
        "port": closed_port(),
        "model": "m",
        "prompts": {"kind": "list", "items": ["a", "b"]},
        "num_prompts": prompts,
        "warmup": 2,
        "concurrency": 8,
        "timeout_s": 5,
    }


def test_a_run_writes_every_record_in_order_before_its_result() -> None:
    events: list[Wire] = []
    result = loadrunner.run(spec(300), events.append)
    phases = [n for n, e in enumerate(events) if isinstance(e, PhaseEvent)]
    records = [e for e in events if isinstance(e, RequestRecord)]
    assert sorted(r.index for r in records) == list(range(302))  # each exactly once
    measure = phases[1]
    assert all(r.warmup for r in events[:measure] if isinstance(r, RequestRecord))
    assert not any(r.warmup for r in events[measure:] if isinstance(r, RequestRecord))
    assert result.requests == 300 and result.failed == 300


def test_a_run_whose_records_cannot_be_written_fails() -> None:
    """Disk full (or the controller gone) while writing records: the run raises that error."""
    written: list[Wire] = []

    def emit(event: Wire) -> None:
        if isinstance(event, RequestRecord) and len(written) >= 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(event)

    with pytest.raises(OSError) as failed:
        loadrunner.run(spec(100), emit)
    assert failed.value.errno == errno.ENOSPC
