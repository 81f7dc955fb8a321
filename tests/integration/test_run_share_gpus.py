"""``share_gpus`` end to end on an embedded host with two simulated RTX A6000s: two
tensor_parallel 1 runs start at once, each on a GPU of its own (CUDA_VISIBLE_DEVICES set by
orch), and measure at the same time; the dry run showed that placement beforehand, and after
the run it estimates from the results it left."""

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

from orchestrator.results.model import RunResult
from orchestrator.results.report import load_results
from tests.fixtures.cli import finish, orch_process
from tests.fixtures.procs import kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

HOST = "emb-1"
CLI_TIMEOUT_S = 180


def hosts_file(path: Path) -> Path:
    env = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4"}
    host = {"transport": "embedded", "gpus": "2 x RTX A6000", "env": env}
    path.write_text(yaml.safe_dump({"hosts": {HOST: host}}))
    return path


def playbook_file(path: Path) -> Path:
    workload = {
        "prompts": "builtin:math",
        "num_prompts": 1000,  # a ceiling: the duration ends each measurement
        "duration_s": 4,
        "concurrency": 2,
        "max_tokens": 48,
        "warmup": 1,
    }
    book = {
        "name": "share",
        "share_gpus": True,
        "hosts": [HOST],
        "defaults": {"engine": "vllm", "model": "Qwen/Qwen3-8B", "workload": workload},
        "runs": [{"name": "left", "port": free_port()}, {"name": "right", "port": free_port()}],
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


@dataclass
class Shared:
    proc: subprocess.CompletedProcess[str]
    dry: dict[str, object]
    again: dict[str, object]
    results: Path
    # what the simulated nvidia-smi's state showed while the playbook ran: pid -> GPUs held
    held: dict[int, list[int]] = field(default_factory=dict)
    together: int = 0  # the most engines seen holding GPUs at once


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("share")
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
        together = 0
        state = root / HOST / "state"
        while running.poll() is None:  # watch the simulated GPUs while the engines live
            now = {}
            for path in state.glob("gpu-*.json"):
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                now[int(record["pid"])] = list(record["gpus"])
            held.update(now)
            together = max(together, len(now))
            time.sleep(0.05)
        proc = finish(running, CLI_TIMEOUT_S)
        (folder,) = (tmp / "results").iterdir()
        again = finish(
            orch_process("run", *args, *results, "--dry-run", "--json", cwd=tmp, env=env),
            CLI_TIMEOUT_S,
        )
        assert again.returncode == 0, again.stderr
        yield Shared(proc, json.loads(dry.stdout), json.loads(again.stdout), folder, held, together)
    finally:
        for pid in pids_with_env("HOME", str(root / HOST / "home")):
            kill_tree(pid)


def by_run(shared: Shared) -> dict[str, RunResult]:
    return {r.run.name: r for r in load_results(shared.results)}


def test_both_runs_succeed_on_a_gpu_each(shared: Shared) -> None:
    assert shared.proc.returncode == 0, shared.proc.stdout + shared.proc.stderr
    results = by_run(shared)
    assert sorted(results) == ["left", "right"]
    assert all(
        r.error is None and r.requests and r.requests.completed > 0 for r in results.values()
    )
    assert {name: r.settings.gpu_ids for name, r in results.items()} == {
        "left": [0],
        "right": [1],
    }
    for name, ids in (("left", "0"), ("right", "1")):
        manifest = json.loads((shared.results / f"{name}_{HOST}" / "manifest.json").read_text())
        assert manifest["gpu_ids"] == [int(ids)]
        assert manifest["env"]["CUDA_VISIBLE_DEVICES"] == ids


def test_their_measured_windows_overlap(shared: Shared) -> None:
    left, right = by_run(shared)["left"].times, by_run(shared)["right"].times
    assert left.measure_started_at is not None and left.measure_ended_at is not None
    assert right.measure_started_at is not None and right.measure_ended_at is not None
    assert left.measure_started_at < right.measure_ended_at
    assert right.measure_started_at < left.measure_ended_at


def test_the_simulated_gpus_held_one_engine_each_at_once(shared: Shared) -> None:
    assert shared.together == 2
    assert sorted(shared.held.values()) == [[0], [1]]


def test_the_dry_run_showed_the_placement_and_then_estimates_from_the_results(
    shared: Shared,
) -> None:
    def servers(plan: dict[str, object]) -> list[dict[str, object]]:
        (host,) = plan["plan"]["hosts"]  # type: ignore[index]
        assert host["shared"] is True and host["gpu_count"] == 2
        return list(host["servers"])

    before = servers(shared.dry)
    assert [(s["run"], s["gpu_ids"], s["beside"], s["begins_s"]) for s in before] == [
        ("left", [0], ["right"], 0.0),
        ("right", [1], ["left"], 0.0),
    ]
    assert {s["measure_source"] for s in before} == {"guess"}
    after = servers(shared.again)
    assert {(s["server_start_source"], s["measure_source"]) for s in after} == {
        ("history", "history")
    }
    results = by_run(shared)
    for server in after:
        times = results[str(server["run"])].times
        assert times.server_start_s is not None and times.duration_s is not None
        assert server["server_start_s"] == round(times.server_start_s, 1)
        assert server["measure_s"] == round(times.duration_s - times.server_start_s, 1)
