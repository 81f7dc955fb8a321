"""Helpers for the simulator's tests: free ports, plain HTTP calls, a simulated server process."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from orchestrator.sim.sandbox import Sandbox

FAST = {"ORCH_SIM_LOAD_S": "0.1", "ORCH_SIM_SPEED": "25", "VLLM_LOG_STATS_INTERVAL": "5"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(
    method: str, url: str, body: dict | None = None, headers: dict | None = None
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class SimProc:
    """A simulated engine started exactly as the controller starts one: argv + sandbox env."""

    def __init__(self, box: Sandbox, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.port = int(argv[argv.index("--port") + 1]) if "--port" in argv else None
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            env={**box.env(), "LANG": "C.UTF-8", **env},
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=box.home,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text()

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n{self.text()}")
            try:
                if call("GET", self.url + "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready after {timeout}s:\n{self.text()}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._out.close()
        return code

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit()

    def json(self, path: str) -> dict:
        status, body = call("GET", self.url + path)
        assert status == 200, (status, body)
        return json.loads(body)
