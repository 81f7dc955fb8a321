"""Engines sharing one simulated host on disjoint GPU sets (``CUDA_VISIBLE_DEVICES``), as a
real engine does: each uses only its GPUs, its memory shows on those in nvidia-smi, and two
engines on the same GPUs never both get their memory."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_helpers import FAST, SimProc, free_port

from orchestrator.sim.cli import parse_sglang, parse_vllm
from orchestrator.sim.failures import StartupFailure
from orchestrator.sim.gpus import GpuFacts, gpu_uuid, register_process, visible_devices
from orchestrator.sim.sandbox import Sandbox, prepare_sandbox
from orchestrator.sim.startup import claim_memory, plan_launch

FOUR = GpuFacts(count=4, name="NVIDIA RTX A6000", memory_mib=49140)
MODEL = "Qwen/Qwen3-8B"
VLLM_SHARE = int(0.9 * 49140 / 1024 * 1024)  # MiB a vLLM server holds per GPU by default


@pytest.mark.parametrize(
    ("value", "visible"),
    [
        (None, [0, 1, 2, 3]),
        ("2,3", [2, 3]),
        ("3,1", [3, 1]),  # CUDA's order is the one given
        (" 2 , 0 ", [2, 0]),
        ("0,7,1", [0]),  # an index the host lacks ends the list
        ("0,-1,1", [0]),
        ("1,x,2", [1]),
        ("1,1", []),  # a GPU named twice: none visible
        ("", []),
        (gpu_uuid(2, FOUR.name), [2]),
        (gpu_uuid(3, FOUR.name)[:12] + ",0", [3, 0]),  # a UUID prefix naming one GPU
        ("GPU-", []),  # a prefix of every UUID names none
    ],
)
def test_visible_devices_as_cuda_reads_them(value: str | None, visible: list[int]) -> None:
    assert visible_devices(value, FOUR) == visible


@pytest.fixture
def box4(tmp_path: Path) -> Sandbox:
    """A host of its own with four GPUs (no other test's engines in its state)."""
    return prepare_sandbox(tmp_path / "box", gpus=4)


def test_the_plan_uses_the_visible_gpus_and_tp_must_fit_them(box4: Sandbox) -> None:
    def plan(argv: list[str], gpus: str, engine: str = "vllm"):
        cfg = parse_vllm(argv) if engine == "vllm" else parse_sglang(argv)
        return plan_launch(cfg, {**box4.env(), "CUDA_VISIBLE_DEVICES": gpus}, box4.state_dir)

    assert plan(["serve", MODEL, "-tp", "2"], "2,3").devices == [2, 3]
    assert plan(["serve", MODEL], "3,1").devices == [3]  # the first tp of the visible ones
    with pytest.raises(StartupFailure) as info:
        plan(["serve", MODEL, "-tp", "2"], "3")
    assert info.value.traceback == [
        "AssertionError: please set tensor_parallel_size (2) to less than max local gpu count (1)"
    ]
    with pytest.raises(StartupFailure) as info:
        plan(["--model-path", MODEL, "--tp-size", "2"], "1,1", engine="sglang")
    assert info.value.traceback == [
        "RuntimeError: CUDA error: invalid device ordinal "
        "(tp_size=2, pp_size=1, dp_size=1: 2 GPUs, 0 visible)"
    ]


@pytest.fixture
def start(box4: Sandbox, tmp_path: Path) -> Iterator:
    started: list[SimProc] = []

    def start(gpus: str, *extra: str, engine: str = "vllm") -> SimProc:
        port = str(free_port())
        argv = (
            ["vllm", "serve", MODEL, "--port", port, *extra]
            if engine == "vllm"
            else [
                "python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                MODEL,
                "--port",
                port,
                *extra,
            ]  # fmt: skip
        )
        env = {**FAST, "CUDA_VISIBLE_DEVICES": gpus}
        proc = SimProc(box4, argv, env, tmp_path / f"server-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            os.killpg(proc.proc.pid, signal.SIGKILL)
            proc.proc.wait()


def smi(box: Sandbox, query: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", query, "--format=csv,noheader,nounits"],
        env=box.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [[part.strip() for part in line.split(",")] for line in out.splitlines()]


def holders(box: Sandbox) -> dict[int, list[int]]:
    """GPU index -> pids holding memory on it, from nvidia-smi as orch reads it."""
    index = {uuid: int(i) for i, uuid in smi(box, "--query-gpu=index,uuid")}
    found: dict[int, list[int]] = {i: [] for i in index.values()}
    for uuid, pid in smi(box, "--query-compute-apps=gpu_uuid,pid"):
        found[index[uuid]].append(int(pid))
    return found


def used(box: Sandbox) -> list[int]:
    return [int(mib) for (mib,) in smi(box, "--query-gpu=memory.used")]


def test_engines_on_disjoint_gpu_sets_share_a_host(start, box4: Sandbox) -> None:
    a = start("0,1", "-tp", "2")
    b = start("3", engine="sglang")
    c = start("2")
    for sim in (a, b, c):
        sim.wait_ready()
    pa, pb, pc = a.proc.pid, b.proc.pid, c.proc.pid
    assert holders(box4) == {0: [pa], 1: [pa], 2: [pc], 3: [pb]}
    assert used(box4)[:3] == [VLLM_SHARE + 1] * 3 and used(box4)[3] > 40_000
    # a fourth engine on a GPU already held cannot get its memory (CUDA index 0 = GPU 1 here)
    d = start("1,2", "-tp", "2")
    assert d.wait_exit() == 1
    assert "Free memory on device cuda:0 (" in d.text()
    assert holders(box4) == {0: [pa], 1: [pa], 2: [pc], 3: [pb]}
    assert c.stop() == 0
    assert holders(box4) == {0: [pa], 1: [pa], 2: [], 3: [pb]} and used(box4)[2] == 1


def settle(sim: SimProc) -> int | None:
    """Its exit code once it died, None once it serves."""
    deadline = time.monotonic() + 30
    while "Application startup complete." not in sim.text():
        try:
            return sim.proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            assert time.monotonic() < deadline, sim.text()
    return None


def test_engines_started_at_once_on_the_same_gpu_never_both_serve(start, box4: Sandbox) -> None:
    """Both may pass the start-up check before either holds memory; the KV cache claim is made
    in turn, so at most one gets its memory and the other dies of CUDA out of memory."""
    sims = [start("1"), start("1"), start("1")]
    outcomes = [settle(sim) for sim in sims]
    serving = [sim for sim, code in zip(sims, outcomes, strict=True) if code is None]
    failed = [sim for sim, code in zip(sims, outcomes, strict=True) if code is not None]
    assert len(serving) <= 1 and len(failed) >= 2
    for sim in failed:
        assert sim.wait_exit() == 1
        text = sim.text()
        assert "torch.OutOfMemoryError: CUDA out of memory" in text or (
            "Free memory on device cuda:0 (" in text
        ), text
    assert [pid for pids in holders(box4).values() for pid in pids] == [
        sim.proc.pid for sim in serving
    ]
    assert used(box4)[1] == (VLLM_SHARE + 1 if serving else 1)


def test_the_kv_cache_claim_sees_memory_taken_since_the_start_up_check(box4: Sandbox) -> None:
    """The race the test above may not hit: another engine grows after this one's check."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hold = functools.partial(
            register_process, box4.state_dir, pid=holder.pid, process_name="python3"
        )
        hold(gpus=[1], memory_mib=1000)  # little enough for the start-up check to pass
        env = {**box4.env(), "CUDA_VISIBLE_DEVICES": "1"}
        plan = plan_launch(parse_vllm(["serve", MODEL]), env, box4.state_dir)
        claim_memory(plan, box4.state_dir, os.getpid())  # 48 GiB - 1000 MiB still fit
        hold(gpus=[1], memory_mib=30_000)  # it took its KV cache meanwhile
        with pytest.raises(StartupFailure) as info:
            claim_memory(plan, box4.state_dir, os.getpid())
        assert info.value.kind == "oom"
        assert info.value.traceback[-1].startswith(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        )
        hold(gpus=[0, 2, 3], memory_mib=30_000)  # other GPUs: not this engine's concern
        claim_memory(plan, box4.state_dir, os.getpid())
    finally:
        holder.kill()
        holder.wait()
