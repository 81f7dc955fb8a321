"""Runs on a CPU host (``gpus: none``): one server at a time and no GPU ids (slots, the dry
run's schedule), a launch that checks no GPU, a stop that waits for no GPU memory (the
controller's spec and the agent's answer), and results that name the CPU, not a GPU."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from orchestrator.agent.facts import HostFacts
from orchestrator.agent.fake import FakeAgent
from orchestrator.backends.hostrun import host_slots
from orchestrator.cli.main import app
from orchestrator.config import GpuSpec, HostConfig, load_inventory, load_playbook
from orchestrator.engines import ENGINES
from orchestrator.engines.plan import plan_launches
from orchestrator.remote.wire import LaunchSpec, ProbeResult, StopSpec
from orchestrator.results.report_doc import config_title
from orchestrator.runner.estimate import estimate
from orchestrator.runner.preflight import HostSession
from orchestrator.runner.progress import RecordingObserver
from orchestrator.runner.server import Server, ServerRegistry
from orchestrator.runner.slots import GpuSlots, SlotNeed, host_gpu_count, simulate
from tests.fixtures.sshd import free_port
from tests.unit.test_remote_lifecycle import FAST, Host, host, vllm_run  # noqa: F401
from tests.unit.test_runner_fake_agent import launched, make_run, stopped
from tests.unit.test_wire_golden import golden

CPU = HostConfig(name="cpu-1", gpus=GpuSpec.none())
GPU = HostConfig(name="gpu-1", gpus=GpuSpec(2, "RTX A6000"))
HOSTS = "hosts:\n  cpu-1: {gpus: none}\n  gpu-1: {gpus: 2 x RTX A6000}\n"
PLAYBOOK = """name: cpu
share_gpus: true
hosts: [cpu-1]
defaults: {engine: vllm, model: Qwen/Qwen3-8B, workload: {num_prompts: 10}}
runs:
  - {name: a, port: 8100}
  - {name: b, port: 8200}
"""


def probed_facts() -> HostFacts:
    """A probe whose nvidia-smi shows two A6000s (a host declared none may still have them)."""
    return HostFacts.from_probe(ProbeResult.from_json(golden("probe.result.json")))


# -- one server at a time ---------------------------------------------------------------------


def test_a_cpu_host_counts_no_gpu_whatever_the_probe_saw() -> None:
    assert host_gpu_count(CPU, 2) == host_gpu_count(CPU) == 0
    assert host_gpu_count(GPU, 2) == 2  # GPU hosts: the probe, then hosts.yaml, as before


def test_a_cpu_hosts_runs_go_one_after_another_with_no_gpu_ids() -> None:
    needs = [SlotNeed("a", 1, 8100), SlotNeed("b", 1, 8200)]
    placed = simulate(needs, host_gpu_count(CPU), [10.0, 5.0])
    assert [(p.key, p.start, p.end, p.gpu_ids, p.waited_for) for p in placed] == [
        ("a", 0.0, 10.0, None, ()),
        ("b", 10.0, 15.0, None, ("a",)),
    ]
    slots = GpuSlots(0)
    assert slots.take(needs[0]).gpu_ids is None and slots.fits(needs[1]) is None


def test_share_gpus_gives_a_cpu_host_no_slots_and_no_notice(tmp_path: Path) -> None:
    (tmp_path / "play.yaml").write_text(PLAYBOOK)
    playbook = load_playbook(tmp_path / "play.yaml")
    observer = RecordingObserver()
    assert host_slots(playbook, HostSession(CPU, facts=probed_facts()), observer) is None
    assert observer.events == []  # nothing to fix: CPU hosts never share
    slots = host_slots(playbook, HostSession(GPU, facts=probed_facts()), observer)
    assert slots is not None and slots.gpu_count == 2


def test_the_dry_run_schedules_a_cpu_host_one_run_after_another(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(PLAYBOOK)
    plans = plan_launches(
        load_playbook(tmp_path / "play.yaml"), load_inventory(tmp_path / "hosts.yaml")
    )
    (cpu,) = estimate(plans, share_gpus=True).hosts
    assert (cpu.gpu_count, cpu.shared) == (0, False)
    a, b = cpu.servers
    assert (a.gpu_ids, b.gpu_ids, b.waits_for) == (None, None, ["a"])
    assert b.begins_s == pytest.approx(a.total_s)
    args = ["run", str(tmp_path / "play.yaml"), "--hosts", str(tmp_path / "hosts.yaml")]
    shown = CliRunner().invoke(app, [*args, "--dry-run"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("host cpu-1: CPU host (gpus: none), one run after another, about")
    assert lines[1].startswith("  a (vllm, port 8100): on the CPU, from 0 s to ")


# -- launch and stop --------------------------------------------------------------------------


def launch_and_stop(config: HostConfig) -> tuple[LaunchSpec, StopSpec]:
    """``Server.start`` and ``stop`` on ``config`` against the fake agent: the specs sent."""
    agent = FakeAgent(config).on("launch", launched).always("stop", stopped())

    async def scenario() -> None:
        async with ServerRegistry() as registry:
            server = await Server.start(
                agent, make_run(), config, run_id="r1-id", port=8000, registry=registry
            )
            await server.stop()

    asyncio.run(scenario())
    (launch,), (stop,) = agent.specs("launch"), agent.specs("stop")
    assert isinstance(launch, LaunchSpec) and isinstance(stop, StopSpec)
    return launch, stop


def test_a_cpu_hosts_launch_asks_for_no_gpu_and_its_stop_waits_for_none() -> None:
    launch, stop = launch_and_stop(CPU)
    assert (launch.gpus_needed, launch.gpu_ids, "CUDA_VISIBLE_DEVICES" in launch.env) == (
        0,
        None,
        False,
    )
    assert (stop.wait_gpus, stop.gpu_timeout_s) == (False, 0.0)
    launch, stop = launch_and_stop(GPU)  # a GPU host: as before
    assert (launch.gpus_needed, stop.wait_gpus, stop.gpu_timeout_s) == (1, True, 60.0)


def launch_plain(host: Host, run_id: str, *, gpus_needed: int) -> dict[str, object]:  # noqa: F811
    run = vllm_run(model="Qwen/Qwen3-8B", tensor_parallel=1, speculative={"method": "none"})
    port = free_port()
    argv = ENGINES["vllm"].argv(run, port=port)
    spec = {"run_id": run_id, "argv": argv, "env": FAST, "port": port, "gpus_needed": gpus_needed}
    return host.call("launch", spec)


def test_the_agent_stops_a_cpu_hosts_engine_without_asking_nvidia_smi(host: Host) -> None:  # noqa: F811
    """The sandbox's nvidia-smi would answer (and say released): not asked, it says None."""
    record = launch_plain(host, "c1", gpus_needed=0)
    assert record["gpu_check"] == {"checked": False, "reason": "no GPUs requested", "gpus": []}
    result = host.call("stop", {"run_id": "c1", "timeout_s": 10, "wait_gpus": False})
    (outcome,) = result["stopped"]
    assert outcome["was_running"] is True and outcome["remaining_pids"] == []
    assert outcome["gpu_released"] is None
    launch_plain(host, "c2", gpus_needed=1)
    (asked,) = host.call("stop", {"run_id": "c2", "timeout_s": 10})["stopped"]
    assert asked["gpu_released"] is True  # the GPU path still asks


# -- results ----------------------------------------------------------------------------------


def title_row(gpu_name: str | None, gpu_count: int | None = 1) -> pd.Series:
    return pd.Series(
        {
            "run": "tiny",
            "host": "cpu-1",
            "engine": "vllm",
            "method": "none",
            "model": "tiny-llama",
            "draft_model": None,
            "num_draft_tokens": None,
            "gpu_count": gpu_count,
            "gpu_name": gpu_name,
        }
    )


def test_a_reports_title_names_the_cpu_not_a_gpu() -> None:
    assert config_title(title_row("CPU"), None).endswith("tiny-llama · CPU")
    assert config_title(title_row("NVIDIA L4"), None).endswith("tiny-llama · 1 GPU × NVIDIA L4")
