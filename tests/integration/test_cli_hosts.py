"""`orch hosts check` end to end: the CLI against real sshd hosts.

The CLI runs in this process (`tests/fixtures/cli.py`); one test runs it as a separate
process, as a user's shell does, for the exit code and stderr of a bad inventory.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator.sim.hostsandbox import SYSTEM_PATH
from tests.fixtures.cli import orch_in_process
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

ROOT = Path(__file__).resolve().parents[2]


def write_inventory(
    path: Path,
    factory: SshdFactory,
    hosts: list[SshdHost],
    *,
    gpus: str = "2 x RTX A6000",
    extra: dict | None = None,
) -> Path:
    entries = {h.name: {**h.inventory_entry(), "gpus": gpus, "connect_timeout": 5} for h in hosts}
    entries.update(extra or {})
    doc = {"ssh_config": str(factory.ssh_config_path), "hosts": entries}
    path.write_text(yaml.safe_dump(doc))
    return path


orch = orch_in_process


def orch_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_probes_all_hosts_reuses_agent_and_reports_dead_one(sshd_factory, tmp_path) -> None:
    a, b = sshd_factory.start("gpu-a"), sshd_factory.start("gpu-b")
    known = sshd_factory.write_known_hosts([a, b])
    dead = {
        "address": "127.0.0.1",
        "port": free_port(),
        "python": sys.executable,
        "identity_file": str(a.client_key),
        "connect_timeout": 3,
    }
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [a, b], extra={"gpu-dead": dead})
    args = ("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json")

    first = orch(*args, cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # one host is down
    report = {h["name"]: h for h in json.loads(first.stdout)["hosts"]}
    for name in ("gpu-a", "gpu-b"):
        host = report[name]
        assert host["reachable"] is True and host["error"] is None
        assert [(g["index"], g["name"], g["memory_total_mib"]) for g in host["gpus"]] == [
            (0, "NVIDIA RTX A6000", 49140),
            (1, "NVIDIA RTX A6000", 49140),
        ]
        assert host["engines"] == {"vllm": "0.33.0", "sglang": "0.5.23"}
        assert host["problems"] == []
        assert host["agent_bytes_pushed"] > 1000
    dead_report = report["gpu-dead"]
    assert dead_report["reachable"] is False
    assert f"connection refused by 127.0.0.1:{dead['port']}" in dead_report["error"]
    assert not dead_report["error"].startswith("gpu-dead")  # the entry names the host already
    assert dead_report["hint"]
    assert dead_report["gpus"] == []

    only = orch(*args, "--only", "gpu-a", cwd=tmp_path)
    assert only.returncode == 0, only.stderr
    (host,) = json.loads(only.stdout)["hosts"]
    assert (host["name"], host["agent_bytes_pushed"]) == ("gpu-a", 0)  # same agent file reused

    table = orch(
        "hosts",
        "check",
        "--hosts",
        str(inv),
        "--known-hosts",
        str(known),
        "--only",
        "gpu-b",
        cwd=tmp_path,
    )
    assert table.returncode == 0, table.stderr
    assert "2 x NVIDIA RTX A6000" in table.stdout and "0.33.0" in table.stdout
    assert "Traceback" not in table.stderr

    table = orch(
        "hosts",
        "check",
        "--hosts",
        str(inv),
        "--known-hosts",
        str(known),
        "--only",
        "gpu-dead",
        cwd=tmp_path,
    )
    assert table.returncode == 1
    assert f"unreachable: connection refused by 127.0.0.1:{dead['port']}" in table.stdout


@dataclass
class SilentListener:
    port: int
    most_open: int = 0  # connections open at the same time, at most


@contextlib.contextmanager
def silent_listener() -> Iterator[SilentListener]:
    """A TCP port on 127.0.0.1 that accepts connections and never says a word (a host whose
    sshd hangs, or a firewall that swallows the traffic): the SSH banner never comes. It reads
    and discards what clients send, and counts how many connections were open at once."""
    server = socket.create_server(("127.0.0.1", 0))
    listener = SilentListener(port=server.getsockname()[1])
    done = threading.Event()
    open_conns: set[socket.socket] = set()
    closed: list[socket.socket] = []

    def serve() -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(server, selectors.EVENT_READ)
            while not done.is_set():
                for key, _ in sel.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is server:
                        conn = server.accept()[0]
                        open_conns.add(conn)
                        sel.register(conn, selectors.EVENT_READ)
                        listener.most_open = max(listener.most_open, len(open_conns))
                    elif not sock.recv(4096):  # the client gave up and closed
                        sel.unregister(sock)
                        open_conns.discard(sock)
                        closed.append(sock)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        done.set()
        thread.join(timeout=5)
        server.close()
        for conn in [*open_conns, *closed]:
            conn.close()


def test_silent_hosts_time_out_without_blocking_the_others(sshd_factory, tmp_path) -> None:
    """Three hosts that never answer, each with connect_timeout 2 s: checked one after another,
    each connection would be given up before the next one opens; checked concurrently, all
    three are open at once. The healthy host is reported in full."""
    a = sshd_factory.start("gpu-a")
    known = sshd_factory.write_known_hosts([a])
    with silent_listener() as listener:
        port = listener.port
        silent = {
            f"silent-{i}": {
                "address": "127.0.0.1",
                "port": port,
                "python": sys.executable,
                "identity_file": str(a.client_key),
                "connect_timeout": 2,
            }
            for i in (1, 2, 3)
        }
        inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [a], extra=silent)
        result = orch(
            "hosts",
            "check",
            "--hosts",
            str(inv),
            "--known-hosts",
            str(known),
            "--json",
            cwd=tmp_path,
        )
    assert result.returncode == 1, result.stderr
    report = {h["name"]: h for h in json.loads(result.stdout)["hosts"]}
    assert report["gpu-a"]["reachable"] is True and report["gpu-a"]["problems"] == []
    assert len(report["gpu-a"]["gpus"]) == 2
    for name in silent:
        assert report[name]["reachable"] is False
        assert f"127.0.0.1:{port} within 2s" in report[name]["error"], report[name]
    assert listener.most_open >= 3, "the silent hosts were not checked concurrently"


def test_agent_that_cannot_run_fails_the_check(tmp_path) -> None:
    """An embedded host whose `python` does not exist: reachable (SSH works), but the agent
    cannot run, so the check fails and says so instead of calling the host unreachable."""
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "defaults": {"transport": "embedded"},
                "hosts": {"emb-ok": {}, "emb-badpy": {"python": "/nonexistent/python3"}},
            }
        )
    )
    env = {"ORCH_EMBEDDED_ROOT": str(tmp_path / "embedded")}
    result = orch("hosts", "check", "--hosts", str(inv), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    report = {h["name"]: h for h in json.loads(result.stdout)["hosts"]}
    assert report["emb-ok"]["reachable"] is True and report["emb-ok"]["error"] is None
    assert report["emb-ok"]["problems"] == []
    bad = report["emb-badpy"]
    assert bad["reachable"] is True
    assert "/nonexistent/python3" in bad["error"] and "not found" in bad["error"]
    assert bad["gpus"] == [] and bad["python"] is None

    table = orch("hosts", "check", "--hosts", str(inv), cwd=tmp_path, env=env)
    assert table.returncode == 1
    row = next(line for line in table.stdout.splitlines() if "emb-badpy" in line)
    assert "agent failed: the remote interpreter '/nonexistent/python3' was not found" in row
    assert "unreachable" not in table.stdout
    assert "Traceback" not in table.stderr


def test_host_without_nvidia_smi_says_so(sshd_factory, tmp_path) -> None:
    """No `gpus` declared and no nvidia-smi on the host's PATH: not a failure (nothing was
    expected), but reported instead of "none / ok"."""
    host = sshd_factory.start("no-smi", env={"PATH": SYSTEM_PATH})  # without the fake nvidia-smi
    known = sshd_factory.write_known_hosts([host])
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "ssh_config": str(sshd_factory.ssh_config_path),
                "hosts": {host.name: host.inventory_entry()},
            }
        )
    )
    args = ("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known))
    result = orch(*args, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (entry,) = json.loads(result.stdout)["hosts"]
    assert (entry["reachable"], entry["error"], entry["gpus"]) == (True, None, [])
    assert entry["problems"] == ["no GPU information: nvidia-smi not found on PATH"]
    table = orch(*args, cwd=tmp_path)
    assert table.returncode == 0
    assert "no GPU information: nvidia-smi not found on PATH" in table.stdout
    assert "│ ok" not in table.stdout


def test_unknown_key_refused_then_accepted_with_flag(sshd_factory, tmp_path) -> None:
    host = sshd_factory.start("fresh")
    known = tmp_path / "kh" / "known_hosts"
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [host])
    args = ("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json")

    refused = orch(*args, cwd=tmp_path)
    assert refused.returncode == 1
    (entry,) = json.loads(refused.stdout)["hosts"]
    assert entry["reachable"] is False
    assert host.fingerprint in entry["error"]
    assert "--accept-new-host-keys" in entry["hint"]
    assert not known.exists() or host.public_key_line.split()[1] not in known.read_text()

    accepted = orch(*args, "--accept-new-host-keys", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert host.public_key_line.split()[1] in known.read_text()

    strict = orch(*args, cwd=tmp_path)  # recorded: strict checking now passes
    assert strict.returncode == 0


def test_changed_key_always_refused(sshd_factory, tmp_path) -> None:
    host = sshd_factory.start("moved")
    known = sshd_factory.write_known_hosts([host])
    host.regenerate_host_key()
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [host])
    result = orch(
        "hosts",
        "check",
        "--hosts",
        str(inv),
        "--known-hosts",
        str(known),
        "--json",
        "--accept-new-host-keys",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    (entry,) = json.loads(result.stdout)["hosts"]
    assert entry["reachable"] is False
    assert host.fingerprint in entry["error"]  # the key offered now
    assert "changed" in (entry["error"] + (entry["hint"] or "")).lower()


def test_declared_gpus_must_match(sshd_factory, tmp_path) -> None:
    host = sshd_factory.start("small")
    known = sshd_factory.write_known_hosts([host])
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [host], gpus="4 x RTX A6000")
    result = orch(
        "hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json", cwd=tmp_path
    )
    assert result.returncode == 1
    (entry,) = json.loads(result.stdout)["hosts"]
    assert entry["reachable"] is True
    assert entry["problems"] == ["expected 4 x RTX A6000, found 2 GPUs"]


def test_bad_inventory_is_one_message_no_traceback(tmp_path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  a:\n    adress: 10.0.0.1\n")
    result = orch_process("hosts", "check", "--hosts", str(inv), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"config error: {inv}:3:5"), result.stderr
    assert "did you mean 'address'" in result.stderr
