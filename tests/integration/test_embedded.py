"""Embedded hosts: an asyncssh server inside this process, reached through the same SSH client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.config.hostconfig import HostConfig
from orchestrator.errors import HostError, HostKeyUnknown, HostTimeout, RemoteCommandError
from orchestrator.sim.embedded import SimulatedHosts, embedded_root
from orchestrator.transport import ConnectionPool
from tests.fixtures.argv import AWKWARD, PRINT_ARGV
from tests.fixtures.procs import alive

pytestmark = pytest.mark.integration


def sandbox_of(name: str) -> Path:
    return embedded_root(name).resolve()


def pool_for(tmp_path: Path) -> ConnectionPool:
    # A known_hosts that does not exist: embedded hosts must not need (or touch) it.
    return ConnectionPool(
        known_hosts=tmp_path / "kh" / "known_hosts", ssh_config=[], embedded=SimulatedHosts
    )


def test_a_pool_without_the_simulator_names_the_embedded_host(tmp_path):
    """The transport does not import the simulator: a pool not handed its hosts says so."""
    host = HostConfig(name="emb-x", transport="embedded", python=sys.executable)

    async def scenario():
        async with ConnectionPool(known_hosts=tmp_path / "known_hosts", ssh_config=[]) as pool:
            await pool.get(host)

    with pytest.raises(HostError) as failed:
        asyncio.run(scenario())
    assert failed.value.host == "emb-x"
    assert "transport: embedded needs orch's simulator" in str(failed.value)
    assert "SimulatedHosts" in (failed.value.hint or "")
    assert not (tmp_path / "embedded").exists()


def test_a_pool_on_ssh_hosts_never_imports_the_simulator(tmp_path):
    """``open_pool`` hands in a factory that imports the simulator only when it is called."""
    code = (
        "import asyncio, sys\n"
        "from orchestrator.commands.session import simulated_hosts\n"
        "from orchestrator.transport import ConnectionPool\n"
        "async def main():\n"
        "    async with ConnectionPool(ssh_config=[], embedded=simulated_hosts):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('orchestrator.sim')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_commands_run_in_the_sandbox_with_a_clean_env(embedded_hosts, tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_LEAK_CHECK", "controller-only")
    host = embedded_hosts[0]
    show = 'echo "$PATH"; echo "$HOME"; pwd; echo "${ORCH_LEAK_CHECK-unset}"'
    query = "--query-gpu=index,name,memory.total,memory.used,utilization.gpu"

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(host)
            env = await conn.run(["sh", "-c", show], check=True)
            smi = await conn.run(["nvidia-smi", query, "--format=csv,noheader,nounits"], check=True)
            vllm = await conn.run(["sh", "-c", "command -v vllm"], check=True)
            return env.stdout.splitlines(), smi.stdout.splitlines(), vllm.stdout.strip()

    (path, home, cwd, leak), smi, vllm = asyncio.run(scenario())
    root = sandbox_of(host.name)
    assert path.split(":")[0] == str(root / "bin")
    assert home == cwd == str(root / "home")
    assert leak == "unset"
    assert vllm == str(root / "bin" / "vllm")
    assert [line.split(", ")[:3] for line in smi] == [
        ["0", "NVIDIA RTX A6000", "49140"],
        ["1", "NVIDIA RTX A6000", "49140"],
    ]
    assert not (tmp_path / "kh").exists()


def test_argv_items_reach_the_embedded_process_unchanged(embedded_hosts, tmp_path):
    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(embedded_hosts[0])
            return await conn.run([sys.executable, "-c", PRINT_ARGV, *AWKWARD], check=True)

    assert json.loads(asyncio.run(scenario()).stdout) == AWKWARD
    assert not Path("/tmp/orch-pwned").exists()


def test_sftp_starts_in_the_sandbox_home(embedded_hosts, tmp_path):
    host = embedded_hosts[0]

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(host)
            home = await conn.home()
            await conn.makedirs("~/.cache/orch/specs")
            sent = await conn.put_bytes(b"\x00\xffbinary", "~/.cache/orch/specs/a.json")
            again = await conn.put_bytes(b"second", "~/.cache/orch/specs/a.json", mode=0o644)
            data = await conn.read_bytes(f"{home}/.cache/orch/specs/a.json")
            there = await conn.exists("~/.cache/orch/specs/a.json")
            gone = await conn.exists("~/.cache/orch/specs/b.json")
            with pytest.raises(RemoteCommandError, match="no such file"):
                await conn.read_bytes("~/missing")
            return home, sent, again, data, there, gone, conn.bytes_pushed

    home, sent, again, data, there, gone, pushed = asyncio.run(scenario())
    target = sandbox_of(host.name) / "home" / ".cache" / "orch" / "specs" / "a.json"
    assert home == str(sandbox_of(host.name) / "home")
    assert (sent, again, pushed) == (8, 6, 14)
    assert data == b"second" == target.read_bytes()
    assert target.stat().st_mode & 0o777 == 0o644
    assert (there, gone) == (True, False)
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.json"]


def test_exit_status_stderr_and_timeouts(embedded_hosts, tmp_path):
    script = "import sys; print('out'); print('oops', file=sys.stderr); sys.exit(7)"
    shell_pid = tmp_path / "shell.pid"
    # The session's own shell is $PPID here: SIGKILL it to see a death by signal reported.
    # The sleeps outlast any test: a run() that waited for them instead of the kill or the
    # timeout would hang the test (pytest-timeout), whatever the machine's load.
    victim = f"echo $PPID > {shell_pid}; exec sleep 600 >/dev/null 2>&1"

    async def kill_shell_soon():
        while not shell_pid.exists() or not shell_pid.read_text().strip():
            await asyncio.sleep(0.01)
        os.kill(int(shell_pid.read_text()), signal.SIGKILL)

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(embedded_hosts[0])
            done = await conn.run([sys.executable, "-c", script])
            killed, _ = await asyncio.gather(conn.run(["sh", "-c", victim]), kill_shell_soon())
            with pytest.raises(RemoteCommandError, match="exited with 7"):
                await conn.run([sys.executable, "-c", script], check=True)
            with pytest.raises(HostTimeout):
                await conn.run(["sleep", "600"], timeout=0.3)
            return done, killed

    done, killed = asyncio.run(scenario())
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "oops\n")
    assert killed.returncode == -9


def test_large_output_is_not_cut_short(embedded_hosts, tmp_path):
    script = "import sys; sys.stdout.write('x' * 3_000_000); sys.stderr.write('e' * 300_000)"

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(embedded_hosts[0])
            return await conn.run([sys.executable, "-c", script], check=True)

    done = asyncio.run(scenario())
    assert (len(done.stdout), len(done.stderr)) == (3_000_000, 300_000)


def test_stream_is_live_and_leaving_it_kills_the_command(embedded_hosts, tmp_path):
    pid_file, term_file = tmp_path / "pids", tmp_path / "term"
    script = (
        f"trap 'echo TERM > {term_file}; exit 143' TERM\n"
        "sleep 30 &\n"
        f'echo "$$ $!" > {pid_file}\n'
        "i=0; while true; do echo $i; i=$((i+1)); sleep 0.05; done\n"
    )

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(embedded_hosts[0])
            seen = []
            async with conn.open_stream(["sh", "-c", script]) as lines:
                async for line in lines:  # the script never ends: only a live stream gets here
                    seen.append(line)
                    if line == "3":
                        break
            return seen

    assert asyncio.run(scenario()) == ["0", "1", "2", "3"]
    shell, child = (int(p) for p in pid_file.read_text().split())
    deadline = time.monotonic() + 30
    while (alive(shell) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(shell) and not alive(child)  # the whole process group is gone
    assert term_file.read_text() == "TERM\n"  # the TERM request reached the command


def test_sandbox_persists_across_pools_with_a_new_key_and_port(embedded_hosts, tmp_path):
    host = embedded_hosts[0]

    async def session(action):
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(host)
            result = await action(conn)
            return result, conn.peer

    async def push(conn):
        await conn.makedirs("~/.cache/orch")
        return await conn.put_bytes(b"agent", "~/.cache/orch/agent-1234.pyz")

    async def look(conn):
        return await conn.exists("~/.cache/orch/agent-1234.pyz")

    pushed, (addr1, port1) = asyncio.run(session(push))
    found, (addr2, port2) = asyncio.run(session(look))
    assert pushed == 5 and found
    assert addr1 == addr2 == "127.0.0.1" and port1 != port2
    with pytest.raises(ConnectionRefusedError):  # stopped with its pool
        socket.create_connection(("127.0.0.1", port2), timeout=1).close()


def test_embedded_key_is_trusted_by_its_own_pool_only(embedded_hosts, tmp_path):
    """Reaching the embedded server as an ordinary ssh host fails the strict host key check."""
    host = embedded_hosts[0]

    async def scenario():
        async with pool_for(tmp_path) as pool:
            conn = await pool.get(host)
            addr, port = conn.peer
            outsider = ConnectionPool(known_hosts=tmp_path / "other_known_hosts", ssh_config=[])
            try:
                with pytest.raises(HostKeyUnknown) as refused:
                    await outsider.get(
                        host.__class__(name="outsider", address=addr, port=port, connect_timeout=5)
                    )
            finally:
                await outsider.close()
            return refused.value

    error = asyncio.run(scenario())
    assert error.host == "outsider" and "--accept-new-host-keys" in (error.hint or "")


def test_two_embedded_hosts_are_separate(embedded_hosts, tmp_path):
    async def scenario():
        async with pool_for(tmp_path) as pool:
            conns = await asyncio.gather(*(pool.get(h) for h in embedded_hosts))
            homes = await asyncio.gather(*(c.home() for c in conns))
            again = await pool.get(embedded_hosts[0])
            return homes, conns, again

    homes, conns, again = asyncio.run(scenario())
    assert homes == [str(sandbox_of(h.name) / "home") for h in embedded_hosts]
    assert again is conns[0] and conns[0].peer != conns[1].peer
