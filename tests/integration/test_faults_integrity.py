"""A measurement is either right or marked failed (issue 9, items 1, 2, 16, 22), over real sshd.

Each test breaks a run the way the issue reproduced it, then reads the recorded outcome
(summary.json through ``RunResult.load``), the exit status, the console's message, and checks
that no engine process is left on the host:

- two host entries on one machine and one port: refused at plan time, nothing launched;
- another server starts answering on the run's port while the engine loads: the run fails
  with "another server answered", naming that process (its --api-key masked);
- a server already holding the port: the launch is refused, naming it (key masked);
- the engine is killed with SIGKILL while measuring: the run fails, non-zero exit;
- two `orch run` at once on one host and port: the second is refused, naming the first run;
- the engine stays healthy but answers every request with HTTP 500: the run fails.

A start-up death's cause (SGLang's "Not enough memory") is checked on a FakeAgent, in
tests/unit/test_runner_faults_fake.py; a start-up death through `orch run` is in test_run_e2e.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.results.model import RunResult
from tests.fixtures.procs import alive, kill_tree
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

HANG_GUARD_S = 120.0  # a hang guard only: each test takes a few seconds
FOREIGN_KEY = "sk-foreign-9b1e77c0d3"  # the --api-key of a process that is not orch's
SERVED = "Qwen/Qwen3.6-27B"

FOREIGN_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{}"
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": sys.argv[-1]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler).serve_forever()
"""


# -- set-up ---------------------------------------------------------------------------------


def host_entry(host: SshdHost, **env: str) -> dict[str, Any]:
    return {
        **host.inventory_entry(),
        "gpus": "2 x RTX A6000",
        "env": {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4", **env},
    }


def write_hosts(tmp: Path, factory: SshdFactory, hosts: dict[str, dict[str, Any]]) -> Path:
    path = tmp / "hosts.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(factory.write_known_hosts()),
                "ssh_config": str(factory.ssh_config_path),
                "hosts": hosts,
            }
        )
    )
    return path


def write_playbook(
    tmp: Path,
    name: str,
    *,
    hosts: list[str],
    port: int,
    num_prompts: int = 4,
    doctor: str = "error",
    **workload: Any,
) -> Path:
    path = tmp / f"{name}.yaml"
    run = {
        "doctor": doctor,
        "name": name,
        "engine": "vllm",
        "model": SERVED,
        "tensor_parallel": 2,
        "port": port,
        "workload": {
            "prompts": "builtin:chat",
            "num_prompts": num_prompts,
            "concurrency": 2,
            "max_tokens": 32,
            "warmup": 0,
            **workload,
        },
    }
    path.write_text(yaml.safe_dump({"name": name, "hosts": hosts, "runs": [run]}))
    return path


def orch_popen(tmp: Path, playbook: Path, hosts: Path, tag: str) -> subprocess.Popen[str]:
    out = (tmp / f"{tag}.out").open("w")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            str(playbook),
            "--hosts",
            str(hosts),
            "--results",
            str(tmp / f"results-{tag}"),
        ],
        cwd=tmp,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], tmp: Path, tag: str) -> tuple[int, str]:
    """Exit status and the whole console (stdout and stderr), words rejoined (rich wraps)."""
    code = proc.wait(timeout=HANG_GUARD_S)
    return code, " ".join((tmp / f"{tag}.out").read_text().split())


def only_summary(tmp: Path, tag: str) -> RunResult:
    found = list((tmp / f"results-{tag}").glob("*/*/summary.json"))
    assert len(found) == 1, found
    return RunResult.load(found[0])


def server_records(host: SshdHost) -> list[Path]:
    return sorted((host.workdir / "runs").glob("*/server.json"))


def wait_for(what: str, check: Any, proc: subprocess.Popen[str] | None = None) -> Any:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        assert proc is None or proc.poll() is None, f"orch ended before {what}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def no_engine_left(host: SshdHost) -> None:
    """Every process started through the host has ended (the sshd sessions close as orch
    exits: give them a moment)."""
    deadline = time.monotonic() + 10
    while host.leftover_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.leftover_pids() == [], "a process started through the host is still running"


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def foreign_server(tmp: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A plain HTTP server that is not orch's, answering health and the model list on
    ``port``, with an --api-key in its command line."""
    script = tmp / "foreign.py"
    script.write_text(FOREIGN_SERVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), "--api-key", FOREIGN_KEY, "--port", str(port), SERVED]
    )
    try:
        wait_for("the foreign server to listen", lambda: listening(port))
        yield proc
    finally:
        kill_tree(proc.pid)


def secret_nowhere(tmp: Path, console: str) -> None:
    assert FOREIGN_KEY not in console
    for path in tmp.rglob("results-*/**/*"):
        if path.is_file():
            assert FOREIGN_KEY.encode() not in path.read_bytes(), path


# -- item 1: one machine, one port ----------------------------------------------------------


def test_two_host_entries_on_one_machine_and_port_are_refused_at_plan_time(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = sshd_factory.start("gpu")
    hosts = write_hosts(
        tmp_path, sshd_factory, {"gpu-a": host_entry(host), "gpu-b": host_entry(host)}
    )
    port = free_port()
    playbook = write_playbook(tmp_path, "shared", hosts=["gpu-a", "gpu-b"], port=port)
    code, console = finish(orch_popen(tmp_path, playbook, hosts, "plan"), tmp_path, "plan")
    assert code == 2, console
    assert f"runs 'shared' on gpu-a and 'shared' on gpu-b would both listen on port {port}" in (
        console
    )
    assert "distinct `port:`" in console
    assert "Traceback" not in console
    assert not (tmp_path / "results-plan").exists()  # nothing ran
    assert server_records(host) == []  # nothing was launched
    no_engine_left(host)


def test_a_server_that_starts_answering_on_the_port_fails_the_run(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The engine claims its port but listens only once loaded (as vLLM does); another server
    that binds it meanwhile answers health and the model list: the run must not be measured
    against it."""
    host = sshd_factory.start("gpu")
    hosts = write_hosts(tmp_path, sshd_factory, {"gpu": host_entry(host, ORCH_SIM_LOAD_S="4")})
    port = free_port()
    playbook = write_playbook(tmp_path, "stolen", hosts=["gpu"], port=port)
    proc = orch_popen(tmp_path, playbook, hosts, "stolen")
    try:
        wait_for("the engine to be launched", lambda: server_records(host), proc)
        with foreign_server(tmp_path, port) as foreign:
            code, console = finish(proc, tmp_path, "stolen")
            assert foreign.poll() is None  # orch never touches a process it did not start
    finally:
        if proc.poll() is None:
            proc.kill()
    print(console)
    assert code == 1, console
    result = only_summary(tmp_path, "stolen")
    assert result.verdict == "failed"
    assert result.error is not None and result.error.cause == "another_server_answered"
    assert f"another server answered on 127.0.0.1:{port}: pid {foreign.pid}" in result.error.message
    assert "--api-key ***" in result.error.message
    assert result.requests is None  # nothing was measured against the other server
    assert "another server answered" in console
    secret_nowhere(tmp_path, console)
    no_engine_left(host)


def test_a_server_already_on_the_port_refuses_the_launch_naming_it_masked(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = sshd_factory.start("gpu")
    hosts = write_hosts(tmp_path, sshd_factory, {"gpu": host_entry(host)})
    port = free_port()
    # the doctor sees the port taken too: `doctor: warn` lets the launch itself refuse
    playbook = write_playbook(tmp_path, "stale", hosts=["gpu"], port=port, doctor="warn")
    with foreign_server(tmp_path, port) as foreign:
        code, console = finish(orch_popen(tmp_path, playbook, hosts, "stale"), tmp_path, "stale")
    print(console)
    assert code == 1, console
    result = only_summary(tmp_path, "stale")
    assert result.error is not None and result.error.kind == "port_in_use"
    assert f"already in use by pid {foreign.pid}" in result.error.message
    assert "--api-key ***" in result.error.message
    assert f"--api-key *** --port {port}" in console
    secret_nowhere(tmp_path, console)
    assert server_records(host) == []
    no_engine_left(host)


# -- item 2: the engine dies while measuring ------------------------------------------------


def test_engine_killed_while_measuring_fails_the_run(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    host = sshd_factory.start("gpu")
    hosts = write_hosts(tmp_path, sshd_factory, {"gpu": host_entry(host)})
    playbook = write_playbook(
        tmp_path, "killed", hosts=["gpu"], port=free_port(), num_prompts=400, max_tokens=256
    )
    proc = orch_popen(tmp_path, playbook, hosts, "killed")
    try:
        wait_for(
            "the run to measure",
            lambda: "gpu killed: measuring" in (tmp_path / "killed.out").read_text(),
            proc,
        )
        record = json.loads(server_records(host)[0].read_text())
        os.kill(record["pid"], signal.SIGKILL)
        code, console = finish(proc, tmp_path, "killed")
    finally:
        if proc.poll() is None:
            proc.kill()
    print(console)
    assert code == 1, console
    result = only_summary(tmp_path, "killed")
    assert result.verdict == "failed"
    assert result.error is not None
    assert result.error.cause == "engine_died"
    assert "died while measuring (killed by SIGKILL)" in result.error.message
    assert result.error.log_tail  # the engine's last lines
    assert "died while measuring" in console
    assert not alive(record["pid"])
    no_engine_left(host)


# -- item 16: one launch per host and port --------------------------------------------------


def test_a_second_orch_run_on_the_same_host_and_port_is_refused(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The first run's engine has claimed its port but does not listen yet (it loads): a
    probe of the port finds it free, only the lock tells."""
    host = sshd_factory.start("gpu")
    hosts = write_hosts(tmp_path, sshd_factory, {"gpu": host_entry(host, ORCH_SIM_LOAD_S="3")})
    port = free_port()
    first = orch_popen(
        tmp_path,
        write_playbook(tmp_path, "first", hosts=["gpu"], port=port, num_prompts=40),
        hosts,
        "first",
    )
    try:
        launched = wait_for("the first engine", lambda: server_records(host), first)
        first_id = launched[0].parent.name
        # `doctor: warn`: the doctor sees the first engine's GPUs busy; the launch must refuse
        second_book = write_playbook(tmp_path, "second", hosts=["gpu"], port=port, doctor="warn")
        second = orch_popen(tmp_path, second_book, hosts, "second")
        code2, console2 = finish(second, tmp_path, "second")
        code1, console1 = finish(first, tmp_path, "first")
    finally:
        for proc in (first,):
            if proc.poll() is None:
                proc.kill()
    assert code2 == 1, console2
    refused = only_summary(tmp_path, "second")
    assert refused.error is not None and refused.error.kind == "port_in_use"
    assert f"reserved by orch run '{first_id}'" in refused.error.message
    assert f"orch stop {first_id}" in console2
    assert code1 == 0, console1  # the first run was not disturbed
    done = only_summary(tmp_path, "first")
    assert done.verdict == "ok" and done.requests is not None and done.requests.completed == 40
    assert [p.parent.name for p in server_records(host)] == [first_id]  # the second never ran
    assert not (host.workdir / "locks" / f"port-{port}.lock").exists()  # released by the stop
    no_engine_left(host)


def test_a_run_whose_every_request_fails_is_failed(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The engine stays up and healthy but answers every completion with HTTP 500: nothing was
    measured, so the run fails with the cause, not ok with zero completed."""
    host = sshd_factory.start("gpu")
    hosts = write_hosts(
        tmp_path, sshd_factory, {"gpu": host_entry(host, ORCH_SIM_FAIL_REQUESTS="1")}
    )
    playbook = write_playbook(tmp_path, "allfail", hosts=["gpu"], port=free_port(), num_prompts=6)
    code, console = finish(orch_popen(tmp_path, playbook, hosts, "allfail"), tmp_path, "allfail")
    print(console)
    assert code == 1, console
    result = only_summary(tmp_path, "allfail")
    assert result.verdict == "failed"
    assert result.error is not None and result.error.cause == "all_requests_failed"
    assert "every measured request failed (6 of 6)" in result.error.message
    assert "6 x HTTP 500" in result.error.message
    assert any('" 500 ' in line for line in result.error.log_tail)  # the access log's 500s
    assert "allfail: failed: run 'allfail': every measured request failed (6 of 6)" in console
    assert "allfail on gpu failed: every measured request failed (6 of 6)" in console
    assert "warning: allfail on gpu: every measured" not in console  # told once, as the failure
    assert "Traceback" not in console
    [record] = server_records(host)
    assert not alive(json.loads(record.read_text())["pid"])  # still stopped, though healthy
    no_engine_left(host)
