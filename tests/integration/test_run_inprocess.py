"""`orch run` in-process: ``cli.main.run(argv, interrupts=...)`` on embedded hosts, with stop
requests from a :class:`ManualInterrupts` instead of the process's signals (pytest's own
handlers are never touched, and no signal is sent to pytest).

The same stop through real signals, in a subprocess, is tests/integration/test_run_interrupt.py.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.cli.interrupts import ManualInterrupts
from orchestrator.results.model import RunResult
from tests.fixtures.procs import alive, kill_tree, pids_with_env
from tests.fixtures.sshd import free_port

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data"
HOSTS_FILE = DATA / "hosts-embedded.yaml"
START_TIMEOUT_S = 60.0


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The embedded hosts' root under tmp_path; cwd is tmp_path; leftovers killed after."""
    root = tmp_path / "embedded"
    monkeypatch.setenv("ORCH_EMBEDDED_ROOT", str(root))
    monkeypatch.setenv("ORCH_E2E_SECRET", "in-process-secret")
    monkeypatch.chdir(tmp_path)
    yield root
    for host in ("emb-1", "emb-2"):
        for pid in pids_with_env("HOME", str(root / host / "home")):
            kill_tree(pid)


@pytest.fixture
def no_signal_handlers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record any attempt to install a signal handler through an event loop (what the CLI's
    SignalInterrupts does) or directly; the in-process run must make none."""
    attempts: list[int] = []
    loop_class = type(asyncio.new_event_loop())

    def refuse(self: object, sig: int, *args: object) -> None:
        attempts.append(sig)

    monkeypatch.setattr(loop_class, "add_signal_handler", refuse)
    return attempts


def playbook(tmp: Path, src: str, keep: str, **workload: Any) -> Path:
    """``src`` with only the run ``keep`` (on its own port) and the workload overrides."""
    book = yaml.safe_load((DATA / src).read_text())
    book["runs"] = [r for r in book["runs"] if r["name"] == keep]
    book["runs"][0]["port"] = free_port()
    book["hosts"] = book["runs"][0]["hosts"]
    book["defaults"]["workload"].update(workload)
    path = tmp / f"{keep}.yaml"
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


def server_records(root: Path) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text())
        for p in root.glob("*/home/.cache/orch/runs/*/server.json")
        if p.stat().st_size
    ]


def test_run_in_process_measures_without_touching_signals(
    tmp_path: Path, sandbox: Path, no_signal_handlers: list[int]
) -> None:
    before = signal.getsignal(signal.SIGINT)
    book = playbook(tmp_path, "e2e.yaml", "sglang-mtp", num_prompts=4, warmup=0)
    interrupts = ManualInterrupts()
    code = main.run(
        ["run", str(book), "--hosts", str(HOSTS_FILE), "--results", "results"],
        interrupts=interrupts,
    )
    assert code == 0
    assert interrupts.installed  # the run took its stop requests from the object given
    assert no_signal_handlers == []
    assert signal.getsignal(signal.SIGINT) is before
    (summary,) = (tmp_path / "results").glob("*/sglang-mtp_emb-1/summary.json")
    result = RunResult.load(summary)
    assert result.verdict == "ok"
    assert result.requests is not None
    assert (result.requests.completed, result.requests.failed) == (4, 0)
    throughput = result.requests.output_throughput
    assert throughput is not None and throughput > 0


def wait_for_serving(root: Path, runs: int) -> list[dict[str, Any]]:
    """The server records once ``runs`` engines run and have answered requests (GPU state
    held), so the interrupt lands mid-measurement."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        started = server_records(root)
        held = list(root.glob("*/state/gpu-*.json"))
        requests = [p for p in Path("results").glob("*/*/requests.jsonl") if p.stat().st_size]
        if len(started) == runs and all(alive(s["pid"]) for s in started) and held and requests:
            return started
        time.sleep(0.1)
    raise AssertionError(f"no engine serving after {START_TIMEOUT_S}s")


def test_injected_interrupt_stops_the_run_cleanly(
    tmp_path: Path,
    sandbox: Path,
    no_signal_handlers: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    book = playbook(tmp_path, "interrupt.yaml", "vllm-long")
    interrupts = ManualInterrupts()
    seen: dict[str, Any] = {}

    def interrupt_when_serving() -> None:
        try:
            seen["started"] = wait_for_serving(sandbox, runs=1)
        finally:
            interrupts.interrupt(signal.SIGINT)

    helper = threading.Thread(target=interrupt_when_serving, daemon=True)
    helper.start()
    code = main.run(
        ["run", str(book), "--hosts", str(HOSTS_FILE), "--results", "results"],
        interrupts=interrupts,
    )
    helper.join(5)
    text = capsys.readouterr().err
    assert "started" in seen, text
    assert code == 130, text
    assert "interrupted: the servers this run started were stopped" in text
    assert no_signal_handlers == []
    for server in seen["started"]:
        assert not alive(server["pid"]), f"engine {server['pid']} still running"
        assert not alive(server["supervisor_pid"]), "its supervisor still running"
    assert list(sandbox.glob("*/state/gpu-*.json")) == []  # the simulated GPU released
    (run_dir,) = (tmp_path / "results").glob("*/vllm-long_emb-2")
    assert not (run_dir / "summary.json").exists()  # nothing claims a measurement
    assert (run_dir.parent / "plan.json").is_file()  # what `orch run --resume` finishes from
