"""`orch stop` of a server mid-measurement, and a port taken before launch (issue 20, items 13
and 14), through the real CLI on embedded hosts.

The stop must end the engine within its grace by SIGTERM alone (the simulator, like vLLM,
aborts its open streams and exits), leave nothing behind (process, port, GPU memory), and the
interrupted run must say `orch stop` ended it, not guess at the OOM killer. A port some other
process holds is refused by the doctor naming that process, with a hint about the port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.fixtures.procs import alive, kill_tree, pids_with_env
from tests.fixtures.sshd import free_port, port_free

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"
HOSTS_FILE = DATA / "hosts-embedded.yaml"
HOST, RUN = "emb-1", "sglang-long"
GRACE_S = 20.0  # `orch stop --grace`: the engine must be gone by SIGTERM well within it
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 60.0  # hang guards only


def playbook(tmp_path: Path, port: int) -> Path:
    """interrupt.yaml's SGLang run alone (a workload far too long to finish) on ``port``."""
    book = yaml.safe_load((DATA / "interrupt.yaml").read_text())
    book["hosts"] = [HOST]
    book["runs"] = [{**book["runs"][0], "port": port}]
    path = tmp_path / "stop.yaml"
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


def orch(
    *args: str, root: Path, cwd: Path, timeout: float = EXIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(root), "ORCH_E2E_SECRET": uuid.uuid4().hex}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def host_pids(root: Path) -> list[int]:
    """Live processes started through the embedded host (they inherit its sandbox HOME)."""
    return pids_with_env("HOME", str(root / HOST / "home"))


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The embedded hosts' root; anything left running is killed at teardown."""
    path = tmp_path / "embedded"
    yield path
    for pid in host_pids(path):
        kill_tree(pid)


def wait_until_measuring(proc: subprocess.Popen[str], stderr: Path, root: Path) -> dict:
    deadline = time.monotonic() + START_TIMEOUT_S
    runs = root / HOST / "home" / ".cache" / "orch" / "runs"
    while time.monotonic() < deadline:
        text = stderr.read_text()
        found = [json.loads(p.read_text()) for p in runs.glob("*/server.json")]
        if f"{HOST} {RUN}: measuring" in text and found and alive(found[0]["pid"]):
            return found[0]
        assert proc.poll() is None, f"orch exited early ({proc.returncode}):\n{text}"
        time.sleep(0.1)
    raise AssertionError(
        f"{RUN} was not measuring after {START_TIMEOUT_S} s:\n{stderr.read_text()}"
    )


def test_orch_stop_mid_measurement_is_prompt_and_named_in_the_run(
    tmp_path: Path, root: Path
) -> None:
    port = free_port()
    stderr = tmp_path / "stderr.txt"
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(root), "ORCH_E2E_SECRET": uuid.uuid4().hex}
    argv = [sys.executable, "-m", "orchestrator", "run", str(playbook(tmp_path, port))]
    argv += ["--hosts", str(HOSTS_FILE), "--results", str(tmp_path / "results")]
    with stderr.open("w") as err, (tmp_path / "stdout.txt").open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=out, stderr=err, text=True, start_new_session=True
        )
    try:
        server = wait_until_measuring(proc, stderr, root)
        started = time.monotonic()
        stop = orch(
            "stop",
            server["run_id"],
            "--grace",
            f"{GRACE_S:g}",
            "--hosts",
            str(HOSTS_FILE),
            "--json",
            root=root,
            cwd=tmp_path,
        )
        took = time.monotonic() - started
        assert stop.returncode == 0, stop.stdout + stop.stderr
        [outcome] = json.loads(stop.stdout)["stopped"]
        # ended by its SIGTERM within the grace: no SIGKILL was needed
        assert outcome["signals"] == ["SIGTERM"] and outcome["waited_s"] < GRACE_S
        assert took < GRACE_S, f"orch stop took {took:.1f} s"
        assert outcome["exit"]["returncode"] == 0 and outcome["remaining_pids"] == []
        assert not alive(server["pid"]) and not alive(server["supervisor_pid"])
        assert port_free(port)
        assert list((root / HOST / "state").glob("gpu-*.json")) == []  # GPU memory released

        assert proc.wait(timeout=EXIT_TIMEOUT_S) == 1  # the run failed, and says why
        console = " ".join(
            stderr.read_text().split() + Path(tmp_path / "stdout.txt").read_text().split()
        )
        assert "Traceback" not in console and "OOM" not in console
        [summary] = (tmp_path / "results").glob(f"*/{RUN}*/summary.json")
        error = json.loads(summary.read_text())["error"]
        assert error["cause"] == "stopped_by_orch_stop"
        assert "was stopped by `orch stop` at " in error["message"]
        assert f"(from {stop_user()}@{socket.gethostname()})" in error["message"]
        assert "OOM" not in error["message"] + error["hint"]
        assert host_pids(root) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for server_json in (root / HOST / "home" / ".cache" / "orch" / "runs").glob(
            "*/server.json"
        ):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(json.loads(server_json.read_text())["pgid"], signal.SIGKILL)


def stop_user() -> str:
    import getpass

    return getpass.getuser()


FOREIGN_SERVER = (
    "import socket, sys, time\n"
    "sock = socket.socket()\n"
    "sock.bind(('127.0.0.1', 0))\n"
    "sock.listen()\n"
    "print(sock.getsockname()[1], flush=True)\n"
    "time.sleep(300)\n"
)


def test_a_taken_port_is_refused_naming_its_holder(tmp_path: Path, root: Path) -> None:
    """Another process (not orch's) listens on the run's port: the doctor refuses before any
    launch, naming its pid, user and command; the hint is about the port, not --force."""
    script = tmp_path / "foreign_holder.py"
    script.write_text(FOREIGN_SERVER)
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        results = tmp_path / "results"
        ran = orch(
            "run",
            str(playbook(tmp_path, port)),
            "--hosts",
            str(HOSTS_FILE),
            "--results",
            str(results),
            root=root,
            cwd=tmp_path,
        )
        assert ran.returncode == 1, ran.stdout + ran.stderr
        text = " ".join(ran.stderr.split())  # rich wraps long lines
        assert "the doctor refused to launch" in text and "Traceback" not in text
        assert (
            f"port {port} is already in use on the host by pid {holder.pid} "
            f"(user {stop_user()}: {sys.executable} {script}): the server cannot listen there"
        ) in text
        assert "Fix: stop that process, or set the run's `port` to a free one" in text
        assert "set the run's `port` to a free one; --force cannot launch on a taken port" in text
        assert "pass --force" not in text and "collapse" not in text
        assert not results.exists() and host_pids(root) == []
    finally:
        holder.kill()
        holder.wait()
