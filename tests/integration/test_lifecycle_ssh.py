"""Engine server lifecycle end to end over real OpenSSH: launch, ready, tail, stop; death at
start-up; port refused; a connection cut mid-tail; Ctrl-C leaving nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from orchestrator.agent.client import Agent
from orchestrator.config import HostConfig, RunSpec
from orchestrator.engines.failures import OOM
from orchestrator.errors import AgentError, EngineError
from orchestrator.remote.wire import ErrorKind
from orchestrator.runner.server import LogLines, Server, ServerRegistry, pool_reconnect
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

T = TypeVar("T")
FAST = {"ORCH_SIM_LOAD_S": "0.3", "ORCH_SIM_SPEED": "50"}
ROOT = Path(__file__).resolve().parents[2]


def make_run(
    engine: str = "vllm", *, name: str = "r1", env: dict[str, str] | None = None, **fields: Any
) -> RunSpec:
    spec = (
        {"method": "dflash", "draft_model": "z-lab/Qwen3.6-27B-DFlash", "num_draft_tokens": 15}
        if engine == "vllm"
        else {"method": "mtp", "num_draft_tokens": 3}
    )
    data = {
        "name": name,
        "engine": engine,
        "model": "Qwen/Qwen3.6-27B",
        "tensor_parallel": 2,
        "speculative": spec,
        "env": {**FAST, **(env or {})},
        **fields,
    }
    return RunSpec.model_validate(data)


def scenario(
    factory: SshdFactory,
    config: HostConfig,
    body: Callable[[Any, Agent, ServerRegistry], Awaitable[T]],
) -> T:
    """``body(pool, agent, registry)`` in one event loop; the registry stops what is left."""

    async def main() -> T:
        pool = factory.pool()
        try:
            agent = Agent(await pool.get(config), config)
            async with ServerRegistry() as registry:
                return await body(pool, agent, registry)
        finally:
            await pool.close()

    return asyncio.run(main())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def smi_pids(host: SshdHost) -> list[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        env=host.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(x) for x in out.split()]


@pytest.fixture
def host(sshd_factory: SshdFactory) -> SshdHost:
    return sshd_factory.start("gpu-a")


def test_launch_ready_tail_stop(sshd_factory: SshdFactory, host: SshdHost) -> None:
    config = host.host_config()
    port = free_port()
    phases: list[str] = []

    async def body(pool: Any, agent: Agent, registry: ServerRegistry) -> dict[str, Any]:
        # loading takes 3 s, so the first polls (0.1 s apart at first) see it loading
        run = make_run(env={"ORCH_SIM_LOAD_S": "3"})
        server = await Server.start(agent, run, config, run_id="it-1", port=port, registry=registry)
        took = await server.wait_ready(
            timeout=60, poll_interval=0.1, on_progress=lambda phase, _s: phases.append(phase)
        )
        assert took < 60
        metrics = await server.metrics()
        assert "vllm:spec_decode_num_drafts_total" in metrics
        lines = [batch async for batch in server.tail(follow=False, until_exit=False)]
        state = await server.status()
        result = await server.stop(timeout_s=10)
        assert server.record is not None
        return {
            "record": server.record,
            "lines": lines,
            "state": state,
            "result": result,
            "after": await server.status(),
        }

    out = scenario(sshd_factory, config, body)
    record, batches = out["record"], out["lines"]
    lines = [text for batch in batches for text in batch.lines]
    assert out["state"].alive and out["state"].log_size > 0
    assert phases and phases[0] == "starting"
    log = Path(record.log).read_bytes()
    assert lines == log.decode().splitlines()[: len(lines)]
    assert batches[0].offset == 0 and all(
        a.next == b.offset for a, b in zip(batches, batches[1:], strict=False)
    )
    assert batches[-1].next == len("".join(line + "\n" for line in lines).encode())
    assert any("Application startup complete." in line for line in lines)
    stopped = out["result"].stopped[0]
    assert stopped.gpu_released is True and stopped.remaining_pids == []
    assert not any(alive(pid) for pid in stopped.killed_pids)
    assert not set(smi_pids(host)) & set(stopped.killed_pids)
    assert out["after"].alive is False


def test_death_at_start_up_reports_cause_exit_code_and_log_tail(
    sshd_factory: SshdFactory, host: SshdHost
) -> None:
    config = host.host_config()

    async def body(pool: Any, agent: Agent, registry: ServerRegistry) -> EngineError:
        server = await Server.start(
            agent,
            make_run("sglang", env={"ORCH_SIM_FAIL": "oom"}),
            config,
            run_id="it-oom",
            port=free_port(),
            registry=registry,
        )
        started = time.monotonic()
        with pytest.raises(EngineError) as info:
            await server.wait_ready(timeout=60, poll_interval=0.1)
        assert time.monotonic() - started < 30  # at once, not at the timeout
        return info.value

    error = scenario(sshd_factory, config, body)
    assert error.host == "gpu-a"
    assert error.cause == OOM
    assert error.exit_code not in (None, 0)
    assert 0 < len(error.log_tail) <= 40
    assert any("CUDA out of memory" in line for line in error.log_tail)
    assert str(error).startswith(
        "gpu-a: sglang server of run 'r1' died during start-up: CUDA out of memory"
    )


def test_port_in_use_is_refused(sshd_factory: SshdFactory, host: SshdHost) -> None:
    config = host.host_config()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]

        async def body(pool: Any, agent: Agent, registry: ServerRegistry) -> AgentError:
            with pytest.raises(AgentError) as info:
                await Server.start(
                    agent, make_run(), config, run_id="it-port", port=port, registry=registry
                )
            assert registry.running == []
            return info.value

        error = scenario(sshd_factory, config, body)
    assert error.kind is ErrorKind.PORT_IN_USE
    assert f"port {port} on 127.0.0.1 is already in use by pid {os.getpid()}" in error.message


def test_tail_resumes_after_the_connection_drops(sshd_factory: SshdFactory, host: SshdHost) -> None:
    """Cut the TCP connection twice while following the log: every line arrives exactly once."""
    proxy = sshd_factory.proxy(host)
    config = host.host_config(port=proxy.port)
    run = make_run("sglang", env={"ORCH_SIM_LOAD_S": "2"})

    async def body(pool: Any, agent: Agent, registry: ServerRegistry) -> tuple[list[LogLines], Any]:
        server = await Server.start(
            agent,
            run,
            config,
            run_id="it-cut",
            port=free_port(),
            registry=registry,
            reconnect=pool_reconnect(pool, config, agent),
        )
        got: list[LogLines] = []
        cut_at: list[int] = []  # proxy.connections_seen at each cut
        async for batch in server.tail(follow=True, until_exit=True):
            got.append(batch)
            # Cut at the 2nd batch, then again at the first one that came over a new connection
            # (batches already buffered from before a cut arrive first, over no live connection).
            if (not cut_at and len(got) == 2) or (
                len(cut_at) == 1 and proxy.connections_seen > cut_at[0]
            ):
                assert proxy.cut() == 1
                cut_at.append(proxy.connections_seen)
            if any("fired up and ready" in text for text in batch.lines):
                await server.stop(timeout_s=10)
        assert len(cut_at) == 2
        return got, server.record

    got, record = scenario(sshd_factory, config, body)
    assert proxy.connections_seen >= 3  # the original connection and one per cut
    texts = Path(record.log).read_bytes().decode().splitlines()
    assert [text for batch in got for text in batch.lines] == texts
    assert got[0].offset == 0 and all(
        a.next == b.offset for a, b in zip(got, got[1:], strict=False)
    )


_CTRL_C_SCRIPT = """
import asyncio, faulthandler, json, signal, sys
faulthandler.register(signal.SIGUSR1)  # the test asks for every thread's stack if it hangs
sys.path.insert(0, {root!r})
from orchestrator.agent.client import Agent
from orchestrator.config import HostConfig, RunSpec
from orchestrator.runner.server import Server, ServerRegistry
from orchestrator.transport import ConnectionPool

args = json.loads(sys.argv[1])

async def main():
    config = HostConfig(**args["host"])
    pool = ConnectionPool(known_hosts=args["known_hosts"], ssh_config=[args["ssh_config"]])
    try:
        agent = Agent(await pool.get(config), config)
        async with ServerRegistry() as registry:
            server = await Server.start(agent, RunSpec.model_validate(args["run"]), config,
                                        run_id="it-sigint", port=args["port"], registry=registry)
            await server.wait_ready(timeout=60, poll_interval=0.1)
            print(json.dumps(server.record.to_json()), flush=True)
            await asyncio.sleep(3600)
    finally:
        await pool.close()

try:
    asyncio.run(main())
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_stops_every_server_it_started(sshd_factory: SshdFactory, host: SshdHost) -> None:
    config = host.host_config()
    args = {
        "host": {
            k: getattr(config, k)
            for k in (
                "name",
                "address",
                "port",
                "user",
                "identity_file",
                "python",
                "workdir",
                "connect_timeout",
            )
        },
        "known_hosts": str(sshd_factory.write_known_hosts()),
        "ssh_config": str(sshd_factory.ssh_config_path),
        "run": make_run().model_dump(),
        "port": free_port(),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C_SCRIPT.format(root=str(ROOT)), json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
        # a shell starts background jobs with SIGINT ignored, and pytest may be one (`make test
        # &`): the child would inherit that and never see the Ctrl-C this test sends
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        record = json.loads(line)
        assert alive(record["pid"])
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # its stacks go to stderr: the report shows them
            time.sleep(1)
            raise
        assert code == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not alive(record["pid"])
    assert not any(alive(pid) for pid in smi_pids(host))
    server_json = Path(record["log"]).with_name("server.json")
    assert json.loads(server_json.read_text())["pid"] == record["pid"]
    assert (
        json.loads(Path(record["log"]).with_name("exit.json").read_text())["pid"] == record["pid"]
    )


def test_ps_and_stop_commands(sshd_factory: SshdFactory, host: SshdHost, tmp_path: Path) -> None:
    """`orch ps` lists what launch recorded on the host; `orch stop --all` leaves nothing."""
    import typer
    import yaml
    from typer.testing import CliRunner

    from orchestrator.cli.servers import register

    config = host.host_config()
    port = free_port()

    async def body(pool: Any, agent: Agent, registry: ServerRegistry) -> dict[str, Any]:
        server = await Server.start(
            agent, make_run("sglang"), config, run_id="it-ps", port=port, registry=ServerRegistry()
        )  # not ours to stop: orch stop will
        await server.wait_ready(timeout=60, poll_interval=0.1)
        assert server.record is not None
        return server.record.to_json()

    record = scenario(sshd_factory, config, body)
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "hosts": {"gpu-a": host.inventory_entry()},
                "ssh_config": str(sshd_factory.ssh_config_path),
            }
        )
    )
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    common = ["--hosts", str(inventory), "--known-hosts", str(sshd_factory.write_known_hosts())]
    runner = CliRunner()

    listed = runner.invoke(app, ["ps", *common, "--json"])
    assert listed.exit_code == 0, listed.output
    servers = json.loads(listed.stdout)["servers"]
    assert [
        (s["host"], s["run_id"], s["alive"], s["state"], s["pid"], s["port"]) for s in servers
    ] == [("gpu-a", "it-ps", True, "running", record["pid"], port)]

    usage = runner.invoke(app, ["stop", *common])
    assert usage.exit_code == 2  # neither a RUN_ID nor --all
    missing = runner.invoke(app, ["stop", "no-such-run", *common])
    assert missing.exit_code == 1

    stopped = runner.invoke(app, ["stop", "--all", *common])
    assert stopped.exit_code == 0, stopped.output
    assert (
        f"gpu-a: stopped it-ps (pid {record['pid']}, SIGTERM; GPU memory released)"
        in stopped.stdout
    )
    assert not alive(record["pid"])
    after = json.loads(runner.invoke(app, ["ps", *common, "--json"]).stdout)["servers"]
    assert after == []  # `orch ps` shows live servers; the ended one only with --all
    ended = json.loads(runner.invoke(app, ["ps", "--all", *common, "--json"]).stdout)["servers"]
    assert [(s["run_id"], s["alive"]) for s in ended] == [("it-ps", False)]
