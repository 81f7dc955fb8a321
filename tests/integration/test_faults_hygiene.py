"""Issue 9, items 9, 11, 13 over real OpenSSH: `orch clean` / `orch ps` with finished and live
runs and two host entries for one workdir; a results disk that fills during `orch run`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.agent.client import Agent
from orchestrator.runner.server import Server, ServerRegistry
from tests.fixtures.leftruns import finished_run
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port
from tests.integration.test_lifecycle_ssh import make_run

pytestmark = pytest.mark.integration


def orch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def inventory(path: Path, factory: SshdFactory, host: SshdHost, names: list[str]) -> Path:
    entries = {n: {**host.inventory_entry(), "connect_timeout": 5} for n in names}
    path.write_text(yaml.safe_dump({"ssh_config": str(factory.ssh_config_path), "hosts": entries}))
    return path


def test_clean_keeps_live_and_newest_ps_shows_shared_workdir_once(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = sshd_factory.start("gpu-a")
    known = sshd_factory.write_known_hosts([host])
    inv = inventory(tmp_path / "hosts.yaml", sshd_factory, host, ["gpu-a", "gpu-a-alias"])
    ssh = ("--hosts", str(inv), "--known-hosts", str(known))
    now = time.time()
    secret_log = "INFO api_key='sk-secret'\n"
    finished_run(host.workdir / "runs", "old-run", ended_at=now - 3 * 86400, log=secret_log)
    finished_run(host.workdir / "runs", "new-run", ended_at=now - 60, log=secret_log)
    config = host.host_config()

    async def scenario() -> None:
        pool = sshd_factory.pool()
        try:
            agent = Agent(await pool.get(config), config)
            async with ServerRegistry() as registry:
                server = await Server.start(
                    agent, make_run(), config, run_id="live-run", port=free_port(),
                    registry=registry,
                )  # fmt: skip
                await server.wait_ready(timeout=60, poll_interval=0.1)
                clean = orch("clean", "--keep", "1", "--json", *ssh, cwd=tmp_path)
                assert clean.returncode == 0, clean.stderr
                report = json.loads(clean.stdout)
                [entry] = report["hosts"]  # two entries, one workdir: pruned once
                assert (entry["host"], entry["also"]) == ("gpu-a", ["gpu-a-alias"])
                assert [p["run_id"] for p in entry["pruned"]] == ["old-run"]
                assert entry["kept"] == ["new-run"] and entry["live"] == ["live-run"]
                assert sorted(p.name for p in (host.workdir / "runs").iterdir()) == [
                    "live-run",
                    "new-run",
                ]
                ps = orch("ps", "--json", *ssh, cwd=tmp_path)
                assert ps.returncode == 0, ps.stderr
                live = json.loads(ps.stdout)["servers"]
                assert [(s["host"], s["also"], s["run_id"]) for s in live] == [
                    ("gpu-a", ["gpu-a-alias"], "live-run")
                ]
                assert live[0]["started_at"] <= time.time() and live[0]["uptime_s"] >= 0
                every = orch("ps", "--all", *ssh, cwd=tmp_path)
                assert every.returncode == 0, every.stderr
                assert "live-run" in every.stdout and "new-run" in every.stdout
                assert "old-run" not in every.stdout and "gpu-a = gpu-a-alias" in every.stdout
                await server.stop(timeout_s=10)
        finally:
            await pool.close()

    asyncio.run(scenario())
    assert host.leftover_pids() == []


def test_results_disk_full_stops_cleanly(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    """Results on a tmpfs with one page free: run 1 fails writing its logs, the playbook stops
    with one message naming the file and ENOSPC, exit 1, no traceback, no server left, run 2
    never launched."""
    results = tmp_path / "results"
    results.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=256k tmpfs {results} 2>/dev/null"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with open(results / "filler", "wb") as fh:  # room for the manifest, not the logs
            fh.write(b"\0" * (256 - 24) * 1024)
        host = sshd_factory.start("gpu-a")
        known = sshd_factory.write_known_hosts([host])
        inv = inventory(tmp_path / "hosts.yaml", sshd_factory, host, ["gpu-a"])
        fast = {"ORCH_SIM_LOAD_S": "0.3", "ORCH_SIM_SPEED": "50"}
        run = {
            "engine": "vllm",
            "speculative": {
                "method": "dflash",
                "draft_model": "z-lab/Qwen3.6-27B-DFlash",
                "num_draft_tokens": 15,
            },
            "extra_args": ["--attention-backend", "flash_attn"],
            "env": {**fast, "VLLM_USE_V2_MODEL_RUNNER": "1"},
        }
        book = {
            "name": "full",
            "hosts": ["gpu-a"],
            "defaults": {
                "model": "Qwen/Qwen3.6-27B",
                "tensor_parallel": 2,
                "workload": {"prompts": "builtin:chat", "num_prompts": 8, "concurrency": 2},
            },
            "runs": [
                {"name": "first", "port": free_port(), **run},
                {"name": "second", "port": free_port(), **run},
            ],
        }
        playbook = tmp_path / "full.yaml"
        playbook.write_text(yaml.safe_dump(book, sort_keys=False))
        args = ("--hosts", str(inv), "--known-hosts", str(known), "--results", str(results))
        proc = orch("run", str(playbook), *args, cwd=tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
        assert "no space left on device" in proc.stderr
        assert "cannot write " in proc.stderr and "first" in proc.stderr
        assert "second" in proc.stderr  # named as not finished
        launched = sorted(p.name for p in (host.workdir / "runs").iterdir())
        assert len(launched) == 1 and launched[0].startswith("first-")
        # the engine was stopped before orch exited: its supervisor recorded the exit
        assert (host.workdir / "runs" / launched[0] / "exit.json").is_file()
        # the agent processes of the cut streams end when they see their channel close,
        # which may be a moment after orch's exit (hang guard only)
        for _ in range(300):
            if not host.leftover_pids():
                break
            time.sleep(0.1)
        assert host.leftover_pids() == []
    finally:
        os.system(f"umount {results}")
