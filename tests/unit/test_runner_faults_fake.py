"""`orch run`'s failure paths through the CLI itself, on in-memory FakeAgents (issue 22).

The CLI runs in-process (``cli.main.run``) on a real playbook and hosts file; the hosts'
sessions hold FakeAgents (as in test_run_hosts.py) and stop requests come from a
``ManualInterrupts``. What is checked is what the user gets: the exit status, the console, the
files written, what was sent to the hosts. These are the decisions the slow integration tests
made through real signals and real hosts once per variant; those keep one real-path test per
feature (tests/integration/test_run_interrupt.py, test_faults_*.py).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.facts import HostFacts
from orchestrator.agent.fake import FakeAgent, FakeLog, Stream, status_of
from orchestrator.backends import hostrun
from orchestrator.cli import main
from orchestrator.cli.interrupts import ManualInterrupts
from orchestrator.commands import run as run_mod
from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.remote.wire import (
    LaunchSpec,
    LoadgenEvent,
    LoadgenSpec,
    PhaseEvent,
    ProbeResult,
    StatusResult,
    StatusSpec,
    StopResult,
    StopSpec,
    Wire,
)
from orchestrator.results.model import RunResult
from orchestrator.runner import server as server_mod
from orchestrator.runner.preflight import DoctorResult, HostSession
from orchestrator.sim.failures import not_enough_memory
from tests.unit.test_run_hosts import GOLDEN, serving
from tests.unit.test_runner_fake_agent import MODEL, measured

HOSTS = "hosts:\n  emb-1: {transport: embedded, gpus: 2 x RTX A6000}\n"
HOSTS += "  emb-2: {transport: embedded, gpus: 2 x RTX A6000}\n"

MakeAgent = Callable[[HostConfig], FakeAgent]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-off and poll intervals are the runner's business, not these tests'."""
    for name in ("STOP_RETRY_S", "RECONNECT_BACKOFF_S", "DIED_POLL_S"):
        monkeypatch.setattr(server_mod, name, 0.0)


def fake_hosts(monkeypatch: pytest.MonkeyPatch, make: MakeAgent) -> dict[str, FakeAgent]:
    """Every host of the run is a FakeAgent made by ``make`` with the golden probe's facts
    (two RTX A6000s); the doctor finds nothing. Returns the agents, filled in as the run opens
    its hosts."""
    agents: dict[str, FakeAgent] = {}
    facts = HostFacts.from_probe(
        ProbeResult.from_json(json.loads((GOLDEN / "probe.result.json").read_text()))
    )

    async def open_hosts(_pool: Any, plans: list[PlannedLaunch]) -> dict[str, HostSession]:
        for plan in plans:
            agents.setdefault(plan.host.name, make(plan.host))
        return {
            p.host.name: HostSession(p.host, agent=agents[p.host.name], facts=facts) for p in plans
        }

    async def doctor_plans(_sessions: Any, plans: list[PlannedLaunch]) -> list[DoctorResult]:
        return [DoctorResult() for _ in plans]

    async def live_agent(_pool: Any, _host: HostConfig, agent: Any) -> Any:
        return agent

    monkeypatch.setattr(run_mod, "open_hosts", open_hosts)
    monkeypatch.setattr(run_mod, "check_requirements", lambda *_: None)
    monkeypatch.setattr(run_mod, "doctor_plans", doctor_plans)
    monkeypatch.setattr(hostrun, "live_agent", live_agent)
    return agents


def orch_run(tmp_path: Path, runs: str, interrupts: ManualInterrupts | None = None) -> int:
    """`orch run` of ``runs`` (playbook YAML lines) on hosts emb-1 and emb-2, in-process;
    its exit status."""
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(
        f"name: faults\ndefaults: {{engine: vllm, model: {MODEL}, workload: {{prompts: "
        "builtin:math, num_prompts: 2, warmup: 0}}\nruns:\n" + runs
    )
    argv = ["run", str(tmp_path / "play.yaml"), "--hosts", str(tmp_path / "hosts.yaml")]
    return main.run([*argv, "--results", str(tmp_path / "results")], interrupts=interrupts)


def said(capsys: pytest.CaptureFixture[str]) -> str:
    """The console so far, its wrapping undone (rich wraps at 80 columns off a terminal)."""
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


def run_ids(agent: FakeAgent, verb: str) -> list[str | None]:
    return [s.run_id for s in agent.specs(verb) if isinstance(s, LaunchSpec | StopSpec)]


# -- Ctrl-C, SIGTERM, Ctrl-C twice (issue 3; real signals: test_run_interrupt.py) --------------

LONG_RUNS = "  - {name: long-1, hosts: [emb-1], port: 8001}\n"
LONG_RUNS += "  - {name: long-2, hosts: [emb-2], port: 8002}\n"


@dataclass
class Stops:
    """Stop requests delivered once every host measures (``first``), and ``during_stop`` once
    the clean-up's first stop is under way (an impatient second Ctrl-C)."""

    interrupts: ManualInterrupts
    hosts: int
    first: list[signal.Signals]
    during_stop: list[signal.Signals] = field(default_factory=list)
    measuring: int = 0


class Endless(FakeAgent):
    """A host whose workload is far too long to finish: its load generator measures a request,
    then waits until the run is stopped."""

    def __init__(self, host: HostConfig, stops: Stops) -> None:
        super().__init__(host)
        self.stops = stops

    async def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]:
        async for event in super().loadgen(spec):
            yield event
        self.stops.measuring += 1
        if self.stops.measuring == self.stops.hosts:
            for sig in self.stops.first:
                self.stops.interrupts.interrupt(sig)
        await asyncio.Event().wait()  # until the stop request cancels the run

    async def stop(self, spec: StopSpec, *, timeout: float | None = None) -> StopResult:
        if self.stops.during_stop:
            for sig in self.stops.during_stop:
                self.stops.interrupts.interrupt(sig)
            self.stops.during_stop = []
            for _ in range(3):  # the signal is delivered while this stop is under way
                await asyncio.sleep(0)
        return await super().stop(spec, timeout=timeout)


def endless(stops: Stops) -> MakeAgent:
    def make(host: HostConfig) -> FakeAgent:
        measuring = Stream([PhaseEvent(phase="measure"), measured(0)])
        return serving(Endless(host, stops)).always("loadgen", measuring)

    return make


@pytest.mark.parametrize(
    ("first", "during_stop", "code", "label"),
    [
        ([signal.SIGINT], [], 130, "interrupted"),
        ([signal.SIGTERM], [], 128 + signal.SIGTERM, "SIGTERM"),  # `kill`: stopped the same way
        ([signal.SIGINT], [signal.SIGINT], 130, "interrupted"),  # Ctrl-C Ctrl-C: still cleaned up
    ],
    ids=["sigint", "sigterm", "sigint-twice"],
)
def test_a_stop_signal_stops_every_server_and_exits_128_plus_n(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    first: list[signal.Signals],
    during_stop: list[signal.Signals],
    code: int,
    label: str,
) -> None:
    stops = Stops(ManualInterrupts(), hosts=2, first=first, during_stop=list(during_stop))
    agents = fake_hosts(monkeypatch, endless(stops))
    returned = orch_run(tmp_path, LONG_RUNS, stops.interrupts)
    text = said(capsys)

    assert returned == code, text
    assert f"{label}: the servers this run started were stopped" in text
    assert "Traceback" not in text
    twice = "SIGINT: stopping the servers this run started, please wait"
    assert (twice in text) == bool(during_stop)
    assert sorted(agents) == ["emb-1", "emb-2"]
    for agent in agents.values():  # every server launched was stopped, the clean-up not cut
        assert len(run_ids(agent, "launch")) == 1
        assert run_ids(agent, "stop") == run_ids(agent, "launch")


# -- a start-up death, classified (issue 9, item 14; the real path: test_run_e2e.py) ----------


def test_sglang_not_enough_memory_is_a_classified_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang's memory pool gets no token: the run fails with the cause, the log lines that
    name the flag, and the hint in the engine-neutral setting's words."""
    death = [
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.6-27B', tp_size=2)",
        "[2026-01-01 00:00:01] Load weight end. type=Qwen3ForCausalLM, mem usage=25.61 GB.",
        *not_enough_memory("sglang").traceback,  # what the simulator prints (ORCH_SIM_FAIL=memory)
    ]
    log = FakeLog(death, exited=True)

    def make(host: HostConfig) -> FakeAgent:
        dead = status_of("r", alive=False, returncode=1, log_size=log.size)

        def status(spec: Wire) -> Any:
            assert isinstance(spec, StatusSpec) and spec.run_id is not None
            return StatusResult(servers=[replace(dead.servers[0], run_id=spec.run_id)])

        return serving(FakeAgent(host)).always("status", status).always("tail", log)

    agents = fake_hosts(monkeypatch, make)
    runs = "  - {name: sglang-mem, hosts: [emb-1], engine: sglang, tensor_parallel: 2}\n"
    code = orch_run(tmp_path, runs)
    text = said(capsys)

    assert code == 1, text
    [summary] = (tmp_path / "results").glob("*/sglang-mem_emb-1/summary.json")
    result = RunResult.load(summary)
    assert result.verdict == "failed"
    assert result.error is not None and result.error.cause == "kv_cache_memory"
    assert "died during start-up: not enough memory for the KV cache" in result.error.message
    assert any("--mem-fraction-static" in line for line in result.error.log_tail)
    assert "raise gpu_memory_fraction" in text
    [agent] = agents.values()
    assert "http" not in [c.verb for c in agent.calls]  # dead: never asked for readiness
    assert run_ids(agent, "stop") == run_ids(agent, "launch")  # and still stopped
