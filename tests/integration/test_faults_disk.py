"""Issue 9, item 10 over real OpenSSH sshd: a full remote disk is said as such ("no space left
on <host>:<path>"), `orch ps` / `orch stop` still work, and a run on it fails naming the path.
A module of its own so that the two test workers share the slow fault tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.client import Agent
from orchestrator.config import RunSpec
from orchestrator.config.hostconfig import HostConfig
from orchestrator.remote.wire import LaunchResult
from orchestrator.runner.server import Server, ServerRegistry
from tests.fixtures.procs import alive
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port
from tests.integration.test_faults_transport import (
    SIM_ENV,
    WAIT_S,
    engines,
    entry,
    flat,
    no_process_left,
    orch,
    summaries,
    vllm_run,
    write_files,
)

pytestmark = pytest.mark.integration


def mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def fill(directory: Path) -> None:
    """Fill the filesystem of ``directory`` to the last byte."""
    for name, chunk in (("filler", 65536), ("filler-small", 1)):
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * chunk):
                    pass
        finally:
            os.close(fd)
    assert shutil.disk_usage(directory).free == 0


@pytest.fixture
def full_workdir(sshd_factory: SshdFactory, tmp_path: Path) -> Any:
    host = sshd_factory.start("sshd-full")
    workdir = host.home / "tiny"
    if not mount_tmpfs(workdir, "4m"):
        pytest.skip("cannot mount a tmpfs here (needs root and mount): no full disk to test on")
    try:
        yield host, workdir
    finally:
        for pid in host.leftover_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(workdir)], check=False)


def launch_engine(factory: SshdFactory, config: HostConfig) -> LaunchResult:
    """An engine started through the agent (as `orch run` does), left running."""

    async def main() -> LaunchResult:
        pool = factory.pool()
        try:
            agent = Agent(await pool.get(config), config)
            run = RunSpec.model_validate(
                {
                    "name": "onfull",
                    "engine": "vllm",
                    "model": "Qwen/Qwen3.6-27B",
                    "tensor_parallel": 2,
                    "env": SIM_ENV,
                }
            )
            server = await Server.start(
                agent, run, config, run_id="onfull-1", port=free_port(), registry=ServerRegistry()
            )
            assert server.record is not None
            return server.record
        finally:
            await pool.close()

    return asyncio.run(main())


def test_a_full_remote_disk_is_said_and_ps_and_stop_still_work(
    full_workdir: tuple[SshdHost, Path], sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """With not one byte free in the workdir, no spec file can be written: `orch ps` and `orch
    stop` still see and stop the server (the spec goes on the agent's stdin), and a push that
    fails says "no space left on <host>:<path>", not SFTP's bare "Failure"."""
    host, workdir = full_workdir
    inventory, _ = write_files(
        tmp_path, sshd_factory, {"sshd-full": entry(host, workdir=str(workdir))}, []
    )
    record = launch_engine(sshd_factory, host.host_config(workdir=str(workdir)))
    assert alive(record.pid)
    log = Path(record.log)
    deadline = time.monotonic() + WAIT_S  # serving, its log file written, before the disk fills
    while b"Application startup complete." not in log.read_bytes():
        assert time.monotonic() < deadline and alive(record.pid), log.read_text()
        time.sleep(0.05)
    fill(workdir)

    ps = orch("ps", "--hosts", str(inventory), "--json", cwd=tmp_path)
    assert ps.returncode == 0, ps.stdout + ps.stderr
    assert "onfull-1" in ps.stdout
    # (the simulator cannot log its shutdown on the full disk: its SIGKILL may come early)
    stopped = orch("stop", "--all", "--hosts", str(inventory), "--timeout", "2", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "onfull-1" in stopped.stdout
    assert not alive(record.pid)
    assert not [p for p in (workdir / "specs").iterdir()], "a spec file was written?"

    # a fresh workdir on the full filesystem: the agent cannot be pushed, and that is said
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    inventory2, _ = write_files(
        fresh, sshd_factory, {"sshd-full": entry(host, workdir=str(workdir / "fresh"))}, []
    )
    check = orch("hosts", "check", "--hosts", str(inventory2), "--json", cwd=tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    [row] = json.loads(check.stdout)["hosts"]
    assert row["error"].startswith(f"no space left on sshd-full:{workdir}/fresh"), row
    assert "Failure" not in row["error"]
    assert "df -h" in row["hint"]
    no_process_left(host)


def test_orch_run_on_a_full_remote_disk_fails_the_run_naming_the_path(
    full_workdir: tuple[SshdHost, Path], sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The agent is in place (a host check pushed it), then the workdir's filesystem fills:
    `orch run` fails the run with "no space left on <host>:<path>", exits 1, no traceback, and
    leaves no engine behind."""
    host, workdir = full_workdir
    inventory, playbook = write_files(
        tmp_path,
        sshd_factory,
        {"sshd-full": entry(host, workdir=str(workdir))},
        [vllm_run("onfull", "sshd-full", num_prompts=4)],
    )
    check = orch("hosts", "check", "--hosts", str(inventory), cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    fill(workdir)

    run = orch(
        "run", str(playbook), "--hosts", str(inventory), "--results", "results", cwd=tmp_path
    )
    text = run.stdout + run.stderr
    print(text)
    assert run.returncode == 1, text
    error = summaries(tmp_path / "results")["onfull_sshd-full"]["error"]
    assert error is not None, text
    assert f"no space left on sshd-full:{workdir}" in error["message"]
    assert "Failure" not in error["message"]
    assert "onfull on sshd-full failed: no space left on sshd-full:" in flat(text)
    said = f"no space left on sshd-full:{workdir} (launch)"
    assert "".join(said.split()) in "".join(text.split())  # rich wraps inside the path
    assert "Traceback" not in text
    assert not any(alive(s["pid"]) for s in engines(host, workdir)), "an engine is running"
    no_process_left(host)
