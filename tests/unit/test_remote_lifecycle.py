"""The agent's lifecycle verbs run for real on this machine: the agent zipapp, a sandbox with the
engine simulator and the fake nvidia-smi, real processes, real ports, real signals."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.bundle import build_bundle
from orchestrator.config import RunSpec
from orchestrator.engines import ENGINES
from orchestrator.engines.failures import OOM, UNKNOWN_ARGUMENT, classify
from orchestrator.remote.probe import machine_id
from orchestrator.remote.wire import CONTRACT_VERSION
from orchestrator.sim.gpus import register_process, unregister_process
from orchestrator.sim.sandbox import Sandbox, prepare_sandbox
from tests.fixtures.sshd import free_port, port_free

FAST = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "50"}
WORKDIR_VERBS = ("launch", "status", "tail", "stop")


class Host:
    """This machine playing a GPU host: the agent zipapp run by a clean environment."""

    def __init__(self, root: Path) -> None:
        self.sandbox: Sandbox = prepare_sandbox(root / "box")
        self.workdir = root / "work"
        self.specs = root / "specs"
        self.specs.mkdir(parents=True)
        bundle = build_bundle()
        self.pyz = root / bundle.filename
        self.pyz.write_bytes(bundle.data)
        self.env = {**self.sandbox.env(), "LANG": "C.UTF-8"}

    def spec_file(self, verb: str, spec: dict[str, Any]) -> Path:
        path = self.specs / f"{verb}-{uuid.uuid4().hex}.json"
        workdir = {"workdir": str(self.workdir)} if verb in WORKDIR_VERBS else {}
        path.write_text(json.dumps({"v": CONTRACT_VERSION, **workdir, **spec}))
        return path

    def run(self, verb: str, spec: dict[str, Any], *, timeout: float = 60) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [sys.executable, str(self.pyz), verb, str(self.spec_file(verb, spec))],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        assert events and events[-1]["event"] in ("result", "error"), proc.stderr
        return events

    def call(self, verb: str, spec: dict[str, Any], **kw: Any) -> dict[str, Any]:
        final = self.run(verb, spec, **kw)[-1]
        assert final["event"] == "result", final
        return final["data"]

    def fail(self, verb: str, spec: dict[str, Any]) -> dict[str, Any]:
        final = self.run(verb, spec)[-1]
        assert final["event"] == "error", final
        return final

    def popen(self, verb: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(self.pyz), verb, str(self.spec_file(verb, spec))],
            env=self.env,
            stdout=subprocess.PIPE,
            text=True,
        )

    def smi_apps(self) -> list[int]:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [int(line.split(",")[0]) for line in out.splitlines() if line.strip()]

    def launch_run(
        self,
        run: RunSpec,
        run_id: str,
        *,
        extra_env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> dict[str, Any]:
        adapter = ENGINES[run.engine]
        port = port or free_port()
        return self.call(
            "launch",
            {
                "run_id": run_id,
                "argv": adapter.argv(run, port=port),
                "env": {**FAST, **(extra_env or {})},
                "port": port,
                "gpus_needed": adapter.gpus_needed(run),
                "gpu_busy_threshold_mib": 1024,
            },
        )

    def wait_ready(self, port: int, served: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            health = self.call(
                "http", {"method": "GET", "port": port, "path": "/health", "timeout_s": 2}
            )
            if health["status"] == 200:
                models = self.call("http", {"method": "GET", "port": port, "path": "/v1/models"})
                if served in [m["id"] for m in json.loads(models["body"])["data"]]:
                    return
            time.sleep(0.2)
        raise AssertionError(f"server on port {port} not ready after {timeout} s")

    def wait_dead(self, run_id: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.call("status", {"run_id": run_id})["servers"][0]
            if not state["alive"] and state["returncode"] is not None:
                return state
            time.sleep(0.1)
        raise AssertionError(f"{run_id} still alive after {timeout} s")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    yield h
    h.run("stop", {"all": True, "timeout_s": 5, "gpu_timeout_s": 5})  # never leave a server behind


def vllm_run(**fields: Any) -> RunSpec:
    data = {
        "name": "v",
        "engine": "vllm",
        "model": "Qwen/Qwen3.6-27B",
        "tensor_parallel": 2,
        "speculative": {"method": "mtp", "num_draft_tokens": 3},
        **fields,
    }
    return RunSpec.model_validate(data)


def sglang_run(**fields: Any) -> RunSpec:
    data = {
        "name": "s",
        "engine": "sglang",
        "model": "Qwen/Qwen3.6-27B",
        "tensor_parallel": 2,
        "speculative": {"method": "mtp", "num_draft_tokens": 3},
        **fields,
    }
    return RunSpec.model_validate(data)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def lines_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every line of the tail's batches with its own offset and next (these logs are UTF-8 and
    newline-ended, so a line's bytes are its text's and a newline); each batch ends where its
    last line does."""
    lines = []
    for batch in (e for e in events if e["event"] == "lines"):
        position = batch["offset"]
        for text in batch["lines"]:
            size = len(text.encode()) + 1
            lines.append({"offset": position, "next": position + size, "text": text})
            position += size
        assert position == batch["next"]
    return lines


def assert_contiguous(lines: list[dict[str, Any]], start: int) -> None:
    position = start
    for line in lines:
        assert line["offset"] == position
        assert line["next"] == position + len(line["text"].encode()) + 1
        position = line["next"]


def test_launch_ready_tail_stop_vllm(host: Host) -> None:
    port = free_port()
    record = host.launch_run(vllm_run(), "v1", port=port)
    pid = record["pid"]
    assert record["pgid"] == pid and record["port"] == port and record["log_offset"] == 0
    assert record["env_keys"] == sorted(FAST)
    assert Path(record["argv"][0]) == host.sandbox.bin_dir / "vllm"  # resolved on the host's PATH
    saved = json.loads((host.workdir / "runs" / "v1" / "server.json").read_text())
    assert saved["pid"] == pid and saved["argv"] == record["argv"] and "env" not in saved
    host.wait_ready(port, "Qwen/Qwen3.6-27B")
    state = host.call("status", {"run_id": "v1"})["servers"][0]
    assert state["alive"] is True and state["returncode"] is None and state["log_size"] > 0
    held = set(host.smi_apps())
    assert held & set(state["group_pids"]), "the simulated engine should hold GPU memory"

    events = host.run("tail", {"run_id": "v1", "offset": 0})
    lines = lines_of(events)
    assert_contiguous(lines, 0)
    assert any("Application startup complete." in line["text"] for line in lines)
    assert (
        events[-1]["data"]["reason"] == "eof" and events[-1]["data"]["offset"] == lines[-1]["next"]
    )
    middle = lines[len(lines) // 2]
    resumed = lines_of(host.run("tail", {"run_id": "v1", "offset": middle["offset"]}))
    assert resumed[: len(lines) - len(lines) // 2] == lines[len(lines) // 2 :]

    result = host.call("stop", {"run_id": "v1", "timeout_s": 10})["stopped"][0]
    assert result["was_running"] is True and result["signals"] == ["SIGTERM"]
    assert result["remaining_pids"] == [] and result["gpu_released"] is True
    assert pid in result["killed_pids"] and not any(alive(p) for p in result["killed_pids"])
    assert not set(host.smi_apps()) & set(result["killed_pids"])
    after = host.call("status", {"run_id": "v1"})["servers"][0]
    assert after["alive"] is False and after["exit"]["pid"] == pid
    again = host.call("stop", {"run_id": "v1"})["stopped"][0]
    assert again["was_running"] is False and again["signals"] == []


def test_tail_follows_live_and_ends_when_the_server_exits(host: Host) -> None:
    run = sglang_run()
    port = free_port()
    host.launch_run(run, "s1", port=port)
    follower = host.popen(
        "tail",
        {"run_id": "s1", "offset": 0, "follow": True, "until_exit": True, "poll_interval_s": 0.05},
    )
    host.wait_ready(port, "Qwen/Qwen3.6-27B")
    host.call("stop", {"run_id": "s1", "timeout_s": 10})
    out, _ = follower.communicate(timeout=30)
    events = [json.loads(line) for line in out.splitlines()]
    lines = lines_of(events)
    assert_contiguous(lines, 0)
    assert any("The server is fired up and ready to roll!" in line["text"] for line in lines)
    assert events[-1]["event"] == "result" and events[-1]["data"]["reason"] == "exited"
    size = (host.workdir / "runs" / "s1" / "server.log").stat().st_size
    assert events[-1]["data"]["offset"] == size  # drained to the last byte


def test_port_in_use_is_refused_naming_the_holder(host: Host) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        adapter = ENGINES["vllm"]
        error = host.fail(
            "launch",
            {
                "run_id": "p1",
                "argv": adapter.argv(vllm_run(), port=port),
                "env": FAST,
                "port": port,
            },
        )
    assert error["kind"] == "port_in_use"
    assert error["message"].startswith(
        f"port {port} on 127.0.0.1 is already in use by pid {os.getpid()} ("
    )
    assert error["details"]["holders"][0]["pid"] == os.getpid()
    assert not (host.workdir / "runs" / "p1" / "server.json").exists()


def test_busy_gpu_is_refused_naming_the_process(host: Host) -> None:
    holder = subprocess.Popen(["sleep", "60"])
    try:
        register_process(
            host.sandbox.state_dir,
            pid=holder.pid,
            gpus=[1],
            memory_mib=30000,
            process_name="python3",
        )
        port = free_port()
        error = host.fail(
            "launch",
            {
                "run_id": "g1",
                "argv": ENGINES["vllm"].argv(vllm_run(), port=port),
                "env": FAST,
                "port": port,
                "gpus_needed": 2,
                "gpu_busy_threshold_mib": 1024,
            },
        )
        assert error["kind"] == "gpu_busy"
        assert error["message"] == (
            f"GPU 1 has 30001 MiB in use by pid {holder.pid} python3 (30000 MiB) "
            "(more than 1024 MiB)"
        )
        # one GPU is enough when the run only needs GPU 0
        one = host.call(
            "launch",
            {
                "run_id": "g2",
                "argv": ENGINES["vllm"].argv(vllm_run(tensor_parallel=1), port=port),
                "env": FAST,
                "port": port,
                "gpus_needed": 1,
            },
        )
        assert one["gpu_check"] == {"checked": True, "reason": None, "gpus": [0]}
        error = host.fail(
            "launch",
            {"run_id": "g3", "argv": ["vllm"], "env": {}, "port": free_port(), "gpus_needed": 3},
        )
        assert (error["kind"], error["message"]) == (
            "not_enough_gpus",
            "the run needs 3 GPU(s) but only 2 are available",
        )
    finally:
        holder.kill()
        holder.wait()
        unregister_process(host.sandbox.state_dir, holder.pid)


def test_a_shared_hosts_launch_checks_only_the_gpus_it_was_given(host: Host) -> None:
    """share_gpus: with GPU 0 busy, a launch given GPU 1 (``gpu_ids``) starts there, with
    CUDA_VISIBLE_DEVICES set by the agent; the same launch without ids is refused."""
    holder = subprocess.Popen(["sleep", "60"])
    try:
        register_process(
            host.sandbox.state_dir, pid=holder.pid, gpus=[0], memory_mib=30000, process_name="x"
        )
        run = vllm_run(tensor_parallel=1, model="Qwen/Qwen3-8B", speculative={"method": "none"})

        def spec(run_id: str, port: int, **fields: Any) -> dict[str, Any]:
            argv = ENGINES["vllm"].argv(run, port=port)
            return {"run_id": run_id, "argv": argv, "env": FAST, "port": port, **fields}

        error = host.fail("launch", spec("s0", free_port(), gpus_needed=1))
        assert error["kind"] == "gpu_busy" and error["message"].startswith("GPU 0 has 30001 MiB")
        port = free_port()
        record = host.call("launch", spec("s1", port, gpus_needed=1, gpu_ids=[1]))
        assert record["gpu_check"] == {"checked": True, "reason": None, "gpus": [1]}
        assert record["env_keys"] == sorted([*FAST, "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"])
        host.wait_ready(port, "Qwen/Qwen3-8B")
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            env=host.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        used = {int(i): int(m) for i, m in (line.split(",") for line in out.splitlines())}
        assert used[1] > 1024 and used[0] == 30001  # the engine sits on GPU 1 only
        for ids, why in (([0, 0], "must be 1 distinct GPU indices"), ([], "must be 1")):
            error = host.fail("launch", spec("s2", free_port(), gpus_needed=1, gpu_ids=ids))
            assert error["kind"] == "bad_spec" and why in error["message"]
        clash = {**spec("s3", free_port(), gpus_needed=1, gpu_ids=[1])}
        clash["env"] = {**FAST, "CUDA_VISIBLE_DEVICES": "0"}
        error = host.fail("launch", clash)
        assert error["message"] == (
            "launch: env sets CUDA_VISIBLE_DEVICES=0 but gpu_ids are [1]: one or the other"
        )
    finally:
        holder.kill()
        holder.wait()
        unregister_process(host.sandbox.state_dir, holder.pid)


@pytest.mark.parametrize(
    ("extra_env", "extra_args", "cause"),
    [
        ({"ORCH_SIM_FAIL": "oom"}, [], OOM),
        ({}, ["--no-such-flag", "3"], UNKNOWN_ARGUMENT),
    ],
)
def test_death_at_start_up_is_recorded_and_classified(
    host: Host, extra_env: dict[str, str], extra_args: list[str], cause: str
) -> None:
    record = host.launch_run(vllm_run(extra_args=extra_args), "d1", extra_env=extra_env)
    state = host.wait_dead("d1")
    assert state["returncode"] not in (0, None) and state["exit"]["pid"] == record["pid"]
    lines = [e["text"] for e in lines_of(host.run("tail", {"run_id": "d1", "offset": 0}))]
    assert classify(lines[-40:]) == cause
    assert not host.smi_apps()


def test_stop_escalates_to_sigkill_and_reaps_the_whole_group(host: Host) -> None:
    """An engine that ignores SIGTERM, with a child in its group: both must go."""
    code = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    record = host.call(
        "launch", {"run_id": "k1", "argv": ["python", "-c", code], "env": {}, "port": free_port()}
    )
    assert record["argv"][0] == sys.executable
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (
        lines := lines_of(host.run("tail", {"run_id": "k1"}))
    ):
        time.sleep(0.05)
    child = int(lines[0]["text"].split()[1])
    result = host.call("stop", {"run_id": "k1", "timeout_s": 0.5})["stopped"][0]
    assert result["signals"] == ["SIGTERM", "SIGKILL"]
    assert sorted(result["killed_pids"]) == sorted([record["pid"], child])
    assert result["remaining_pids"] == [] and not alive(child) and not alive(record["pid"])
    assert result["exit"]["returncode"] == -9 and result["exit"]["signal"] == "SIGKILL"


def test_server_survives_the_agent_and_relaunch_is_refused_while_alive(host: Host) -> None:
    port = free_port()
    record = host.launch_run(vllm_run(), "a1", port=port)
    host.wait_ready(port, "Qwen/Qwen3.6-27B")
    assert alive(record["pid"]) and alive(record["supervisor_pid"])
    assert os.getsid(record["pid"]) == record["pid"] != os.getsid(0)  # its own session
    error = host.fail("launch", {"run_id": "a1", "argv": ["vllm"], "env": {}, "port": free_port()})
    assert error["kind"] == "already_running"


def test_http_answers_errors_as_data(host: Host) -> None:
    port = free_port()
    host.launch_run(sglang_run(), "h1", port=port)
    host.wait_ready(port, "Qwen/Qwen3.6-27B")
    missing = host.call("http", {"method": "GET", "port": port, "path": "/no/such/path"})
    assert missing["status"] == 404 and missing["error"] is None
    info = host.call("http", {"method": "GET", "port": port, "path": "/server_info"})
    assert info["status"] == 200 and "internal_states" in json.loads(info["body"])
    closed = host.call("http", {"method": "GET", "port": free_port(), "path": "/health"})
    assert closed == {"status": None, "headers": {}, "body": "", "error": "connection refused"}
    bad = host.fail("http", {"method": "GET", "port": port, "path": "http://example.com/"})
    assert bad["kind"] == "bad_spec"


def test_status_and_launch_errors(host: Host) -> None:
    status = host.call("status", {"all": True})
    assert status["servers"] == []
    assert status["workdir"] == os.path.realpath(host.workdir)
    assert status["machine_id"] == machine_id()
    assert host.fail("status", {"run_id": "nope"})["kind"] == "not_found"
    assert host.fail("stop", {"run_id": "nope"})["kind"] == "not_found"
    assert (
        host.fail("launch", {"run_id": "../x", "argv": ["vllm"], "port": 1234})["kind"]
        == "bad_spec"
    )
    error = host.fail(
        "launch", {"run_id": "e1", "argv": ["no-such-engine-xyz"], "env": {}, "port": free_port()}
    )
    assert error["kind"] == "engine_not_found"
    assert error["message"].startswith("no-such-engine-xyz is neither next to ")


def test_records_of_another_agent_version_do_not_break_status(tmp_path: Path) -> None:
    """runs/ outlives agent versions: a field a later agent added is dropped, a record this
    agent cannot read hides that run only, never every run on the host."""
    from orchestrator.remote.lifecycle import server_state

    newer, broken = tmp_path / "newer", tmp_path / "broken"
    newer.mkdir()
    broken.mkdir()
    record = {
        "run_id": "newer",
        "pid": 2**22 + 7,  # no such process: the run has ended
        "pgid": 2**22 + 7,
        "supervisor_pid": 2**22 + 8,
        "argv": ["vllm", "serve"],
        "requested_argv": ["vllm", "serve"],
        "env_keys": [],
        "port": 1,
        "cwd": str(newer),
        "log": str(newer / "server.log"),
        "started_at": 1.0,
        "start_ticks": None,
        "boot_id": None,
        "added_later": [1, 2],
    }
    (newer / "server.json").write_text(json.dumps(record))
    (broken / "server.json").write_text(json.dumps({"run_id": "broken"}))
    state = server_state(str(newer), check_port=False)
    assert state is not None and state.run_id == "newer" and state.alive is False
    assert server_state(str(broken), check_port=False) is None


# An engine that listens on its port and, on SIGTERM, either ignores it ("ignore": a hung
# engine still serving) or closes its listener and lingers ("close": vLLM hung on an open
# stream after its HTTP server shut down). It prints "listening" once the port is bound.
HUNG_ENGINE = (
    "import signal, socket, sys, time\n"
    "sock = socket.socket()\n"
    "sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "sock.bind(('127.0.0.1', int(sys.argv[1])))\n"
    "sock.listen()\n"
    "def on_term(*_):\n"
    "    if sys.argv[2] == 'close':\n"
    "        sock.close()\n"
    "signal.signal(signal.SIGTERM, on_term)\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)


def launch_hung(host: Host, run_id: str, mode: str) -> tuple[dict[str, Any], int]:
    port = free_port()
    argv = ["python", "-c", HUNG_ENGINE, str(port), mode]
    record = host.call("launch", {"run_id": run_id, "argv": argv, "env": {}, "port": port})
    deadline = time.monotonic() + 20
    while not lines_of(host.run("tail", {"run_id": run_id})):
        assert time.monotonic() < deadline, "the hung engine never started listening"
        time.sleep(0.05)
    return record, port


def test_an_engine_ignoring_sigterm_is_killed_after_the_grace(host: Host) -> None:
    """Still listening after SIGTERM: it gets the whole grace, then SIGKILL, and nothing of it
    is left (process, port)."""
    record, port = launch_hung(host, "g1", "ignore")
    grace = 2.0
    result = host.call("stop", {"run_id": "g1", "timeout_s": grace, "linger_s": 0.5})
    outcome = result["stopped"][0]
    assert outcome["signals"] == ["SIGTERM", "SIGKILL"]
    assert grace <= outcome["waited_s"] < grace + 15  # the grace, then the kill (a hang guard)
    assert outcome["remaining_pids"] == [] and not alive(record["pid"])
    assert outcome["exit"]["signal"] == "SIGKILL" and port_free(port)


def test_an_engine_lingering_after_its_port_closed_is_killed_after_linger_s(host: Host) -> None:
    """Its HTTP server is down but the process stays (vLLM hung on an open stream): SIGKILL
    comes ``linger_s`` after the port closed, not at the end of a long grace."""
    record, port = launch_hung(host, "g2", "close")
    grace, linger = 120.0, 1.0
    outcome = host.call("stop", {"run_id": "g2", "timeout_s": grace, "linger_s": linger})[
        "stopped"
    ][0]
    assert outcome["signals"] == ["SIGTERM", "SIGKILL"]
    assert linger <= outcome["waited_s"] < grace / 4
    assert outcome["remaining_pids"] == [] and not alive(record["pid"]) and port_free(port)


def test_a_requested_stop_is_recorded_for_the_run_to_read(host: Host) -> None:
    """`orch stop` names who asked; the agent writes it before the SIGTERM and status reports
    it for this launch only. A run stopping its own server writes nothing."""
    launch_hung(host, "m1", "close")  # it lingers after closing its port: linger_s ends it
    before = time.time()
    stop = {"timeout_s": 10, "linger_s": 0.5}
    host.call("stop", {"run_id": "m1", **stop, "requested_by": "alice@laptop"})
    state = host.call("status", {"run_id": "m1"})["servers"][0]
    assert state["stop"]["by"] == "alice@laptop" and state["stop"]["grace_s"] == 10
    assert before <= state["stop"]["at"] <= state["exit"]["ended_at"]
    launch_hung(host, "m2", "close")
    host.call("stop", {"run_id": "m2", **stop})
    assert host.call("status", {"run_id": "m2"})["servers"][0]["stop"] is None
    assert not (host.workdir / "runs" / "m2" / "stop.json").exists()
