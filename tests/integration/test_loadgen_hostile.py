"""`orch loadgen` against a scripted hostile server on 127.0.0.1: every stream that ends is not
a completed request. The server writes exact SSE bytes (an abort after 3 of 16 tokens, an
``event: error``, chunks after ``[DONE]``, usage 50000 with max_tokens 16, a chunk claiming a
billion tokens, a stream with no finish_reason); each must be failed with its kind, its
timings kept out of the summary, the command exit 1 with its files written."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli.main import run as run_cli
from orchestrator.remote import loadrunner
from orchestrator.results.model import RunResult
from tests.fixtures.simserver import MODEL as SIM
from tests.fixtures.simserver import start_sim, stop_sim

MODEL = "hostile-model"


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _tok(n: int, reason: str | None = None) -> bytes:
    return _event(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "w"}, "finish_reason": reason}],
            "usage": {"prompt_tokens": 5, "completion_tokens": n},
        }
    )


def _usage(n: int) -> bytes:
    return _event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}})


DONE = b"data: [DONE]\n\n"
NORMAL = b"".join(_tok(n) for n in range(1, 16)) + _tok(16, "length") + _usage(16) + DONE
# the order requests arrive in (concurrency 1): their bodies and the failure each must get
SCRIPT: list[tuple[bytes, str | None]] = [
    (NORMAL, None),
    (_tok(1) + _tok(2) + _tok(3, "abort") + _usage(3) + DONE, "aborted"),
    (_tok(1) + b'event: error\ndata: {"message": "EngineDeadError"}\n\n' + DONE, "error_event"),
    (NORMAL + b"".join(_tok(16 + n) for n in range(1, 197)), "protocol"),
    (_tok(1) + _tok(2, "stop") + _usage(50000) + DONE, "token_count_mismatch"),
    (_tok(1) + _tok(10**9, "length") + DONE, "token_count_mismatch"),
    (_tok(1) + _tok(2) + _usage(2) + DONE, "no_finish"),  # a front-end whose engine died
    (NORMAL, None),
]


class Hostile:
    """An HTTP/1.1 server answering each POST with the next scripted SSE body, verbatim."""

    def __init__(self) -> None:
        self.served = 0
        self.port = 0
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if not head.startswith(b"POST"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                body = SCRIPT[min(self.served, len(SCRIPT) - 1)][0]
                self.served += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n" % len(body) + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()
        self.loop.run_until_complete(server.wait_closed())


@pytest.fixture()
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    assert server.ready.wait(10)
    yield server
    server.loop.call_soon_threadsafe(server.loop.stop)
    thread.join(10)


def test_hostile_streams_are_failed_requests_and_the_command_fails(
    hostile: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{hostile.port}"
    code = run_cli(["loadgen", url, "-m", MODEL, "-n", str(len(SCRIPT)), "-c", "1",
                    "--warmup", "0", "--max-tokens", "16", "--ignore-eos",
                    "--out", str(tmp_path)])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1, err
    assert "Traceback" not in err
    (folder,) = tmp_path.glob("*/loadgen")
    records = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    assert [r["failure"] for r in sorted(records, key=lambda r: r["index"])] == [
        kind for _, kind in SCRIPT
    ]
    aborted = next(r for r in records if r["failure"] == "aborted")
    assert aborted["finish_reason"] == "abort" and aborted["output_tokens"] == 3
    billion = next(r for r in records if r["output_tokens"] == 10**9)
    assert len(billion["chunks"]) == 2  # one entry per chunk received
    after_done = next(r for r in records if r["failure"] == "protocol")
    assert after_done["output_tokens"] == 16  # the 196 chunks after [DONE] were not counted
    result = RunResult.load(folder / "summary.json")
    stats = result.requests
    assert stats is not None and (stats.completed, stats.failed) == (2, 6)
    assert stats.total_output_tokens == 32  # only the two completed requests
    assert stats.ttft_ms.n == 2 and stats.itl_token_ms.n == 2 * 15
    assert result.verdict == "failed"


# ------------------------------------------------ the simulator's engine dies mid-request


def test_requests_cut_by_the_engine_dying_are_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator's engine dies 3 s after it is ready while 4 requests of 3000 tokens
    stream (20 ms a step): vLLM's front-end ends each stream with an error object and [DONE].
    Not one is completed, and the command fails."""
    env = {"ORCH_SIM_FAIL": "crash_after:3", "ORCH_SIM_STEP_MS": "20"}
    proc, url = start_sim(tmp_path / "sim", env)
    try:
        code = run_cli(["loadgen", url, "-m", SIM, "-n", "4", "-c", "4", "--warmup", "0",
                        "--max-tokens", "3000", "--ignore-eos", "--timeout", "60",
                        "--out", str(tmp_path / "results")])  # fmt: skip
    finally:
        stop_sim(proc)
    assert code == 1, capsys.readouterr().err
    (folder,) = (tmp_path / "results").glob("*/loadgen")
    records = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 4
    assert {r["failure"] for r in records} == {"error_event"}
    assert all("EngineCore encountered an issue" in r["error"] for r in records)
    assert all(0 < r["output_tokens"] < 3000 for r in records)
    stats = RunResult.load(folder / "summary.json").requests
    assert stats is not None and (stats.completed, stats.failed) == (0, 4)


def test_the_verbs_result_counts_reconciled_requests_and_mismatches(hostile: Hostile) -> None:
    """The loadgen verb itself (what runs on a host): its result says how many completed
    requests were reconciled against usage and how many failed on their token counts."""
    spec = {
        "base_url": f"http://127.0.0.1:{hostile.port}",
        "model": MODEL,
        "prompts": {"kind": "list", "items": ["hi"]},
        "num_prompts": len(SCRIPT),
        "concurrency": 1,
        "max_tokens": 16,
        "ignore_eos": True,
        "progress_interval_s": 60,
    }
    events: list[object] = []
    result = loadrunner.run(spec, events.append)
    assert (result.requests, result.completed, result.failed) == (len(SCRIPT), 2, 6)
    assert (result.reconciled, result.token_count_mismatches) == (2, 2)
    assert result.output_tokens == 32
