"""A host's name appears once per message: lines that already name the host (`orch run`'s
failures, `orch stop`, `orch ps`) print the error without the "<host>: " its text starts with.

The host is a closed port on 127.0.0.1, through the real CLI: connection refused at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.cli import orch_in_process
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

PLAYBOOK = {
    "name": "dead-host",
    "hosts": ["dead"],
    "runs": [
        {
            "name": "a",
            "engine": "vllm",
            "model": "Qwen/Qwen3.6-27B",
            "tensor_parallel": 2,
            "workload": {"prompts": "builtin:chat", "num_prompts": 2, "max_tokens": 16},
        }
    ],
}


def orch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def dead_host(tmp_path: Path) -> tuple[list[str], str]:
    """(the --hosts/--known-hosts options of an inventory whose host `dead` refuses TCP,
    the refusal's text)."""
    port = free_port()
    inventory = {
        "hosts": {
            "dead": {
                "address": "127.0.0.1",
                "port": port,
                "python": sys.executable,
                "connect_timeout": 3,
                "gpus": "2 x RTX A6000",
            }
        }
    }
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "known_hosts").write_text("")
    options = [
        "--hosts",
        str(tmp_path / "hosts.yaml"),
        "--known-hosts",
        str(tmp_path / "known_hosts"),
    ]
    return options, f"connection refused by 127.0.0.1:{port}"


def test_run_failure_names_the_host_once(tmp_path: Path) -> None:
    options, refused = dead_host(tmp_path)
    (tmp_path / "play.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    result = orch(
        "run", "play.yaml", *options, "--results", str(tmp_path / "results"), cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"a on dead failed: {refused}\n" in result.stdout
    assert "dead: dead" not in result.stdout + result.stderr
    assert f"dead a: failed: {refused}" in result.stderr  # the live console line too
    # the summary keeps the whole text (it is read without the console's context)
    (summary,) = (tmp_path / "results").glob("*/a_dead/summary.json")
    assert json.loads(summary.read_text())["error"]["message"] == f"dead: {refused}"


def test_stop_and_ps_name_the_host_once(tmp_path: Path) -> None:
    options, refused = dead_host(tmp_path)
    stop = orch_in_process("stop", "--all", *options, cwd=tmp_path)
    assert stop.returncode == 1
    lines = stop.stdout.splitlines()
    assert lines[:2] == ["nothing was running on the hosts that answered", f"dead: {refused}"]
    assert lines[2].startswith("  hint: ") and len(lines) == 3  # the transport's advice

    listed = orch_in_process("ps", *options, "--json", cwd=tmp_path)
    assert listed.returncode == 1
    report = json.loads(listed.stdout)
    assert report["servers"] == []
    assert [(e["host"], e["error"]) for e in report["errors"]] == [("dead", refused)]
    assert report["errors"][0]["hint"] == lines[2].removeprefix("  hint: ")
    table = orch_in_process("ps", *options, cwd=tmp_path)
    assert f"│ dead │ -   │ {refused} │" in table.stdout
    assert "dead: dead" not in table.stdout
