"""The real vLLM CPU build's life cycle under orch: stopped, interrupted, refused at start-up.

- ``orch stop`` of a server mid-measurement, and Ctrl-C of ``orch run``: vLLM's SIGTERM path
  force-kills its EngineCore; nothing of the engine (API server, EngineCore, Worker) may
  survive, and the port must be free again.
- A flag vLLM does not know, and a KV cache too small for ``--max-model-len``: the run fails
  at start-up and names the cause read from the real engine's own error output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.procs import alive
from tests.fixtures.realvllm import (
    CpuHost,
    RealVllm,
    engine_pids,
    engine_slot,
    engine_titles,
    start_cpu_host,
)
from tests.fixtures.sshd import SshdFactory, free_port, port_free

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MEASURING_TIMEOUT_S = 400.0  # start-up on a busy 2-core machine
EXIT_TIMEOUT_S = 120.0
GRACE_S = 30.0


def book(real: RealVllm, host: str, port: int, **run: Any) -> dict[str, Any]:
    """One ngram run with a workload far too long to finish (it is stopped or refused)."""
    return {
        "name": "real-life",
        "hosts": [host],
        "runs": [
            {
                "name": "ngram-long",
                "engine": "vllm",
                "model": real.target,
                "max_model_len": 1024,
                "port": port,
                "extra_args": ["--enforce-eager"],
                "ready_timeout_s": 300,
                "speculative": {"method": "ngram", "num_draft_tokens": 4, "prompt_lookup_max": 4},
                "workload": {
                    "prompts": "builtin:chat",
                    "api": "completions",
                    "num_prompts": 5000,
                    "concurrency": 2,
                    "max_tokens": 256,
                    "ignore_eos": True,
                    "warmup": 0,
                },
                **run,
            }
        ],
    }


@pytest.fixture(scope="module")
def host(
    real_vllm: RealVllm, cpu_factory: SshdFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CpuHost]:
    cpu = start_cpu_host(cpu_factory, real_vllm, tmp_path_factory.mktemp("real-life"))
    try:
        yield cpu
    finally:
        cpu.kill_leftovers()


def start_run(host: CpuHost, tmp: Path, port: int, **run: Any) -> subprocess.Popen[str]:
    playbook = tmp / "life.yaml"
    playbook.write_text(yaml.safe_dump(book(host.real, host.name, port, **run), sort_keys=False))
    argv = [sys.executable, "-m", "orchestrator", "run", str(playbook)]
    argv += ["--hosts", str(host.hosts_file), "--results", str(tmp / "results")]
    with (tmp / "stderr.txt").open("w") as err, (tmp / "stdout.txt").open("w") as out:
        return subprocess.Popen(
            argv,
            cwd=tmp,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def wait_measuring(proc: subprocess.Popen[str], host: CpuHost, tmp: Path) -> dict[str, Any]:
    deadline = time.monotonic() + MEASURING_TIMEOUT_S
    runs = host.host.workdir / "runs"
    while time.monotonic() < deadline:
        text = (tmp / "stderr.txt").read_text()
        found = [json.loads(p.read_text()) for p in runs.glob("*/server.json")]
        if "ngram-long: measuring" in text and found:
            return found[-1]
        assert proc.poll() is None, f"orch exited early ({proc.returncode}):\n{text}"
        time.sleep(0.2)
    raise AssertionError(f"not measuring after {MEASURING_TIMEOUT_S} s")


def assert_nothing_left(host: CpuHost, server: dict[str, Any], port: int) -> None:
    deadline = time.monotonic() + 15  # sshd sessions end as their connection closes
    while engine_pids(host) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine_pids(host) == [], "an engine process (EngineCore or Worker) survived"
    assert not alive(server["pid"])
    assert port_free(port), f"port {port} still taken"


def console(tmp: Path) -> str:
    return (tmp / "stderr.txt").read_text() + (tmp / "stdout.txt").read_text()


def test_orch_stop_mid_measurement_leaves_no_engine(host: CpuHost, tmp_path: Path) -> None:
    port = free_port()
    with engine_slot():
        proc = start_run(host, tmp_path, port)
        try:
            server = wait_measuring(proc, host, tmp_path)
            # the positive control of "nothing left": all three of vLLM's processes are seen
            titles = engine_titles(host)
            assert {"vllm", "VLLM::EngineCor", "VLLM::Worker"} <= titles, titles
            stop = subprocess.run(
                [sys.executable, "-m", "orchestrator", "stop", server["run_id"]]
                + ["--grace", f"{GRACE_S:g}", "--hosts", str(host.hosts_file), "--json"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=EXIT_TIMEOUT_S,
            )
            assert stop.returncode == 0, stop.stdout + stop.stderr
            [outcome] = json.loads(stop.stdout)["stopped"]
            assert outcome["remaining_pids"] == [], outcome
            assert proc.wait(timeout=EXIT_TIMEOUT_S) == 1, console(tmp_path)
            assert_nothing_left(host, server, port)
        finally:
            if proc.poll() is None:
                proc.kill()
            host.kill_leftovers()
    [summary] = (tmp_path / "results").glob("*/ngram-long*/summary.json")
    assert json.loads(summary.read_text())["error"]["cause"] == "stopped_by_orch_stop"
    assert "Traceback" not in console(tmp_path)


def test_ctrl_c_of_orch_run_leaves_no_engine(host: CpuHost, tmp_path: Path) -> None:
    port = free_port()
    with engine_slot():
        proc = start_run(host, tmp_path, port)
        try:
            server = wait_measuring(proc, host, tmp_path)
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
            assert proc.wait(timeout=EXIT_TIMEOUT_S) == 130, console(tmp_path)
            assert_nothing_left(host, server, port)
        finally:
            if proc.poll() is None:
                proc.kill()
            host.kill_leftovers()
    said = " ".join(console(tmp_path).split())
    assert "interrupted: the servers this run started were stopped" in said
    assert "Traceback" not in said


def failed_start(host: CpuHost, tmp: Path, **run: Any) -> dict[str, Any]:
    """Run the playbook to its end (the server dies at start-up); its error record."""
    port = free_port()
    with engine_slot():
        proc = start_run(host, tmp, port, **run)
        try:
            assert proc.wait(timeout=MEASURING_TIMEOUT_S) == 1, console(tmp)
        finally:
            if proc.poll() is None:
                proc.kill()
            host.kill_leftovers()
    assert port_free(port) and engine_pids(host) == []
    [summary] = (tmp / "results").glob("*/ngram-long*/summary.json")
    return json.loads(summary.read_text())["error"]


def test_an_unknown_flag_is_classified_from_vllms_own_error(host: CpuHost, tmp_path: Path) -> None:
    error = failed_start(host, tmp_path, extra_args=["--enforce-eager", "--no-such-flag"])
    assert error["cause"] == "unknown_argument", error
    assert any("--no-such-flag" in line for line in error["log_tail"]), error["log_tail"]


def test_a_kv_cache_too_small_is_classified(host: CpuHost, tmp_path: Path) -> None:
    error = failed_start(
        host,
        tmp_path,
        max_model_len=2048,  # 16 blocks of 128 tokens; 4 blocks hold 384 (one is the null block)
        extra_args=["--enforce-eager", "--num-gpu-blocks-override", "4"],
    )
    # vLLM prints its ValueError, then ~100 lines of tracebacks: the cause is read from above
    # the 40 lines kept in the error
    assert error["cause"] == "kv_cache_memory", error
    assert "died during start-up: not enough memory for the KV cache" in error["message"]
    assert "VLLM_CPU_KVCACHE_SPACE" in error["hint"]
