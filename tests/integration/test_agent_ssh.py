"""The agent over real OpenSSH: pushed once, probed, and no shell ever sees a user value."""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.agent.bundle import build_bundle
from orchestrator.agent.client import PYTHON_HINT, Agent
from orchestrator.agent.facts import HostFacts
from orchestrator.config.hostconfig import GpuSpec, HostConfig
from orchestrator.errors import AgentError, ConfigError, RemoteCommandError
from orchestrator.remote.wire import EchoChild, EchoResult, EchoSpec, ErrorKind, HttpSpec
from orchestrator.sim.versions import DRIVER_VERSION, SGLANG_VERSION, VLLM_VERSION
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port

pytestmark = pytest.mark.integration

T = TypeVar("T")
PYTHON27 = "/root/.pyenv/versions/2.7.18/bin/python"


def with_agent(
    factory: SshdFactory, config: HostConfig, body: Callable[[Agent], Awaitable[T]]
) -> T:
    """Run ``body(agent)`` on a fresh pool and connection, as one `orch` invocation would."""

    async def scenario() -> T:
        pool = factory.pool()
        try:
            conn = await pool.get(config)
            return await body(Agent(conn, config))
        finally:
            await pool.close()

    return asyncio.run(scenario())


@pytest.fixture
def host(sshd_factory: SshdFactory) -> SshdHost:
    return sshd_factory.start("gpu-a")


def test_agent_is_pushed_once_and_reused(sshd_factory: SshdFactory, host: SshdHost) -> None:
    bundle = build_bundle()
    config = host.host_config()

    async def first_run(agent: Agent) -> tuple[int, int]:
        return await agent.ensure(), await agent.ensure()

    pushed, again = with_agent(sshd_factory, config, first_run)
    assert pushed == len(bundle.data)
    assert again == 0
    pyz = host.workdir / bundle.filename
    assert pyz.read_bytes() == bundle.data
    assert (host.workdir / "specs").is_dir()
    # A later run (new connection, new Agent) finds it and pushes nothing.
    assert with_agent(sshd_factory, config, lambda agent: agent.ensure()) == 0


def test_workdir_tilde_is_expanded_without_a_shell(
    sshd_factory: SshdFactory, host: SshdHost
) -> None:
    """``~`` is the login directory as SFTP reports it (nothing is created here)."""
    home = pwd.getpwnam(host.user).pw_dir

    async def workdirs(agent: Agent) -> list[str]:
        raws = ("~", "~/.cache/orch", "~/a//b/../c/", "rel/dir")
        return [await Agent(agent.conn, host.host_config(workdir=raw)).workdir() for raw in raws]

    assert with_agent(sshd_factory, host.host_config(), workdirs) == [
        home,
        f"{home}/.cache/orch",
        f"{home}/a/c",
        f"{home}/rel/dir",
    ]
    with pytest.raises(ConfigError) as info:
        with_agent(
            sshd_factory,
            host.host_config(workdir="~bench/x", source="hosts.yaml:7"),
            lambda agent: agent.workdir(),
        )
    assert str(info.value) == (
        "hosts.yaml:7: hosts.gpu-a.workdir: workdir '~bench/x' of host 'gpu-a': only a leading "
        "'~' or '~/' can be expanded (no shell is involved)"
    )


def test_probe_over_ssh(sshd_factory: SshdFactory, host: SshdHost) -> None:
    port = free_port()
    probe = with_agent(sshd_factory, host.host_config(), lambda agent: agent.probe(ports=[port]))
    facts = HostFacts.from_probe(probe)
    assert [(g.index, g.name, g.memory_total_mib) for g in facts.gpus] == [
        (0, "NVIDIA RTX A6000", 49140),
        (1, "NVIDIA RTX A6000", 49140),
    ]
    assert all(g.uuid and g.uuid.startswith("GPU-") for g in facts.gpus)
    assert facts.driver_version == DRIVER_VERSION
    assert facts.nvidia_smi_error is None
    assert facts.engines == {"vllm": VLLM_VERSION, "sglang": SGLANG_VERSION}
    assert facts.python_version == ".".join(map(str, sys.version_info[:3]))
    assert facts.python_executable == sys.executable
    assert facts.free_ports == [port]
    assert facts.gpu_problems(GpuSpec(2, "RTX A6000")) == []
    assert facts.gpu_problems(GpuSpec(4, "H100")) == [
        "expected 4 x H100, found 2 GPUs",
        "GPU 0 is NVIDIA RTX A6000, expected H100",
        "GPU 1 is NVIDIA RTX A6000, expected H100",
    ]
    assert list((host.workdir / "specs").iterdir()) == []  # the spec was deleted once read


def test_spec_file_is_private(sshd_factory: SshdFactory, host: SshdHost) -> None:
    data = with_agent(
        sshd_factory,
        host.host_config(),
        lambda agent: agent.echo(EchoSpec(payload={"token": "s3cret"}), keep_spec=True),
    )
    spec_path = data.argv[-1]
    assert spec_path.startswith(str(host.workdir / "specs" / "echo-"))
    assert stat.S_IMODE(os.stat(spec_path).st_mode) == 0o600
    assert data.argv[:2] == [str(host.workdir / build_bundle().filename), "echo"]


def test_agent_error_event_becomes_agent_error(sshd_factory: SshdFactory, host: SshdHost) -> None:
    with pytest.raises(AgentError) as info:
        with_agent(sshd_factory, host.host_config(), lambda agent: agent.probe(ports=[0]))
    assert info.value.kind is ErrorKind.BAD_SPEC
    assert info.value.host == "gpu-a"
    assert (
        str(info.value) == "gpu-a: probe: probe: 'ports' must be a list of port numbers (1-65535)"
    )


def test_stream_yields_events_then_raises_on_error(
    sshd_factory: SshdFactory, host: SshdHost
) -> None:
    async def body(agent: Agent) -> list[Any]:
        events = [event async for event in agent._stream("echo", EchoSpec(payload={"v": 1}))]
        with pytest.raises(AgentError) as info:
            async for _ in agent._stream("no_such_verb", EchoSpec()):
                pass
        assert info.value.kind is ErrorKind.UNKNOWN_VERB
        return events

    events = with_agent(sshd_factory, host.host_config(), body)
    assert [type(e) for e in events] == [EchoResult]
    assert events[0].payload == {"v": 1}


def test_missing_interpreter_is_explained(sshd_factory: SshdFactory, host: SshdHost) -> None:
    config = host.host_config(python="/opt/venvs/nope/bin/python")
    with pytest.raises(RemoteCommandError) as info:
        with_agent(sshd_factory, config, lambda agent: agent.echo(EchoSpec()))
    assert info.value.host == "gpu-a"
    assert info.value.message.startswith(
        "the remote interpreter '/opt/venvs/nope/bin/python' was not found (exit 127)"
    )
    assert info.value.hint == PYTHON_HINT


@pytest.mark.parametrize("streamed", [False, True])
def test_spec_file_is_deleted_when_the_agent_never_starts(
    sshd_factory: SshdFactory, host: SshdHost, streamed: bool
) -> None:
    """The agent deletes its spec once read; a wrong `python` never reads it, and a launch spec
    holds the engine's secrets: the controller deletes it then."""
    config = host.host_config(python="/opt/venvs/nope/bin/python")

    async def body(agent: Agent) -> None:
        if streamed:
            async for _ in agent._stream("http", HttpSpec(port=1, path="/", headers={"t": "s3"})):
                pass
        else:
            await agent.echo(EchoSpec(payload={"token": "s3cret"}))

    with pytest.raises(RemoteCommandError, match=r"exit 127"):
        with_agent(sshd_factory, config, body)
    assert list((host.workdir / "specs").iterdir()) == []


def test_too_old_interpreter_is_explained(sshd_factory: SshdFactory, host: SshdHost) -> None:
    if not os.access(PYTHON27, os.X_OK):
        pytest.skip(f"no Python 2.7 at {PYTHON27}")
    with pytest.raises(AgentError) as info:
        with_agent(
            sshd_factory, host.host_config(python=PYTHON27), lambda agent: agent.echo(EchoSpec())
        )
    assert info.value.kind is ErrorKind.PYTHON_TOO_OLD
    assert (
        info.value.message == f"echo: the agent needs Python 3.9+, but {PYTHON27} is Python 2.7.18"
    )
    assert info.value.hint == PYTHON_HINT


# ---------------------------------------------------------------------------------------------
# Property: values a user writes reach the agent, and a process it starts, byte-identical.

NASTY = [
    "$(touch /tmp/orch-pwned)",
    "`id`",
    "a;b",
    "a && b",
    "a | b",
    "> out",
    "'",
    '"',
    "\\",
    "\n",
    "\r\n",
    "\t",
    "--model",
    "-x",
    "--",
    " spaced  out ",
    "$HOME",
    "${HF_TOKEN}",
    "*",
    "~",
    "ünïcødé ✓",
    "模型",
    "🙂",
    "%s",
    "\x1b[31m",
    "\u2028",
    "",
]
_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.one_of(
    st.sampled_from(NASTY),
    st.text(_chars, max_size=30),
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(_chars, max_size=5)), max_size=6).map(
        "".join
    ),
)
env_keys = st.from_regex(r"\A[A-Z][A-Z0-9_]{0,11}\Z").map(lambda k: f"ORCH_T_{k}")


def test_user_values_round_trip_byte_identical(sshd_factory: SshdFactory) -> None:
    host = sshd_factory.start("prop")
    config = host.host_config()
    loop = asyncio.new_event_loop()
    pool = sshd_factory.pool()
    try:
        agent = Agent(loop.run_until_complete(pool.get(config)), config)
        loop.run_until_complete(agent.ensure())

        @settings(
            max_examples=20,  # each one is a full remote agent call
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(
            model=texts,
            args=st.lists(texts, max_size=5),
            env=st.dictionaries(env_keys, texts, max_size=4),
        )
        def check(model: str, args: list[str], env: dict[str, str]) -> None:
            payload = {"model": model, "extra_args": args, "env": env, "nested": {model: [args]}}
            spec = EchoSpec(payload=payload, child=EchoChild(args=[model, *args], env=env))
            data = loop.run_until_complete(agent.echo(spec, timeout=60))
            assert data.payload == payload
            assert data.child is not None
            assert (data.child.argv, data.child.env) == ([model, *args], env)

        check()
    finally:
        loop.run_until_complete(pool.close())
        loop.close()
    assert not os.path.exists("/tmp/orch-pwned")
