"""Ctrl-C during `orch run` stops every server orch started (issue 3), through the real CLI.

Two embedded hosts serve a workload far too long to finish; once both runs are measuring, the
CLI's whole process group gets SIGINT (what a terminal's Ctrl-C does: the agent commands the
embedded hosts run get it too; the engines, detached in their own sessions, do not). It must
exit 130 within seconds, leaving no engine, supervisor or agent process behind, and no
simulated GPU memory held. A clean-up that cannot finish is given up a grace period after the
second signal, naming what may still run. Over OpenSSH, the CLI alone gets SIGINT.

The run's decisions for the other stop requests (SIGTERM: 143; SIGINT twice: the clean-up still
stops every server, "please wait" said) are checked in-process on FakeAgents, in
tests/unit/test_runner_faults_fake.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.fixtures.procs import alive, kill_tree, pids_with_env
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"
HOSTS = ("emb-1", "emb-2")
RUNS = {"sglang-long": "emb-1", "vllm-long": "emb-2"}
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 60.0  # a hang guard: orch stops in about a second


def with_ports(src: Path, dest: Path) -> Path:
    """Copy a playbook, giving every run a free port (other tests and demos share 127.0.0.1)."""
    book = yaml.safe_load(src.read_text())
    for run in book["runs"]:
        run["port"] = free_port()
    dest.write_text(yaml.safe_dump(book, sort_keys=False))
    return dest


def _default_sigint() -> None:
    """A shell starts background jobs with SIGINT ignored, and pytest may be one: give the CLI
    the disposition it has in a terminal, where Ctrl-C is meant to reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def host_processes(root: Path) -> list[tuple[int, str]]:
    """Live processes started through the embedded hosts: they all inherit the sandbox's HOME
    (detached engines included); also anything whose command line names the sandbox."""
    found = {pid for host in HOSTS for pid in pids_with_env("HOME", str(root / host / "home"))}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(root).encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    result = []
    for pid in sorted(found):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if alive(pid):
            result.append((pid, cmd[:200]))
    return result


def servers(root: Path) -> list[dict]:
    """The server.json of every run launched on the hosts (pid, process group, supervisor)."""
    return [
        json.loads(p.read_text())
        for host in HOSTS
        for p in (root / host / "home" / ".cache" / "orch" / "runs").glob("*/server.json")
    ]


def wait_until_measuring(proc: subprocess.Popen[str], stderr: Path, root: Path) -> list[dict]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = stderr.read_text()
        started = servers(root)
        if (
            all(f"{host} {run}: measuring" in text for run, host in RUNS.items())
            and len(started) == len(RUNS)
            and all(alive(s["pid"]) for s in started)
        ):
            return started
        assert proc.poll() is None, f"orch exited early ({proc.returncode}):\n{text}"
        time.sleep(0.1)
    raise AssertionError(
        f"the runs were not both measuring after {START_TIMEOUT_S}s:\n{stderr.read_text()}"
    )


def start_orch(tmp_path: Path, root: Path, **env: str) -> subprocess.Popen[str]:
    """`orch run` of the long playbook on the embedded hosts, in its own session (as a job in
    a terminal), with stderr in tmp_path/stderr.txt."""
    playbook = with_ports(DATA / "interrupt.yaml", tmp_path / "interrupt.yaml")
    env = {
        **os.environ,
        "ORCH_EMBEDDED_ROOT": str(root),
        "ORCH_E2E_SECRET": uuid.uuid4().hex,
        **env,
    }
    argv = [
        sys.executable,
        "-m",
        "orchestrator",
        "run",
        str(playbook),
        "--hosts",
        str(DATA / "hosts-embedded.yaml"),
        "--results",
        str(tmp_path / "results"),
    ]
    with (tmp_path / "stderr.txt").open("w") as err, (tmp_path / "stdout.txt").open("w") as out:
        return subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )


def clean_up(proc: subprocess.Popen[str], root: Path) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid, _ in host_processes(root):
        kill_tree(pid)


def test_ctrl_c_stops_every_server(tmp_path: Path) -> None:
    root = tmp_path / "embedded"
    stderr = tmp_path / "stderr.txt"
    proc = start_orch(tmp_path, root)
    try:
        started = wait_until_measuring(proc, stderr, root)
        held = list((root / HOSTS[0] / "state").glob("gpu-*.json"))
        assert held, "the simulated engine holds no GPU memory while serving"
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
        returncode = proc.wait(timeout=EXIT_TIMEOUT_S)
        text = stderr.read_text()
        assert returncode == 130, text
        assert "interrupted: the servers this run started were stopped" in text
        assert "Traceback" not in text
        assert "please wait" not in text  # one signal: no second one to answer
        for server in started:
            assert not alive(server["pid"]), f"engine {server['pid']} still running"
            assert not alive(server["supervisor_pid"]), "its supervisor still running"
        assert host_processes(root) == []
        for host in HOSTS:  # every simulated GPU released (what nvidia-smi on the host reads)
            assert list((root / host / "state").glob("gpu-*.json")) == []
    finally:
        clean_up(proc, root)


def test_stuck_clean_up_gives_up_and_says_what_may_still_run(tmp_path: Path) -> None:
    """Engines frozen (SIGSTOP: like one stuck in a driver call, SIGTERM does nothing) make
    the clean-up wait for its SIGKILL timeout; after a second Ctrl-C orch waits at most the
    grace period, then exits 130 naming the hosts and the commands that stop what is left,
    and those commands do stop it."""
    root = tmp_path / "embedded"
    stderr = tmp_path / "stderr.txt"
    proc = start_orch(tmp_path, root, ORCH_STOP_GRACE_S="1")
    try:
        started = wait_until_measuring(proc, stderr, root)
        for server in started:
            os.killpg(server["pgid"], signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=EXIT_TIMEOUT_S)
        text = stderr.read_text()
        assert returncode == 130, text
        # given up by the grace period, not after the frozen engines' SIGKILL timeout: the
        # message below is printed only by the give-up path
        assert "please wait (giving up in 1 s)" in text
        hosts = f"--hosts {DATA / 'hosts-embedded.yaml'} --only emb-1 --only emb-2"
        assert (
            "gave up: the clean-up still ran 1 s after the second signal; engine servers may "
            "still run on emb-1, emb-2\n"
            f"  list them: orch ps {hosts}\n"
            f"  stop them: orch stop --all {hosts}\n"
        ) in text
        assert "Traceback" not in text
        assert all(alive(server["pid"]) for server in started)  # given up before they died

        argv = [
            sys.executable,
            "-m",
            "orchestrator",
            "stop",
            "--all",
            *hosts.split(),
            "--timeout",
            "1",
        ]
        stopped = subprocess.run(
            argv,
            cwd=tmp_path,
            env={**os.environ, "ORCH_EMBEDDED_ROOT": str(root)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        for server in started:
            assert not alive(server["pid"]), f"engine {server['pid']} still running after orch stop"
    finally:
        for server in servers(root):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server["pgid"], signal.SIGKILL)
        clean_up(proc, root)


# -- over OpenSSH (issue 9, item 8) ----------------------------------------------------------


def agent_pids(host: SshdHost, verb: str) -> list[int]:
    """The host's agent processes running ``verb`` (by their command line)."""
    found = []
    for pid in host.leftover_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b".pyz") for a in argv) and verb.encode() in argv:
            found.append(pid)
    return found


def test_ctrl_c_over_sshd_ends_the_load_generator_and_stops_the_engine_by_sigterm(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """Over real sshd, as root (sshd refuses to forward signals to root's commands): Ctrl-C
    closes the agent's stdin, which ends the remote load generator; the engine, no longer
    sent requests, ends on SIGTERM (exit code 0, its shutdown logged), never SIGKILL; the
    console says what the clean-up waits for."""
    host = sshd_factory.start("sshd-int")
    entry = {
        **host.inventory_entry(),
        "gpus": "2 x RTX A6000",
        "env": {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4", "VLLM_LOG_STATS_INTERVAL": "1"},
    }
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(sshd_factory.write_known_hosts()),
                "ssh_config": str(sshd_factory.ssh_config_path),
                "hosts": {"sshd-int": entry},
            }
        )
    )
    book = yaml.safe_load((DATA / "interrupt.yaml").read_text())
    book["hosts"] = ["sshd-int"]
    book["runs"] = [{**book["runs"][1], "hosts": ["sshd-int"], "port": free_port()}]
    playbook = tmp_path / "interrupt.yaml"
    playbook.write_text(yaml.safe_dump(book, sort_keys=False))
    argv = [sys.executable, "-m", "orchestrator", "run", str(playbook), "--hosts", str(inventory)]
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err, (tmp_path / "stdout.txt").open("w") as out:
        proc = subprocess.Popen(
            [*argv, "--results", str(tmp_path / "results")],
            cwd=tmp_path,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "sshd-int vllm-long: measuring" not in stderr.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        [loadgen] = agent_pids(host, "loadgen")
        [server] = [
            json.loads(p.read_text()) for p in (host.workdir / "runs").glob("*/server.json")
        ]
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=EXIT_TIMEOUT_S)
        text = stderr.read_text()
        assert returncode == 130, text
        said = " ".join(text.split())
        assert "stopping 1 server on sshd-int (SIGTERM, up to 30 s)" in said
        assert "interrupted: the servers this run started were stopped" in said
        assert "Traceback" not in text
        assert not alive(loadgen), "the load generator outlived its controller"
        run_dir = host.workdir / "runs" / server["run_id"]
        ended = json.loads((run_dir / "exit.json").read_text())
        assert (ended["returncode"], ended["signal"]) == (0, None)  # SIGTERM, drained: no -9
        assert "Application shutdown complete." in (run_dir / "server.log").read_text()
        deadline = time.monotonic() + 10  # session processes exit as the connection closes
        while host.leftover_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.leftover_pids() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        host.stop()
