"""A CPU host end to end: a real sshd host declared ``gpus: none`` with no nvidia-smi on its
PATH (the engine simulator stays installed), as the real vLLM CPU build's hosts are; and
embedded hosts declared so, on the simulator or on a (stand-in) real engine's venv.

`orch hosts check` passes without a driver, and `orch run` of a one-device vLLM run completes:
no GPU is asked for, and the results name the CPU instead of a GPU model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.results.model import RunResult
from orchestrator.sim.hostsandbox import SYSTEM_PATH, prepare_host_sandbox
from orchestrator.sim.versions import SGLANG_VERSION, VLLM_VERSION
from tests.fixtures.cli import orch_in_process
from tests.fixtures.engine_venv import make_engine_venv
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

HOST = "cpu-1"
PLAYBOOK = {
    "name": "cpu-host",
    "hosts": [HOST],
    "runs": [
        {
            "name": "plain",
            "engine": "vllm",
            "model": "Qwen/Qwen3-8B",
            "tensor_parallel": 1,
            "max_model_len": 4096,
            "workload": {
                "prompts": "builtin:mixed",
                "num_prompts": 4,
                "concurrency": 1,  # one stream: no wave of first tokens for a busy client to read late
                "max_tokens": 32,
                "ignore_eos": True,
                "warmup": 1,
            },
        }
    ],
}


def start_cpu_host(factory: SshdFactory, tmp_path: Path) -> SshdHost:
    """An sshd host whose PATH has the simulator's ``vllm`` and ``python`` but no nvidia-smi:
    a folder of links to the sandbox's programs, all but that one."""
    sandbox = prepare_host_sandbox(factory.base / HOST / "sandbox", python=sys.executable)
    bin_dir = Path(sandbox.env()["PATH"].split(":")[0])
    links = tmp_path / "cpu-bin"
    links.mkdir()
    for program in bin_dir.iterdir():
        if program.name != "nvidia-smi":
            (links / program.name).symlink_to(program)
    assert (links / "vllm").exists() and not (links / "nvidia-smi").exists()
    return factory.start(HOST, env={"PATH": f"{links}:{SYSTEM_PATH}"})


def write_inventory(factory: SshdFactory, host: SshdHost, path: Path) -> Path:
    entry = {
        **host.inventory_entry(),
        "gpus": "none",
        "connect_timeout": 5,
        # speed 2: a decode step outlasts a busy CPU's client lag (a first chunk
        # read with the second fails the run as client-saturated)
        "env": {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "2"},
    }
    doc = {
        "known_hosts": str(factory.write_known_hosts([host])),
        "ssh_config": str(factory.ssh_config_path),
        "hosts": {HOST: entry},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_cpu_host_passes_hosts_check_and_runs_a_playbook(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = start_cpu_host(sshd_factory, tmp_path)
    hosts = write_inventory(sshd_factory, host, tmp_path / "hosts.yaml")

    checked = orch_in_process("hosts", "check", "--hosts", str(hosts), "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (entry,) = json.loads(checked.stdout)["hosts"]
    assert (entry["error"], entry["gpus"], entry["driver"], entry["cpu_only"]) == (
        None,
        [],
        None,
        True,
    )
    assert entry["problems"] == []  # no "no GPU information" warning: none was expected
    table = orch_in_process("hosts", "check", "--hosts", str(hosts), cwd=tmp_path)
    assert table.returncode == 0 and "none (CPU host)" in table.stdout

    book = PLAYBOOK | {"runs": [PLAYBOOK["runs"][0] | {"port": free_port()}]}  # type: ignore[index]
    (tmp_path / "play.yaml").write_text(yaml.safe_dump(book, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", str(tmp_path / "play.yaml")]
        + ["--hosts", str(hosts), "--results", str(tmp_path / "results")],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (results,) = (tmp_path / "results").iterdir()
    run_dir = results / f"plain_{HOST}"
    result = RunResult.load(run_dir / "summary.json")
    assert result.error is None and result.requests is not None
    assert result.requests.completed == 4 and result.requests.failed == 0
    assert (result.settings.gpu_name, result.settings.gpu_count) == ("CPU", 1)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["host_config"]["gpus"] == "none"
    assert "CUDA_VISIBLE_DEVICES" not in manifest["env"]
    assert manifest["host_facts"]["gpus"] == []
    assert manifest["host_facts"]["nvidia_smi_error"] == "nvidia-smi not found on PATH"
    deadline = time.monotonic() + 5  # sshd session processes exit as the connection closes
    while host.leftover_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.leftover_pids() == [], "a process started through the host is still running"


def test_gpus_on_a_host_declared_none_are_a_warning(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The host's nvidia-smi shows two A6000s: the declaration is probably wrong, which hosts
    check says without failing (the host can still run on its CPU)."""
    host = sshd_factory.start("cpu-with-gpus")  # the sandbox's fake nvidia-smi on its PATH
    hosts = write_inventory(sshd_factory, host, tmp_path / "hosts.yaml")
    checked = orch_in_process("hosts", "check", "--hosts", str(hosts), "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (entry,) = json.loads(checked.stdout)["hosts"]
    assert len(entry["gpus"]) == 2 and entry["cpu_only"] is True
    assert entry["problems"] == [
        "hosts.yaml declares `gpus: none` (a CPU host) but nvidia-smi shows 2 GPUs (NVIDIA RTX "
        "A6000): orch runs no GPU here; declare `gpus: 2 x NVIDIA RTX A6000` if the engine "
        "should use them"
    ]


def embedded_check(tmp_path: Path, hosts: dict[str, dict[str, object]]) -> dict[str, Any]:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"hosts": hosts}))
    env = {"ORCH_EMBEDDED_ROOT": str(tmp_path / "embedded")}
    checked = orch_in_process(
        "hosts", "check", "--hosts", str(inv), "--json", cwd=tmp_path, env=env
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return {entry["name"]: entry for entry in json.loads(checked.stdout)["hosts"]}


def test_an_embedded_cpu_host_simulates_no_gpu(tmp_path: Path) -> None:
    """`gpus: none` on an embedded host: the engine simulator, but no fake nvidia-smi, so no
    GPU shows and nothing is reported missing."""
    report = embedded_check(
        tmp_path,
        {
            "emb-cpu": {"transport": "embedded", "gpus": "none"},
            "emb-gpu": {"transport": "embedded"},
        },
    )
    cpu, gpu = report["emb-cpu"], report["emb-gpu"]
    assert (cpu["gpus"], cpu["driver"], cpu["cpu_only"], cpu["problems"]) == ([], None, True, [])
    assert cpu["engines"] == {"vllm": VLLM_VERSION, "sglang": SGLANG_VERSION}
    assert [g["name"] for g in gpu["gpus"]] == ["NVIDIA RTX A6000"] * 2


def test_an_embedded_host_on_a_real_engines_venv_sees_that_engine(tmp_path: Path) -> None:
    """`python:` another interpreter (the real CPU build's venv): its own vllm, no simulator."""
    python = make_engine_venv(tmp_path / "engine", version="0.32.0+cpu")
    report = embedded_check(
        tmp_path,
        {"emb-real": {"transport": "embedded", "gpus": "none", "python": str(python)}},
    )
    real = report["emb-real"]
    assert real["engines"] == {"vllm": "0.32.0+cpu", "sglang": None}
    assert (real["gpus"], real["cpu_only"], real["problems"]) == ([], True, [])
