"""The fake nvidia-smi prints what the real one prints, and counts memory of live processes only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sim.gpus import (
    Activity,
    GpuActivity,
    GpuFacts,
    GpuProcess,
    activity,
    gpu_uuid,
    live_processes,
    register_process,
)
from orchestrator.sim.nvidia_smi import list_gpus, query_apps, query_gpus, snapshot, table
from orchestrator.sim.sandbox import Sandbox

FACTS = GpuFacts(count=2, name="NVIDIA RTX A6000", memory_mib=49140, driver_version="580.95.05")
PROC = GpuProcess(pid=4021, gpus=(0, 1), memory_mib=44226, process_name="/usr/bin/python3")


@pytest.mark.parametrize(
    ("fields", "header", "units", "expected"),
    [
        (["index", "name", "memory.total", "memory.used"], True, True,
         "index, name, memory.total [MiB], memory.used [MiB]\n"
         "0, NVIDIA RTX A6000, 49140 MiB, 44227 MiB\n"
         "1, NVIDIA RTX A6000, 49140 MiB, 1 MiB\n"),
        (["index", "memory.used", "memory.free", "utilization.gpu"], False, False,
         "0, 44227, 4913, 0\n1, 1, 49139, 0\n"),
        (["memory.used", "utilization.gpu", "driver_version", "pci.bus_id"], True, False,
         "memory.used [MiB], utilization.gpu [%], driver_version, pci.bus_id\n"
         "44227, 0, 580.95.05, 00000000:01:00.0\n1, 0, 580.95.05, 00000000:02:00.0\n"),
        (["utilization.gpu", "count"], False, True, "0 %, 2\n0 %, 2\n"),
    ],
)  # fmt: skip
def test_query_gpu_csv(fields: list[str], header: bool, units: bool, expected: str) -> None:
    gpus = snapshot(FACTS, [GpuProcess(4021, (0,), 44226, "python3")])
    assert query_gpus(gpus, fields, header=header, units=units) == expected


def test_a_throttled_gpu_reports_its_clock_and_reason(tmp_path: Path) -> None:
    """Idle: 210 MHz and the idle bit; busy: the boost clock and no reason; busy on a
    throttled night: 1410 MHz and the reason's bit (sw_thermal 0x20), as the engine's activity
    file says."""
    engine = GpuActivity(tmp_path, 4021, "sw_thermal")
    engine.update(3)
    assert activity(tmp_path, [4021]) == Activity(3, "sw_thermal")
    gpus = snapshot(FACTS, [PROC], [activity(tmp_path, [4021]), Activity(2)])
    fields = ["index", "clocks.current.sm", "clocks_event_reasons.active", "power.draw"]
    assert query_gpus(gpus, fields, header=False, units=False) == (
        "0, 1410, 0x0000000000000020, 226.00\n1, 1740, 0x0000000000000000, 214.00\n"
    )
    idle = snapshot(FACTS, [PROC])
    assert query_gpus(idle, fields[:3], header=False, units=False).splitlines()[0] == (
        "0, 210, 0x0000000000000001"
    )


def test_query_compute_apps_and_list() -> None:
    gpus = snapshot(FACTS, [PROC])
    out = query_apps(
        gpus, [PROC], ["gpu_uuid", "pid", "process_name", "used_memory"], header=True, units=True
    )
    u0, u1 = gpu_uuid(0, FACTS.name), gpu_uuid(1, FACTS.name)
    assert out == (
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        f"{u0}, 4021, /usr/bin/python3, 44226 MiB\n"
        f"{u1}, 4021, /usr/bin/python3, 44226 MiB\n"
    )
    assert query_apps(gpus, [], ["pid"], header=False, units=True) == ""
    assert (
        list_gpus(gpus)
        == f"GPU 0: NVIDIA RTX A6000 (UUID: {u0})\nGPU 1: NVIDIA RTX A6000 (UUID: {u1})\n"
    )
    assert u0.startswith("GPU-") and len(u0) == 40 and u0 != u1


def test_table_layout() -> None:
    gpus = snapshot(FACTS, [PROC])
    lines = table(gpus, [PROC], 0.0).splitlines()
    assert "NVIDIA-SMI 580.95.05" in lines[2] and "CUDA Version: 13.0" in lines[2]
    boxed = [line for line in lines[1:] if line]
    assert {len(line) for line in boxed} == {91}  # every row of the box is the same width
    assert "|   0  NVIDIA RTX A6000               On  |   00000000:01:00.0 Off |" in lines[8]
    assert "44227MiB /  49140MiB" in lines[9]
    procs = [line for line in lines if "/usr/bin/python3" in line]
    assert len(procs) == 2 and procs[0].rstrip("|").rstrip().endswith("44226MiB")
    empty = table(snapshot(FACTS, []), [], 0.0)
    assert "No running processes found" in empty


def _smi(box: Sandbox, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["nvidia-smi", *args],
        env={**box.env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_memory_of_live_processes_only(sim_box: Sandbox, tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        register_process(
            sim_box.state_dir, pid=holder.pid, gpus=[1], memory_mib=30000, process_name="python3"
        )
        done = _smi(sim_box, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
        assert done.stdout == "0, 1\n1, 30001\n"
        apps = _smi(sim_box, "--query-compute-apps=pid,used_memory", "--format=csv,noheader")
        assert apps.stdout == f"{holder.pid}, 30000 MiB\n"
    finally:
        holder.kill()
        holder.wait()
    # the process is gone: its memory no longer counts and its stale file is cleaned up
    assert (
        _smi(sim_box, "--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout == "1\n1\n"
    )
    assert not (sim_box.state_dir / f"gpu-{holder.pid}.json").exists()
    assert live_processes(sim_box.state_dir) == []


def test_a_recycled_pid_does_not_count(sim_box: Sandbox) -> None:
    path = register_process(
        sim_box.state_dir, pid=os.getpid(), gpus=[0], memory_mib=100, process_name="x"
    )
    record = json.loads(path.read_text())
    record["start_ticks"] -= 1  # same pid, another process start time
    path.write_text(json.dumps(record))
    assert live_processes(sim_box.state_dir) == []
    assert not path.exists()


def test_gpu_description_from_env_and_cli_errors(sim_box: Sandbox) -> None:
    env = {
        "ORCH_SIM_GPUS": "4",
        "ORCH_SIM_GPU_NAME": "NVIDIA H100 80GB HBM3",
        "ORCH_SIM_GPU_MEMORY_MIB": "81559",
    }
    done = _smi(sim_box, "--query-gpu=index,name,memory.total", "--format=csv,noheader", env=env)
    assert done.stdout.splitlines() == [f"{i}, NVIDIA H100 80GB HBM3, 81559 MiB" for i in range(4)]
    assert _smi(sim_box, "-L").stdout.count("NVIDIA RTX A6000") == 2
    assert _smi(sim_box, "-i", "1", "--query-gpu=index", "--format=csv,noheader").stdout == "1\n"
    bad = _smi(sim_box, "--query-gpu=index,bogus", "--format=csv")
    assert (bad.returncode, bad.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')
    nofmt = _smi(sim_box, "--query-gpu=index")
    assert nofmt.returncode == 2 and "Invalid combination of input arguments" in nofmt.stdout
    plain = _smi(sim_box)
    assert plain.returncode == 0 and "| Processes:" in plain.stdout
