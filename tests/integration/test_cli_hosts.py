"""`orch hosts check` end to end: the real CLI process against real sshd hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

ROOT = Path(__file__).resolve().parents[2]


def write_inventory(path: Path, factory: SshdFactory, hosts: list[SshdHost], *,
                    gpus: str = "2 x RTX A6000", extra: dict | None = None) -> Path:
    entries = {h.name: {**h.inventory_entry(), "gpus": gpus, "connect_timeout": 5} for h in hosts}
    entries.update(extra or {})
    doc = {"ssh_config": str(factory.ssh_config_path), "hosts": entries}
    path.write_text(yaml.safe_dump(doc))
    return path


def orch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_check_probes_all_hosts_reuses_agent_and_reports_dead_one(sshd_factory, tmp_path) -> None:
    a, b = sshd_factory.start("gpu-a"), sshd_factory.start("gpu-b")
    known = sshd_factory.write_known_hosts([a, b])
    dead = {"address": "127.0.0.1", "port": free_port(), "python": sys.executable,
            "identity_file": str(a.client_key), "connect_timeout": 3}
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [a, b], extra={"gpu-dead": dead})
    args = ("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json")

    first = orch(*args, cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # one host is down
    report = {h["name"]: h for h in json.loads(first.stdout)["hosts"]}
    for name in ("gpu-a", "gpu-b"):
        host = report[name]
        assert host["reachable"] is True and host["error"] is None
        assert [(g["index"], g["name"], g["memory_total_mib"]) for g in host["gpus"]] == [
            (0, "NVIDIA RTX A6000", 49140), (1, "NVIDIA RTX A6000", 49140)]
        assert host["engines"] == {"vllm": "0.33.0", "sglang": "0.5.23"}
        assert host["problems"] == []
        assert host["agent_bytes_pushed"] > 1000
    assert report["gpu-dead"]["reachable"] is False
    assert "gpu-dead" not in (report["gpu-dead"]["error"] or "") or "refused" in report["gpu-dead"]["error"]
    assert report["gpu-dead"]["gpus"] == []

    only = orch(*args, "--only", "gpu-a", cwd=tmp_path)
    assert only.returncode == 0, only.stderr
    (host,) = json.loads(only.stdout)["hosts"]
    assert (host["name"], host["agent_bytes_pushed"]) == ("gpu-a", 0)  # same agent file reused

    table = orch("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known),
                 "--only", "gpu-b", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "2 x NVIDIA RTX A6000" in table.stdout and "0.33.0" in table.stdout
    assert "Traceback" not in table.stderr


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
    result = orch("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json",
                  "--accept-new-host-keys", cwd=tmp_path)
    assert result.returncode == 1
    (entry,) = json.loads(result.stdout)["hosts"]
    assert entry["reachable"] is False
    assert host.fingerprint in entry["error"]  # the key offered now
    assert "changed" in (entry["error"] + (entry["hint"] or "")).lower()


def test_declared_gpus_must_match(sshd_factory, tmp_path) -> None:
    host = sshd_factory.start("small")
    known = sshd_factory.write_known_hosts([host])
    inv = write_inventory(tmp_path / "hosts.yaml", sshd_factory, [host], gpus="4 x RTX A6000")
    result = orch("hosts", "check", "--hosts", str(inv), "--known-hosts", str(known), "--json",
                  cwd=tmp_path)
    assert result.returncode == 1
    (entry,) = json.loads(result.stdout)["hosts"]
    assert entry["reachable"] is True
    assert entry["problems"] == ["expected 4 x RTX A6000, found 2 GPUs"]


def test_bad_inventory_is_one_message_no_traceback(tmp_path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  a:\n    adress: 10.0.0.1\n")
    result = orch("hosts", "check", "--hosts", str(inv), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{inv}:3:5" in result.stderr
    assert "did you mean 'address'" in result.stderr
