"""The engine's logs on the host hold what it prints, its API key included (vLLM's non-default
args, SGLang's ServerArgs): the agent creates them for their owner only, mode 0600, even under
a permissive umask and when an earlier launch of the run left them wider."""

from __future__ import annotations

import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.remote import lifecycle


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)  # inherited by the supervisor and the engine it starts
    try:
        yield
    finally:
        os.umask(old)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_and_wait(workdir: Path, run_id: str) -> Path:
    spec = {
        "run_id": run_id,
        "workdir": str(workdir),
        "port": free_port(),
        "argv": [sys.executable, "-c", "print('api_key=sk-printed')"],
        "env": {},
    }
    lifecycle.launch(spec, lambda _obj: None)
    directory = workdir / "runs" / run_id
    deadline = time.monotonic() + 20
    while not (directory / lifecycle.EXIT_JSON).exists():
        assert time.monotonic() < deadline, "the engine never exited"
        time.sleep(0.05)
    return directory


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("earlier_mode", [None, 0o644])
def test_engine_logs_are_created_0600(
    tmp_path: Path, open_umask: None, earlier_mode: int | None
) -> None:
    directory = tmp_path / "work" / "runs" / "r1"
    if earlier_mode is not None:  # a launch by an older agent left them world-readable
        directory.mkdir(parents=True)
        for name in (lifecycle.SERVER_LOG, lifecycle.SUPERVISOR_LOG):
            (directory / name).write_text("")
            (directory / name).chmod(earlier_mode)
    directory = launch_and_wait(tmp_path / "work", "r1")
    assert "api_key=sk-printed" in (directory / lifecycle.SERVER_LOG).read_text()
    assert mode(directory / lifecycle.SERVER_LOG) == 0o600
    assert mode(directory / lifecycle.SUPERVISOR_LOG) == 0o600
