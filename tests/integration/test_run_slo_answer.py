"""`orch run` of a sweep with an SLO search, on an embedded host: the console names the search's
answer, the one slo-search.json holds, under the tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.procs import kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_orch_run_prints_the_slo_search_answer(tmp_path: Path) -> None:
    root = tmp_path / "embedded"
    hosts = tmp_path / "hosts.yaml"
    env = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "1"}
    hosts.write_text(
        yaml.safe_dump(
            {"defaults": {"gpus": "2 x RTX A6000", "transport": "embedded", "env": env}}
            | {"hosts": {"emb-1": {}}}
        )
    )
    workload = {
        "prompts": "builtin:mixed",
        "concurrency": [1],
        "duration_s": 1,
        "num_prompts": 1000,
        "max_tokens": 16,
        "ignore_eos": True,
        "warmup": 1,
        # every load meets a bound this loose: the search ends at the top of its range
        "slo": {"targets": ["tpot_ms_median <= 60000"], "search": "concurrency", "range": [1, 4]},
    }
    book = {
        "name": "slo-answer",
        "defaults": {"model": "Qwen/Qwen3.6-27B", "tensor_parallel": 2, "workload": workload},
        "runs": [{"name": "plain", "hosts": ["emb-1"], "engine": "vllm", "port": free_port()}],
    }
    playbook = tmp_path / "book.yaml"
    playbook.write_text(yaml.safe_dump(book, sort_keys=False))
    argv = ["run", str(playbook), "--hosts", str(hosts), "--results", str(tmp_path / "results")]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator", *argv],
            cwd=tmp_path,
            env={**os.environ, "ORCH_EMBEDDED_ROOT": str(root), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        for pid in pids_with_env("HOME", str(root / "emb-1" / "home")):
            kill_tree(pid)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "results").iterdir()
    found = json.loads((results / "plain_emb-1" / "slo-search.json").read_text())
    assert found["best"] == 4.0
    text = " ".join(proc.stdout.split())
    assert "SLO search (tpot_ms_median <= 60000): plain on emb-1: c=4" in text
    assert found["explain"] in text  # "highest concurrency meeting every target: 4 (the top ..."
