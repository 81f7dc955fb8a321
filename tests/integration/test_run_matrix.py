"""A playbook `matrix:` end to end: the real CLI runs every expanded run on an embedded host.

Matrix names carry ``[``, ``=`` and ``,``: each expanded run must still get its own folder and
host-side run id (sanitized), its own summary.csv row and console row under its full name.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.config.hostconfig import HostConfig
from orchestrator.results.model import RunResult
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

RUNS = {"m-plain[concurrency=1]": 1, "m-plain[concurrency=2]": 2}
FOLDERS = {
    "m-plain[concurrency=1]": "m-plain_concurrency_1_emb-1",
    "m-plain[concurrency=2]": "m-plain_concurrency_2_emb-1",
}
NUM_PROMPTS = 3


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_matrix_runs_each_complete_with_their_own_results(
    embedded_hosts: list[HostConfig], tmp_path: Path
) -> None:
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(
        yaml.safe_dump(
            {
                "hosts": {
                    "emb-1": {
                        "transport": "embedded",
                        "gpus": "2 x RTX A6000",
                        "env": {
                            "ORCH_SIM_LOAD_S": "0.1",
                            # speed 2: a decode step outlasts a busy CPU's client lag (a first chunk
                            # read with the second fails the run as client-saturated)
                            "ORCH_SIM_SPEED": "2",
                            "VLLM_LOG_STATS_INTERVAL": "1",
                        },
                    }
                }
            }
        )
    )
    playbook = tmp_path / "matrix.yaml"
    playbook.write_text(
        yaml.safe_dump(
            {
                "name": "matrix",
                "hosts": ["emb-1"],
                "runs": [
                    {
                        "name": "m-plain",
                        "engine": "vllm",
                        "model": "Qwen/Qwen3.6-27B",
                        "tensor_parallel": 2,
                        "port": free_port(),
                        "workload": {
                            "prompts": "builtin:chat",
                            "num_prompts": NUM_PROMPTS,
                            "max_tokens": 16,
                            "ignore_eos": True,
                            "warmup": 0,
                            "seed": 3,
                        },
                        "matrix": {"workload.concurrency": [1, 2]},
                    }
                ],
            },
            sort_keys=False,
        )
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            str(playbook),
            "--hosts",
            str(hosts_file),
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (results,) = (tmp_path / "results").iterdir()

    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == sorted(FOLDERS.values())
    summaries = {}
    for run, concurrency in RUNS.items():
        run_dir = results / FOLDERS[run]
        summary = RunResult.load(run_dir / "summary.json")
        manifest = read_json(run_dir / "manifest.json")
        summaries[run] = summary
        assert summary.run.name == manifest["run"]["name"] == run
        assert summary.error is None and summary.requests is not None
        assert summary.requests.completed == NUM_PROMPTS
        assert summary.requests.failed == 0
        assert manifest["run"]["workload"]["concurrency"] == concurrency
        assert summary.loadgen is not None and summary.loadgen.concurrency == concurrency
        assert summary.settings.workload is not None
        assert summary.settings.workload.concurrency == concurrency
        # the host-side run id is the sanitized name plus a unique suffix
        assert summary.run.run_id.startswith(FOLDERS[run].removesuffix("_emb-1") + "-")
        assert len((run_dir / "requests.jsonl").read_text().splitlines()) == NUM_PROMPTS
        assert (run_dir / "server.log").stat().st_size > 0
        # the manifest is stamped when its run starts, the same moment summary.json records
        assert (
            manifest["started_at"]
            == manifest["created_at"]
            == read_json(run_dir / "summary.json")["times"]["started_at"]
        )
        assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]
    first, second = (summaries[r].times for r in RUNS)
    assert second.started_at >= first.ended_at  # one host: one run after the other
    assert (
        summaries["m-plain[concurrency=1]"].run.run_id
        != summaries["m-plain[concurrency=2]"].run.run_id
    )

    with (results / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["run"], r["host"], r["completed"], r["error"]) for r in rows] == [
        (run, "emb-1", str(NUM_PROMPTS), "") for run in RUNS
    ]
    table = [line for line in proc.stdout.splitlines() if "emb-1" in line and "vllm" in line]
    assert [line.split()[0] for line in table] == list(RUNS), proc.stdout
