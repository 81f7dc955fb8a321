"""The simulated GPUs' NVML (``sim/nvml.c``), read through the agent's own ctypes binding as a
real host's ``libnvidia-ml.so.1``: power, clocks, reasons and memory follow what the engines
write, and the energy counter integrates the power."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.remote.telemetry import NvmlReader, Recording
from orchestrator.remote.wire import TelemetrySpec
from orchestrator.sim.gpus import GpuActivity
from orchestrator.sim.nvml import built_library


@pytest.fixture(scope="module")
def library() -> Path:
    built = built_library()
    assert built is not None, "a C compiler (cc) is needed to build the simulated NVML"
    return built


def test_the_gpus_follow_their_engines(
    library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 0 runs 3 requests of an engine on a night throttled by sw_thermal; GPU 1 idles; a
    file left by an engine that is gone counts for nothing."""
    (tmp_path / "gpus.json").write_text(json.dumps({"count": 2, "memory_mib": 49140}))
    monkeypatch.setenv("ORCH_SIM_STATE", str(tmp_path))
    GpuActivity(tmp_path, 4_000_000, gpus=[1], memory_mib=999).update(5)  # no such process
    engine = GpuActivity(tmp_path, 1, "sw_thermal", gpus=[0], memory_mib=40000)  # pid 1: alive
    engine.update(3)
    reader = NvmlReader([0, 1], str(library))
    try:
        first = reader.read()
        time.sleep(0.5)
        second = reader.read()
        limit = reader.power_limit_w(1)
        processes = reader.processes(0), reader.processes(1)
    finally:
        reader.close()
    assert processes == ([1], [])  # the live engine; none for the one that is gone
    busy, idle = second
    assert (busy.power_w, busy.sm_mhz, busy.mem_mhz, busy.util_pct) == (226.0, 1410, 8001, 97)
    assert (busy.reasons, busy.mem_used_mib, busy.temp_c) == (0x20, 40001, 61)
    assert (idle.power_w, idle.sm_mhz, idle.reasons, idle.mem_used_mib) == (22.51, 210, 0x1, 1)
    assert limit == 300.0
    for before, after in zip(first, second, strict=True):  # mJ, at the power of the interval
        assert before.energy_mj is not None and after.energy_mj is not None
        watts = (after.energy_mj - before.energy_mj) / 1000 / (after.t - before.t)
        assert watts == pytest.approx(after.power_w, rel=0.05)


def test_a_host_that_is_not_simulated_has_no_driver(library: Path, tmp_path: Path) -> None:
    """Without the sandbox's state (not a simulated host's session), nvmlInit fails as with no
    driver loaded, and the agent falls back to nvidia-smi."""
    code = (
        "import sys\nfrom orchestrator.remote.telemetry import NvmlReader, TelemetryUnavailable\n"
        f"try:\n    NvmlReader([0], {str(library)!r})\nexcept TelemetryUnavailable as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2])},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "NVML nvmlInit_v2 failed: Driver Not Loaded (9)"


def test_a_process_outside_the_engines_group_is_named(
    library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine (this process's group) computes on GPUs 0 and 1; another process (pid 1,
    its own group) on GPU 1 too: its energy is in the window's, so the recording names it."""
    (tmp_path / "gpus.json").write_text(json.dumps({"count": 2, "memory_mib": 49140}))
    monkeypatch.setenv("ORCH_SIM_STATE", str(tmp_path))
    GpuActivity(tmp_path, os.getpid(), gpus=[0, 1], memory_mib=20000).update(2)
    GpuActivity(tmp_path, 1, gpus=[1], memory_mib=8000).update(1)
    spec = TelemetrySpec(gpus=[0, 1], library=str(library), engine_pgid=os.getpgrp())
    recording = Recording(spec)
    time.sleep(0.2)
    result = recording.stop()
    assert result.source == "nvml" and result.foreign_pids == {"1": [1]}
    alone = Recording(TelemetrySpec(gpus=[0], library=str(library), engine_pgid=os.getpgrp()))
    assert alone.stop().foreign_pids == {}
    unasked = Recording(TelemetrySpec(gpus=[0, 1], library=str(library)))
    assert unasked.stop().foreign_pids is None  # no engine named: not looked for
