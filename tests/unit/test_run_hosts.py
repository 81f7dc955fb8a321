"""A playbook's hosts during `orch run` (``backends/hostrun.py``), on in-memory FakeAgents: a
host lost mid-playbook has its remaining runs recorded as not run, with the cause, while the
other host goes on; with ``share_gpus`` a host runs its runs at once on GPUs of their own.

Everything but the hosts is the real code: ``run_playbook``, the slot scheduler, the runner,
the results files. The preflight (connect, probe, doctor) is replaced by sessions holding a
FakeAgent and the facts of the golden probe (two RTX A6000s).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.client import AgentClient
from orchestrator.agent.facts import HostFacts
from orchestrator.agent.fake import FakeAgent, FakeLog, Stream, http_answer, status_of
from orchestrator.backends import hostrun
from orchestrator.commands import run as run_mod
from orchestrator.commands.run import PlaybookOutcome, run_playbook
from orchestrator.config import load_inventory, load_playbook
from orchestrator.config.hostconfig import HostConfig
from orchestrator.engines.plan import PlannedLaunch, plan_launches
from orchestrator.errors import HostUnreachable
from orchestrator.remote.wire import (
    LaunchSpec,
    LoadgenEvent,
    LoadgenResult,
    LoadgenSpec,
    PhaseEvent,
    ProbeResult,
    StatusSpec,
    StopSpec,
    Wire,
)
from orchestrator.results.report import load_results
from orchestrator.runner import server as server_mod
from orchestrator.runner.preflight import DoctorResult, HostSession
from orchestrator.runner.progress import RecordingObserver
from tests.unit.test_runner_fake_agent import LOG, MODEL, launched, measured, stopped

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"
HOSTS = """hosts:
  a: {transport: embedded, gpus: 2 x RTX A6000}
  b: {transport: embedded, gpus: 2 x RTX A6000}
"""


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STOP_RETRY_S", "RECONNECT_BACKOFF_S", "DIED_POLL_S"):
        monkeypatch.setattr(server_mod, name, 0.0)


class BusyAgent(FakeAgent):
    """A FakeAgent whose load generator takes a moment (the event loop runs the other tasks
    once) before it streams: the fake answers at once otherwise, so a run would never leave
    the loop to a run beside it."""

    async def loadgen(self, spec: LoadgenSpec) -> AsyncGenerator[LoadgenEvent, None]:
        await asyncio.sleep(0)
        async for event in super().loadgen(spec):
            yield event


def serving(agent: FakeAgent) -> FakeAgent:
    """``agent`` scripted as a host whose every server starts, is ready, serves and stops;
    its load generator is left to the caller."""
    models = json.dumps({"data": [{"id": MODEL}]})

    def status(spec: Wire) -> Any:
        assert isinstance(spec, StatusSpec) and spec.run_id is not None
        return status_of(spec.run_id, alive=True)

    def stop(spec: Wire) -> Any:
        assert isinstance(spec, StopSpec) and spec.run_id is not None
        return stopped(spec.run_id)

    return (
        agent.always("launch", launched)
        .always("status", status)
        .always("http", http_answer(200, models))
        .always("tail", FakeLog(LOG, exited=False, host=agent.host.name))
        .always("stop", stop)
    )


def host_agent(host: HostConfig) -> FakeAgent:
    """A host whose every server starts, serves two requests a measurement and stops."""
    done = LoadgenResult(requests=2, completed=2, failed=0, duration_s=1.0, started_at=1.7e9)
    measure = Stream([PhaseEvent(phase="measure"), measured(0), measured(1), done])
    return serving(BusyAgent(host)).always("loadgen", measure)


def play(
    tmp_path: Path, runs: str, *, share: bool = False
) -> tuple[Any, list[PlannedLaunch], dict[str, FakeAgent]]:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    (tmp_path / "play.yaml").write_text(
        f"name: hosts\nshare_gpus: {str(share).lower()}\n"
        f"defaults: {{engine: vllm, model: {MODEL}, workload: {{prompts: builtin:math, "
        "num_prompts: 2, warmup: 0}}\nruns:\n" + runs
    )
    playbook = load_playbook(tmp_path / "play.yaml")
    plans = plan_launches(playbook, load_inventory(tmp_path / "hosts.yaml"))
    agents = {p.host.name: host_agent(p.host) for p in plans}
    return playbook, plans, agents


def execute(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    playbook: Any,
    plans: list[PlannedLaunch],
    agents: dict[str, FakeAgent],
    *,
    lost_after: dict[str, int] | None = None,
) -> tuple[PlaybookOutcome, RecordingObserver]:
    """``run_playbook`` over the fake hosts; host ``h`` of ``lost_after`` cannot be reached
    again once ``lost_after[h]`` of its runs were handed an agent."""
    facts = HostFacts.from_probe(
        ProbeResult.from_json(json.loads((GOLDEN / "probe.result.json").read_text()))
    )

    async def open_hosts(_pool: Any, plans: list[PlannedLaunch]) -> dict[str, HostSession]:
        return {
            p.host.name: HostSession(p.host, agent=agents[p.host.name], facts=facts) for p in plans
        }

    async def doctor_plans(_sessions: Any, plans: list[PlannedLaunch]) -> list[DoctorResult]:
        return [DoctorResult() for _ in plans]

    handed: dict[str, int] = {}

    async def live_agent(_pool: Any, host: HostConfig, agent: AgentClient) -> AgentClient:
        handed[host.name] = handed.get(host.name, 0) + 1
        if handed[host.name] > (lost_after or {}).get(host.name, 1 << 30):
            raise HostUnreachable(host.name, "connection refused (the host went down)")
        return agent

    monkeypatch.setattr(run_mod, "open_hosts", open_hosts)
    monkeypatch.setattr(run_mod, "check_requirements", lambda *_: None)
    monkeypatch.setattr(run_mod, "doctor_plans", doctor_plans)
    monkeypatch.setattr(hostrun, "live_agent", live_agent)
    observer = RecordingObserver()
    outcome = asyncio.run(
        run_playbook(
            playbook,
            plans,
            pool=None,  # type: ignore[arg-type]  # the fakes never reach for it
            results_root=tmp_path / "results",
            observer=observer,
        )
    )
    return outcome, observer


@pytest.mark.parametrize("share", [False, True])
def test_a_host_lost_mid_playbook_has_its_remaining_runs_not_run_and_the_other_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: bool
) -> None:
    """Shared or not: with share_gpus, a1 and a2 start at once (two GPUs, two ports) and a3,
    waiting for a GPU, is recorded as not run as soon as a2 finds the host gone."""
    runs = "".join(
        f"  - {{name: {name}, hosts: [{host}], port: {port}, workload: {{concurrency: {conc}}}}}\n"
        for name, host, port, conc in [
            ("a1", "a", 8001, 1),
            ("b1", "b", 8011, 1),
            ("a2", "a", 8002, 1),
            ("b2", "b", 8012, "[1, 2]"),
            ("a3", "a", 8003, "[1, 2]"),
        ]
    )
    playbook, plans, agents = play(tmp_path, runs, share=share)
    outcome, _ = execute(tmp_path, monkeypatch, playbook, plans, agents, lost_after={"a": 1})

    by_run: dict[str, list[Any]] = {}
    for r in load_results(outcome.results_dir):
        by_run.setdefault(r.run.name, []).append(r)
    assert sorted(by_run) == ["a1", "a2", "a3", "b1", "b2"]
    # the other host measured every point of its runs
    assert [r.error for r in by_run["b1"] + by_run["b2"]] == [None] * 3
    assert [r.requests.completed for r in by_run["b2"] if r.requests] == [2, 2]
    assert [c.verb for c in agents["b"].calls].count("launch") == 2
    # host a: its first run measured, the one that found it gone failed with the cause ...
    assert by_run["a1"][0].error is None
    [a2] = by_run["a2"]
    assert a2.error is not None and a2.error.type == "HostUnreachable"
    assert a2.error.message == "a: connection refused (the host went down)"
    # ... and the ones after it are not run, naming the cause
    cause = "not run: host a was lost during a2@a (connection refused (the host went down))"
    assert [(r.not_run, r.point.label, r.error.message) for r in by_run["a3"]] == [
        (True, "c=1", cause),
        (True, "c=2", cause),
    ]
    assert [c.verb for c in agents["a"].calls].count("launch") == 1  # nothing after the loss
    assert outcome.failed


def test_shared_gpus_run_two_servers_at_once_and_one_port_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = (
        "  - {name: one, hosts: [a], port: 8101}\n"
        "  - {name: two, hosts: [a], port: 8102}\n"
        "  - {name: again, hosts: [a], port: 8101}\n"
        "  - {name: pinned, hosts: [a], port: 8103, env: {CUDA_VISIBLE_DEVICES: '1'}}\n"
    )
    playbook, plans, agents = play(tmp_path, runs, share=True)
    outcome, _ = execute(tmp_path, monkeypatch, playbook, plans, agents)

    assert not outcome.failed, [r.error for r in outcome.results]
    calls = [(c.verb, c.spec) for c in agents["a"].calls if c.verb in ("launch", "stop")]
    order = [
        (verb, str(spec.run_id).rsplit("-", 1)[0])
        for verb, spec in calls
        if isinstance(spec, LaunchSpec | StopSpec)
    ]
    launches = {
        spec.run_id.rsplit("-", 1)[0]: spec.gpu_ids
        for _, spec in calls
        if isinstance(spec, LaunchSpec)
    }
    # one and two at once on GPUs of their own; again (one's port) only once one stopped, on
    # a GPU then free; pinned (its env picks its GPU) alone, once every other one stopped
    assert launches == {"one": [0], "two": [1], "again": [0], "pinned": None}
    assert order.index(("launch", "two")) < order.index(("stop", "one"))
    assert order.index(("launch", "again")) > order.index(("stop", "one"))
    assert order.index(("launch", "pinned")) > max(
        order.index(("stop", name)) for name in ("one", "two", "again")
    )
    results = {r.run.name: r for r in outcome.results}
    assert {name: r.settings.gpu_ids for name, r in results.items()} == launches
    manifest = json.loads((outcome.results_dir / "two_a" / "manifest.json").read_text())
    assert manifest["gpu_ids"] == [1] and manifest["manifest_version"] == 1
    assert manifest["env"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert manifest["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    pinned = json.loads((outcome.results_dir / "pinned_a" / "manifest.json").read_text())
    assert "gpu_ids" not in pinned and pinned["env"] == {"CUDA_VISIBLE_DEVICES": "1"}


def test_without_share_gpus_a_hosts_runs_go_one_after_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = "  - {name: one, hosts: [a], port: 8101}\n  - {name: two, hosts: [a], port: 8102}\n"
    playbook, plans, agents = play(tmp_path, runs)
    outcome, _ = execute(tmp_path, monkeypatch, playbook, plans, agents)

    verbs = [c.verb for c in agents["a"].calls if c.verb in ("launch", "stop")]
    assert verbs == ["launch", "stop", "launch", "stop"]
    launches = [s for s in agents["a"].specs("launch") if isinstance(s, LaunchSpec)]
    assert [s.gpu_ids for s in launches] == [None, None]
    assert [r.settings.gpu_ids for r in outcome.results] == [None, None]
