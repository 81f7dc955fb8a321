"""`orch loadgen` against a real vLLM CPU server, and the real server against the fixtures.

The server is started here directly (``vllm serve`` from the real venv, n-gram speculation),
as a user would start one by hand before aiming ``orch loadgen`` at it. Checked:

- the load generator's streaming and usage: every request completes with vLLM's own
  ``finish_reason`` and its token counts reconcile with vLLM's ``usage`` (the validity rules);
- orch reads the engine and its speculative decoding from the real ``/metrics``;
- the committed fixtures of vLLM 0.32's output (``tests/fixtures/vllm_cpu/``), which the
  simulator is held to, still name every metric family the live engine exposes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.realvllm import HOST_ENV, START_S, RealVllm, engine_slot
from tests.fixtures.sshd import free_port, port_free

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm_cpu"
SERVED = "tiny"
MAX_TOKENS = 48


class Server:
    def __init__(self, real: RealVllm, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [str(real.python.parent / "vllm"), "serve", real.target]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "1024"]
        argv += ["--enforce-eager", "--served-model-name", SERVED, "--speculative-config"]
        argv += ['{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}']
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **HOST_ENV, "PYTHONPATH": ""},
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"vLLM not ready in {START_S} s:\n{self.log.read_text()[-3000:]}")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as answer:
            return answer.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def server(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with engine_slot():
        live = Server(real_vllm, tmp_path_factory.mktemp("real-loadgen") / "server.log")
        try:
            live.wait_ready()
            yield live
        finally:
            live.stop()
    assert port_free(live.port)


def loadgen(server: Server, out: Path, *args: str) -> dict:
    argv = [sys.executable, "-m", "orchestrator", "loadgen", server.url, "--model", SERVED]
    argv += ["--out", str(out), "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--json", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.stdout, done.stderr[-3000:]
    out = json.loads(done.stdout)
    if done.returncode != 0:
        # the engine and the client share 2 cores: a client that fell behind is the one
        # failure this machine may cause, and orch must say so (its figures still checked)
        assert done.returncode == 1 and out["failures"], done.stdout[:6000]
        assert all(f.startswith("client saturated") for f in out["failures"]), out["failures"]
        assert out["summary"]["error"]["kind"] == "client_saturated"
    return out


def run_dir(out: Path) -> Path:
    (summary,) = out.rglob("summary.json")
    return summary.parent


def test_completions_stream_completes_and_reconciles(server: Server, tmp_path: Path) -> None:
    loadgen(server, tmp_path, "--api", "completions", "-n", "12", "-c", "2", "--warmup", "1")
    folder = run_dir(tmp_path)
    summary = json.loads((folder / "summary.json").read_text())
    info = summary["loadgen"]
    assert (info["completed"], info["failed"]) == (12, 0)
    assert info["reconciled"] == 12 and info["token_count_mismatches"] == 0
    assert summary["settings"]["engine"] == "vllm"
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r.get("warmup")]
    assert len(measured) == 12
    for record in measured:
        assert record["finish_reason"] == "length" and record["failure"] is None, record
        assert record["output_tokens"] == MAX_TOKENS, record


def test_chat_streams_through_the_models_own_template(server: Server, tmp_path: Path) -> None:
    loadgen(server, tmp_path, "--api", "chat", "-n", "4", "-c", "1", "--warmup", "0")
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert summary["loadgen"]["completed"] == 4 and summary["loadgen"]["reconciled"] == 4


def _spec_counter(text: str, name: str) -> float:
    pattern = re.compile(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} (\S+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(text))


def test_acceptance_from_the_real_metrics(server: Server, tmp_path: Path) -> None:
    """orch's Prometheus acceptance over its window equals vLLM's counters over that window."""
    loadgen(server, tmp_path, "--api", "completions", "-n", "8", "-c", "1", "--warmup", "0")
    folder = run_dir(tmp_path)
    before = (folder / "metrics_before.txt").read_text()
    after = (folder / "metrics_after.txt").read_text()
    drafts = _spec_counter(after, "num_drafts") - _spec_counter(before, "num_drafts")
    accepted = _spec_counter(after, "num_accepted_tokens") - _spec_counter(
        before, "num_accepted_tokens"
    )
    assert drafts > 0
    acceptance = json.loads((folder / "summary.json").read_text())["acceptance"]
    assert acceptance["prometheus"] == pytest.approx(1 + accepted / drafts, rel=1e-6)


def _families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (vllm:\w+) ", text, re.MULTILINE))


def test_the_committed_fixture_names_what_the_live_engine_exposes(server: Server) -> None:
    """The /metrics fixture the simulator is held to has exactly the live engine's families."""
    live = _families(server.metrics())
    fixture = _families((FIXTURES / "metrics_ngram.txt").read_text())
    assert live, "the live engine exposed no vllm:* family"
    assert live == fixture, {"live only": live - fixture, "fixture only": fixture - live}
