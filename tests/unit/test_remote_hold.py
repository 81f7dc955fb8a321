"""The agent's ``hold`` verb (a Slurm job's batch step) run for real: the agent zipapp, the
engine simulator, real processes and signals; no Slurm needed to check what it does."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines import ENGINES
from orchestrator.remote.wire import CONTRACT_VERSION
from tests.unit.test_remote_lifecycle import FAST, Host, alive, free_port, host, vllm_run

__all__ = ["host"]  # the fixture, used here by name

WAIT_S = 60.0


def launch_spec(host: Host, run_id: str, port: int) -> dict[str, Any]:
    # one GPU: a model whose weights fit it, plain decoding (a 27B model in BF16 is a CUDA OOM
    # on one 48 GB card, and the engine died before the test could stop it)
    run = vllm_run(tensor_parallel=1, model="Qwen/Qwen3-8B", speculative={"method": "none"})
    adapter = ENGINES[run.engine]
    return {
        "v": CONTRACT_VERSION,
        "run_id": run_id,
        "workdir": str(host.workdir),
        "argv": adapter.argv(run, port=port),
        "env": FAST,
        "port": port,
        "gpus_needed": 1,
    }


def write_whole(path: Path, spec: dict[str, Any]) -> None:
    """As orch writes a spec: to a temporary name, then renamed (a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(spec))
    tmp.rename(path)


def events(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, _ = proc.communicate(timeout=WAIT_S)
    return [json.loads(line) for line in out.splitlines()]


def first_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "hold printed nothing"
    return json.loads(line)


def test_no_launch_spec_in_time_ends_the_hold(host: Host, tmp_path: Path) -> None:
    spec = {"launch_spec": str(tmp_path / "never.json"), "wait_s": 0.3, "linger_s": 0}
    (final,) = events(host.popen("hold", spec))
    assert final["event"] == "result"
    assert final["data"] == {"launched": False, "reason": "no launch spec", "exit": None}


def test_launches_from_the_spec_written_later_and_ends_when_the_engine_exits(
    host: Host, tmp_path: Path
) -> None:
    path = tmp_path / "launch.json"
    proc = host.popen("hold", {"launch_spec": str(path), "wait_s": WAIT_S, "linger_s": 0})
    port = free_port()
    write_whole(path, launch_spec(host, "held", port))
    launched = first_line(proc)
    assert launched["event"] == "launched"
    record = launched["launch"]
    assert record["run_id"] == "held" and record["port"] == port and alive(record["pid"])
    assert not path.exists()  # read once, then deleted: it may hold secrets
    stopped = host.call("stop", {"run_id": "held", "timeout_s": 10, "gpu_timeout_s": 5})
    log = (host.workdir / "runs" / "held" / "server.log").read_text()
    assert stopped["stopped"][0]["was_running"], (stopped, log[-2000:])
    (final,) = events(proc)
    assert final["data"]["launched"] and final["data"]["reason"] == "engine exited"
    assert final["data"]["exit"]["pid"] == record["pid"]


def test_sigterm_stops_the_engine_before_the_hold_ends(host: Host, tmp_path: Path) -> None:
    """scancel: the job's processes get SIGTERM; the engine must not outlive the job."""
    path = tmp_path / "launch.json"
    proc = host.popen("hold", {"launch_spec": str(path), "wait_s": WAIT_S})
    write_whole(path, launch_spec(host, "cancelled", free_port()))
    record = first_line(proc)["launch"]
    proc.send_signal(signal.SIGTERM)
    (final,) = events(proc)
    assert final["data"]["reason"] == "signalled" and final["data"]["launched"]
    assert final["data"]["exit"]["pid"] == record["pid"]
    assert not alive(record["pid"])


def test_a_supervisor_given_sigterm_passes_it_on_and_stays_the_engines_parent(
    host: Host,
) -> None:
    """What Slurm's proctrack/linuxproc relies on to SIGKILL an engine that ignores SIGTERM."""
    port = free_port()
    record = host.launch_run(vllm_run(tensor_parallel=1), "sup", port=port)
    supervisor = record["supervisor_pid"]
    subprocess.run(["kill", "-TERM", str(supervisor)], check=True)
    deadline = time.monotonic() + WAIT_S
    while alive(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(record["pid"])
    state = host.wait_dead("sup")
    assert state["returncode"] is not None  # the supervisor lived to record the exit


@pytest.mark.parametrize("job_id", [7, 123456])
def test_srun_argv_runs_one_task_beside_the_batch_step(job_id: int) -> None:
    from orchestrator.slurm.jobs import srun_argv

    assert srun_argv(job_id) == [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
        "--",
    ]
