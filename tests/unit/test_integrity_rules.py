"""The pure parts of issue 9's integrity checks (items 1, 3, 4, 14, 22): /proc/net/tcp parsing,
command-line masking, the plan's port-collision rule, exit statuses, the short-window warning,
the vLLM API key's way to the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.run import EXIT_COLLAPSE, EXIT_OK, EXIT_RUN_FAILED, FailOn, exit_status
from orchestrator.config import load_inventory, load_playbook
from orchestrator.engines import ENGINES
from orchestrator.engines.plan import machine_of, plan_launches, port_collisions
from orchestrator.remote.procs import listening_inodes, mask_argv
from orchestrator.runner.summarize import short_window_warning

# /proc/net/tcp and tcp6 as Linux prints them (little-endian), trimmed to the fields read.
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1
   1: 0500000A:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2222 1
   2: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1
   3: 0100007F:1F40 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4444 1
   4: 0100007F:1F41 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5555 1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6666 1
   1: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7777 1
   2: 0000000000000000FFFF00000100007F:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 8888 1
"""


def test_listening_sockets_on_a_port() -> None:
    # every LISTEN socket on 8000 (0x1F40), whatever its address; not the connection (01)
    assert listening_inodes([TCP, TCP6], 8000) == ["1111", "2222", "6666", "7777"]
    # those a connection to 127.0.0.1:8000 reaches: not 10.0.0.5 nor ::1
    assert listening_inodes([TCP, TCP6], 8000, loopback_only=True) == ["1111", "6666"]
    assert listening_inodes([TCP, TCP6], 30000, loopback_only=True) == ["3333"]  # 0.0.0.0
    # 8001: bound but not listening (07) is nobody; ::ffff:127.0.0.1 listening is someone
    assert listening_inodes([TCP, TCP6], 8001, loopback_only=True) == ["8888"]
    assert listening_inodes([TCP], 9999) == []
    assert listening_inodes(["header only\n", "garbage line\n"], 8000) == []


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["vllm", "serve", "m", "--api-key", "sk-1", "--port", "8000"],
            ["vllm", "serve", "m", "--api-key", "***", "--port", "8000"],
        ),
        (
            ["vllm", "--api-key", "k1", "k2", "-tp", "2"],
            ["vllm", "--api-key", "***", "***", "-tp", "2"],
        ),
        (["x", "--hf-token=hf_abc", "--api_key=v"], ["x", "--hf-token=***", "--api_key=***"]),
        (
            ["env", "VLLM_API_KEY=sk", "HF_TOKEN=t", "A=b"],
            ["env", "VLLM_API_KEY=***", "HF_TOKEN=***", "A=b"],
        ),
        (
            ["x", "--password", "p", "--db-secret", "s"],
            ["x", "--password", "***", "--db-secret", "***"],
        ),
        # names that only look alike keep their values
        (
            ["vllm", "--max-num-batched-tokens", "8192", "--tokenizer", "t", "--ssl-keyfile", "f"],
            ["vllm", "--max-num-batched-tokens", "8192", "--tokenizer", "t", "--ssl-keyfile", "f"],
        ),
        (
            ["python", "-m", "sglang.launch_server", "--port", "1"],
            ["python", "-m", "sglang.launch_server", "--port", "1"],
        ),
    ],
)
def test_secret_values_are_masked_in_command_lines(argv: list[str], shown: list[str]) -> None:
    assert mask_argv(argv) == shown


INVENTORY = """\
hosts:
  emb-1: {transport: embedded}
  emb-2: {transport: embedded}
  lo: {address: 127.0.0.1, port: 2222}
  gpu-a: {address: 10.0.0.1}
  gpu-a-again: {address: 10.0.0.1, port: 2200, user: other}
  gpu-b: {address: 10.0.0.2}
"""


def plans_for(tmp_path: Path, playbook: str) -> list:
    (tmp_path / "hosts.yaml").write_text(INVENTORY)
    (tmp_path / "play.yaml").write_text(playbook)
    return plan_launches(
        load_playbook(tmp_path / "play.yaml"), load_inventory(tmp_path / "hosts.yaml")
    )


def run_on(hosts: str, *, port: int = 8000, name: str = "r") -> str:
    return f"""\
  - name: {name}
    engine: vllm
    model: m
    port: {port}
    hosts: [{hosts}]
"""


@pytest.mark.parametrize(
    ("runs", "pairs"),
    [
        # two embedded hosts share this machine's loopback, and an SSH host at 127.0.0.1 too
        (run_on("emb-1, emb-2"), [("emb-1", "emb-2")]),
        (run_on("emb-1, lo"), [("emb-1", "lo")]),
        # two entries with one address are one machine, whatever their SSH port or user
        (run_on("gpu-a, gpu-a-again"), [("gpu-a", "gpu-a-again")]),
        # distinct machines, or distinct ports: no collision
        (run_on("gpu-a, gpu-b"), []),
        (run_on("emb-1", port=8001, name="a") + run_on("emb-2", port=8002, name="b"), []),
        # one host entry runs its runs one after another: one port is fine
        (run_on("emb-1", name="a") + run_on("emb-1", name="b"), []),
        # different runs, one port, two entries of one machine: they run at once
        (run_on("emb-1", name="a") + run_on("emb-2", name="b"), [("emb-1", "emb-2")]),
    ],
)
def test_port_collisions(tmp_path: Path, runs: str, pairs: list[tuple[str, str]]) -> None:
    plans = plans_for(tmp_path, "name: p\nruns:\n" + runs)
    found = port_collisions(plans)
    assert [(c.first.host.name, c.second.host.name) for c in found] == pairs
    for collision in found:
        assert collision.first.host.name in collision.message()
        assert collision.second.host.name in collision.message()
        assert "port 8000" in collision.message()


def test_machine_identity() -> None:
    inventory_hosts = {
        "emb": {"transport": "embedded"},
        "local": {"address": "LocalHost"},
        "v6": {"address": "[::1]"},
        "far": {"address": "Gpu1.Lab"},
    }
    from orchestrator.config.hostconfig import HostConfig

    machines = {n: machine_of(HostConfig(name=n, **v)) for n, v in inventory_hosts.items()}  # type: ignore[arg-type]
    assert machines == {
        "emb": "localhost",
        "local": "localhost",
        "v6": "localhost",
        "far": "gpu1.lab",
    }


@pytest.mark.parametrize(
    ("verdicts", "fail_on", "code"),
    [
        (["ok", "ok"], FailOn.COLLAPSE, EXIT_OK),
        (["ok", "disagree"], FailOn.COLLAPSE, EXIT_OK),
        (["ok", "collapse"], FailOn.COLLAPSE, EXIT_COLLAPSE),
        (["collapse", "failed"], FailOn.COLLAPSE, EXIT_RUN_FAILED),  # a failure outranks
        (["ok", "collapse"], FailOn.FAILED, EXIT_OK),  # `make demo`
        (["collapse", "failed"], FailOn.FAILED, EXIT_RUN_FAILED),
        (["failed"], FailOn.NEVER, EXIT_OK),
        ([], FailOn.COLLAPSE, EXIT_OK),
    ],
)
def test_exit_status(verdicts: list[str], fail_on: FailOn, code: int) -> None:
    assert exit_status(verdicts, fail_on) == code
    assert (EXIT_OK, EXIT_RUN_FAILED, EXIT_COLLAPSE) == (0, 1, 3)


def test_short_window_warning_sizes_the_workload_from_the_measured_rate() -> None:
    # issue 9's case: 16 requests at concurrency 16 took 2.9 s, vLLM logs every 10 s
    warning = short_window_warning("vllm", window_s=2.9, env={}, argv=[], completed=16)
    assert warning is not None
    assert "2.9 s is shorter than VLLM_LOG_STATS_INTERVAL = 10 s" in warning
    # 16 / 2.9 s = 5.52 req/s; two intervals (20 s) hold 110.3 -> 111 requests
    assert "at the measured 5.52 requests/s, num_prompts 111 (or duration_s 20)" in warning
    lowered = short_window_warning(
        "vllm", window_s=2.9, env={"VLLM_LOG_STATS_INTERVAL": "1"}, argv=[], completed=16
    )
    assert lowered is None  # the run set a 1 s interval: the window holds lines
    assert short_window_warning("vllm", window_s=30.0, env={}, argv=[], completed=16) is None
    # SGLang's interval is in decode steps: its note (log_missing_note) sizes that case
    assert short_window_warning("sglang", window_s=1.0, env={}, argv=[], completed=16) is None


def test_vllm_api_key_travels_in_the_environment() -> None:
    from orchestrator.config.playbook import RunSpec

    engine = ENGINES["vllm"]
    run = RunSpec.model_validate(
        {
            "name": "r",
            "engine": "vllm",
            "model": "m",
            "extra_args": ["--seed", "1", "--api-key=sk-9"],
        }
    )
    argv = engine.argv(run)
    assert argv[-2:] == ["--seed", "1"] and not any("sk-9" in a for a in argv)
    assert engine.env(run)["VLLM_API_KEY"] == "sk-9"
    assert engine.api_key(run) == "sk-9"  # readiness and the load generator still send it
    # several keys (vLLM's --api-key takes a list; the variable holds one): argv, masked
    several = RunSpec.model_validate(
        {"name": "r", "engine": "vllm", "model": "m", "extra_args": ["--api-key", "k1", "k2"]}
    )
    assert engine.argv(several)[-3:] == ["--api-key", "k1", "k2"]
    assert "VLLM_API_KEY" not in engine.env(several)
    # SGLang has no such variable: its key stays in argv (masked wherever shown)
    sglang = RunSpec.model_validate(
        {"name": "r", "engine": "sglang", "model": "m", "extra_args": ["--api-key", "k"]}
    )
    assert ENGINES["sglang"].argv(sglang)[-2:] == ["--api-key", "k"]


def test_port_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path: Path) -> None:
    import json
    import os

    from orchestrator.remote.lifecycle import lock_path, release_port_lock, take_port_lock
    from orchestrator.remote.protocol import AgentFailure
    from orchestrator.remote.wire import ErrorKind

    workdir = str(tmp_path)
    path = take_port_lock(workdir, 8123, "run-a")
    assert (
        path == lock_path(workdir, 8123) and json.loads(Path(path).read_text())["run_id"] == "run-a"
    )
    # run-a's launching agent (this process) is alive and it has no server.json yet: refused
    with pytest.raises(AgentFailure) as refused:
        take_port_lock(workdir, 8123, "run-b")
    assert refused.value.kind is ErrorKind.PORT_IN_USE
    assert "reserved by orch run 'run-a'" in refused.value.message
    assert "orch stop run-a" in refused.value.message
    assert take_port_lock(workdir, 8124, "run-b")  # another port is another lock
    # a lock whose launcher is gone and whose run never got a server is stale: taken over
    stale = {"run_id": "run-gone", "launcher_pid": 2**22 + 7, "launcher_ticks": 1}
    Path(path).write_text(json.dumps(stale))
    assert take_port_lock(workdir, 8123, "run-c") == path
    assert json.loads(Path(path).read_text())["run_id"] == "run-c"
    release_port_lock(path, "run-other")  # only its holder releases it
    assert os.path.exists(path)
    release_port_lock(path, "run-c")
    assert not os.path.exists(path)
