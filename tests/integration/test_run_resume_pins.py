"""Issue 20, item 7, end to end on the embedded hosts: a sweep killed after its first point,
its prompt file rewritten (or its host's entry changed), is not resumed onto the new inputs;
the resume names what changed and touches nothing. A folder whose plan.json pins nothing (as
an orch before the pins wrote it) resumes with a warning."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.main import run as run_cli
from orchestrator.results.report import load_results
from tests.fixtures.procs import kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HOST = "emb-1"
LEVELS = [1, 2, 4]
CLI_TIMEOUT_S = 180
SHORT = [{"prompt": f"Say hello {i}."} for i in range(8)]
LONG = [{"prompt": "Summarise this: " + "lorem ipsum " * 400} for _ in range(8)]


def orch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def write_jsonl(path: Path, records: list[dict[str, str]]) -> bytes:
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(data)
    return data


def write_hosts(path: Path, speed: str) -> Path:
    env = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": speed}
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"gpus": "2 x RTX A6000", "transport": "embedded", "env": env},
                "hosts": {HOST: {}},
            }
        )
    )
    return path


def write_playbook(path: Path) -> Path:
    book = {
        "name": "pins",
        "defaults": {
            "model": "Qwen/Qwen3.6-27B",
            "tensor_parallel": 2,
            "max_model_len": 8192,
            "workload": {
                "prompts": "prompts.jsonl",
                "concurrency": LEVELS,
                "duration_s": 1.5,
                "num_prompts": 1000,
                "max_tokens": 16,
                "ignore_eos": True,
                "warmup": 1,
                "seed": 3,
            },
        },
        "runs": [{"name": "plain", "hosts": [HOST], "engine": "vllm", "port": free_port()}],
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_resume_refuses_rewritten_prompts_and_changed_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "embedded"
    env = {**os.environ, "ORCH_EMBEDDED_ROOT": str(root)}
    prompts = tmp_path / "prompts.jsonl"
    original = write_jsonl(prompts, SHORT)
    playbook = write_playbook(tmp_path / "pins.yaml")
    hosts = write_hosts(tmp_path / "hosts.yaml", "2")
    results_root = tmp_path / "results"

    def resume() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            orch_cmd("run", "--resume", str(results), "--hosts", str(hosts)),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )

    def refused_resume() -> subprocess.CompletedProcess[str]:
        """A resume refused before it touches a host: the CLI in this process (a process of
        its own would spend most of its time importing orch)."""
        capsys.readouterr()
        with monkeypatch.context() as mp:
            mp.chdir(tmp_path)
            mp.setenv("ORCH_EMBEDDED_ROOT", str(root))
            code = run_cli(["run", "--resume", str(results), "--hosts", str(hosts)])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["orch"], code, out, err)

    proc = subprocess.Popen(
        orch_cmd("run", str(playbook), "--hosts", str(hosts), "--results", str(results_root)),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list(results_root.glob("*/plain_emb-1/points/*/summary.json")):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        proc.kill()
        proc.wait(timeout=30)
        (results,) = results_root.iterdir()
        plan = json.loads((results / "plan.json").read_text())
        digest = hashlib.sha256(original).hexdigest()
        assert plan["inputs"]["prompts"] == {f"file:{prompts}": digest}
        assert plan["inputs"]["hosts"][HOST]["entry"]["env"]["ORCH_SIM_SPEED"] == "2"
        before = tree(results)

        # the prompts rewritten: refused, the file and both contents named, nothing touched
        longer = write_jsonl(prompts, LONG)
        refused = refused_resume()
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = " ".join(refused.stderr.split())
        assert f"prompt file {prompts}: content changed" in said
        assert digest[:12] in said and hashlib.sha256(longer).hexdigest()[:12] in said
        assert tree(results) == before

        # the prompts as they were, the host's entry changed: refused, the field named
        prompts.write_bytes(original)
        write_hosts(hosts, "3")
        refused = refused_resume()
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = " ".join(refused.stderr.split())
        assert "host emb-1's entry changed: env" in said and "ORCH_SIM_SPEED" in said
        assert tree(results) == before

        # a plan.json without pins (an older orch's): resumed, with a warning
        write_hosts(hosts, "2")
        del plan["inputs"]
        (results / "plan.json").write_text(json.dumps(plan))
        done = resume()
        assert done.returncode == 0, done.stdout + done.stderr
        assert "could not check" in " ".join(done.stderr.split())
        measured = load_results(results)
        assert sorted(r.point.value for r in measured if r.point) == [float(c) for c in LEVELS]
        for result in measured:
            assert result.error is None
            assert result.settings.workload is not None
            assert result.settings.workload.prompts_sha256 == digest
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        for pid in pids_with_env("HOME", str(root / HOST / "home")):
            kill_tree(pid)
