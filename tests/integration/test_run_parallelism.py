"""A server's GPUs are the product of its parallel sizes, end to end (issue 20, item 10): an
embedded host with two simulated RTX A6000s (48 GiB), ``share_gpus`` on, and three runs:

- ``pp``: vLLM serving the 27B model with ``tensor_parallel: 1`` and ``--pipeline-parallel-size
  2`` in extra_args. Its weights (about 50 GiB) fit only split over the two GPUs: the doctor
  refused it when it counted tensor parallelism alone, and the result said 1 GPU;
- ``dp``: SGLang with ``--dp-size 2``: two replicas, a GPU each;
- ``one``: a one-GPU run, which must never be placed beside a two-GPU one.

Each result records its GPUs and parallel sizes, its throughput per GPU is the total over its
GPUs, the simulated engine held both GPUs, and the dry run planned them so."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from orchestrator.results.model import ParallelSettings, RunResult
from orchestrator.results.report import derived, load_results, summary_row
from tests.fixtures.cli import finish, orch_process
from tests.fixtures.procs import kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

HOST = "emb-1"
CLI_TIMEOUT_S = 240


def hosts_file(path: Path) -> Path:
    env = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4"}
    host = {"transport": "embedded", "gpus": "2 x RTX A6000", "env": env}
    path.write_text(yaml.safe_dump({"hosts": {HOST: host}}))
    return path


def playbook_file(path: Path) -> Path:
    workload = {
        "prompts": "builtin:math",
        "num_prompts": 12,
        "concurrency": 2,
        "max_tokens": 32,
        "warmup": 1,
    }
    book = {
        "name": "parallel",
        "share_gpus": True,
        "hosts": [HOST],
        "defaults": {"engine": "vllm", "model": "Qwen/Qwen3-8B", "workload": workload},
        "runs": [
            {
                "name": "pp",
                "model": "Qwen/Qwen3.6-27B",
                "max_model_len": 4096,
                "port": free_port(),
                "extra_args": ["--pipeline-parallel-size", "2"],
            },
            {
                "name": "dp",
                "engine": "sglang",
                "port": free_port(),
                "extra_args": ["--dp-size", "2"],
            },
            {"name": "one", "port": free_port()},
        ],
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


@dataclass
class Ran:
    proc: subprocess.CompletedProcess[str]
    dry: dict[str, object]
    results: Path
    held: dict[int, list[int]] = field(default_factory=dict)  # engine pid -> GPUs it held


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    tmp = tmp_path_factory.mktemp("parallel")
    root = tmp / "embedded"
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(root)}
    args = [str(playbook_file(tmp / "play.yaml")), "--hosts", str(hosts_file(tmp / "hosts.yaml"))]
    results = ["--results", str(tmp / "results")]
    try:
        dry = finish(
            orch_process("run", *args, *results, "--dry-run", "--json", cwd=tmp, env=env),
            CLI_TIMEOUT_S,
        )
        assert dry.returncode == 0, dry.stderr
        running = orch_process("run", *args, *results, cwd=tmp, env=env)
        held: dict[int, list[int]] = {}
        while running.poll() is None:  # what the simulated nvidia-smi sees each engine hold
            for path in (root / HOST / "state").glob("gpu-*.json"):
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                held[int(record["pid"])] = list(record["gpus"])
            time.sleep(0.05)
        proc = finish(running, CLI_TIMEOUT_S)
        (folder,) = (tmp / "results").iterdir()
        yield Ran(proc, json.loads(dry.stdout), folder, held)
    finally:
        for pid in pids_with_env("HOME", str(root / HOST / "home")):
            kill_tree(pid)


def by_run(ran: Ran) -> dict[str, RunResult]:
    return {r.run.name: r for r in load_results(ran.results)}


def test_every_run_is_measured_and_records_its_gpus_and_parallel_sizes(ran: Ran) -> None:
    assert ran.proc.returncode == 0, ran.proc.stdout + ran.proc.stderr
    results = by_run(ran)
    assert sorted(results) == ["dp", "one", "pp"]
    for r in results.values():
        assert r.error is None and r.requests and r.requests.completed == 12, r.error
    sizes = {name: (r.settings.gpu_count, r.settings.parallelism) for name, r in results.items()}
    assert sizes == {
        "pp": (2, ParallelSettings(tensor=1, pipeline=2, data=1, expert=1)),
        "dp": (2, ParallelSettings(tensor=1, pipeline=1, data=2, expert=1)),
        "one": (1, ParallelSettings(tensor=1, pipeline=1, data=1, expert=1)),
    }
    assert {name: r.settings.gpu_ids for name, r in results.items()} == {
        "pp": [0, 1],
        "dp": [0, 1],
        "one": [0],
    }
    manifest = json.loads((ran.results / f"pp_{HOST}" / "manifest.json").read_text())
    assert manifest["parallelism"] == {
        "tensor": 1,
        "pipeline": 2,
        "data": 1,
        "expert": 1,
        "gpus": 2,
    }


def test_throughput_per_gpu_is_the_total_over_the_servers_gpus(ran: Ran) -> None:
    for name, gpus in (("pp", 2), ("dp", 2), ("one", 1)):
        result = by_run(ran)[name]
        assert result.requests is not None
        total = result.requests.output_throughput
        assert total > 0
        assert derived(result).output_tok_s_per_gpu == pytest.approx(total / gpus)
        row = summary_row(result)
        assert row["gpu_count"] == gpus
        assert row["output_tok_s_per_gpu"] == pytest.approx(total / gpus, abs=0.01)


def test_the_doctor_passed_the_27b_model_split_over_two_gpus(ran: Ran) -> None:
    manifest = json.loads((ran.results / f"pp_{HOST}" / "manifest.json").read_text())
    checks = {f["check"]: f for f in manifest["doctor"]}
    assert checks["gpu_count"]["severity"] == "ok"
    assert checks["gpu_count"]["details"]["needed"] == 2
    memory = checks["gpu_memory"]
    assert memory["severity"] == "ok", memory["message"]
    # about 50 GiB of weights, half of them on each GPU
    assert memory["details"]["weights_per_gpu_gib"] == pytest.approx(
        memory["details"]["weights_gib"] / 2, abs=0.1
    )
    assert memory["details"]["weights_gib"] > 44  # more than one A6000's 90% budget


def test_the_simulated_engines_held_both_gpus_and_no_run_shared_them(ran: Ran) -> None:
    assert sorted(ran.held.values()) == [[0], [0, 1], [0, 1]]
    results = by_run(ran)
    windows = sorted((r.times.started_at, r.times.ended_at, r.run.name) for r in results.values())
    for (_, end, _), (start, _, _) in zip(windows, windows[1:], strict=False):
        assert end is not None and end <= start  # one after another: each needs both GPUs


def test_the_dry_run_planned_two_gpus_for_the_parallel_runs(ran: Ran) -> None:
    (host,) = ran.dry["plan"]["hosts"]  # type: ignore[index]
    servers = {s["run"]: s for s in host["servers"]}
    assert {name: (s["gpus"], s["gpu_ids"], s["beside"]) for name, s in servers.items()} == {
        "pp": (2, [0, 1], []),
        "dp": (2, [0, 1], []),
        "one": (1, [0], []),
    }
