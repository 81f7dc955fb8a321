"""The simulator a client benchmark measures against, and what it really did (its ground truth).

One simulator per measurement, so that its ground truth holds that measurement's requests
only: started with a fixed step and a fixed number of tokens per chunk
(``orchestrator/sim/fixed.py``), pinned to its own core, stopped with SIGTERM, after which it
writes ``ground-truth-<pid>.json`` into its state folder.

Ground truth, over the requests that ran to ``max_tokens`` (a peer's probe of the server is
left out): TTFT = first token - arrival at the server (queueing only: a prefill takes no time
in the fixed model); TPOT = (last token - first token) /
(tokens - 1), the mean over requests; ITL per chunk = the mean gap between a request's chunks,
pooled; throughput = tokens / (last token of any - first arrival of any).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from orchestrator.sim.sandbox import Sandbox
from tests.fixtures.sshd import free_port

MODEL = "Qwen/Qwen3-8B"
DRAFTS = 3  # ngram drafts per step: enough for 4 tokens per chunk
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Case:
    """One load point: a closed loop of ``concurrency`` streams on a server whose every step
    takes ``step_ms`` and gives each stream ``chunk_tokens`` tokens."""

    mode: str  # "plain" (1 token per chunk) or "spec" (several, speculative decoding)
    concurrency: int
    step_ms: float
    chunk_tokens: int
    max_tokens: int
    num_prompts: int
    ladder: bool = False  # a rung of the offered-rate ladder
    added: bool = False  # a rung added to find where orch's ok region ends (client_ladder.py)

    @property
    def offered_tok_s(self) -> float:
        """What the server streams when no client ever makes it wait: each stream gets one
        chunk per step (the fixed model's prefill takes no step of its own)."""
        return self.concurrency * self.chunk_tokens * 1000.0 / self.step_ms

    @property
    def label(self) -> str:
        return f"{self.mode} c={self.concurrency}, {self.step_ms:g} ms/step, {self.chunk_tokens} tok/chunk"


@dataclass(frozen=True)
class Truth:
    requests: int
    output_tokens: int
    tok_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    itl_chunk_ms: float | None


def pin(core: int | None) -> None:
    """Run on one core (a child process calls this before exec); None: anywhere."""
    if core is not None:
        os.sched_setaffinity(0, {core})


class Sim:
    """A simulated vLLM server for one measurement, on ``core``."""

    def __init__(self, box: Sandbox, case: Case, core: int | None, log: Path) -> None:
        self.box, self.case = box, case
        self.port = free_port()
        argv = [sys.executable, "-m", "orchestrator.sim", "vllm", "serve", MODEL]
        argv += ["--port", str(self.port), "--tensor-parallel-size", "2"]
        argv += ["--max-num-seqs", str(max(256, case.concurrency))]
        if case.chunk_tokens > 1:
            spec = {"method": "ngram", "num_speculative_tokens": DRAFTS}
            argv += ["--speculative-config", json.dumps(spec)]
        env = {
            **os.environ,
            **box.env(),
            "ORCH_SIM_LOAD_S": "0",
            "ORCH_SIM_SPEED": "1",
            "ORCH_SIM_STEP_MS": f"{case.step_ms:g}",
            "ORCH_SIM_CHUNK_TOKENS": str(case.chunk_tokens),
            "VLLM_LOG_STATS_INTERVAL": "3600",  # the log is not measured: keep the core for serving
        }
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: pin(core),
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"simulator not ready after {READY_TIMEOUT_S:g} s")

    def stop(self) -> dict[str, object]:
        """Stop it; its ground truth (written as it exits), or {} if it wrote none."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        path = self.box.state_dir / f"ground-truth-{self.proc.pid}.json"
        try:
            truth: dict[str, object] = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        path.unlink()
        return truth


def truth_of(raw: dict[str, object], case: Case) -> Truth:
    """The figures of the requests that ran to ``max_tokens`` (see the module docstring)."""
    records = raw.get("requests")
    done = [
        r
        for r in (records if isinstance(records, list) else [])
        if r.get("finish_reason") == "length" and r.get("output_tokens") == case.max_tokens
    ]
    if not done:
        return Truth(0, 0, None, None, None, None)
    tokens = sum(int(r["output_tokens"]) for r in done)
    window = max(r["last_token_time"] for r in done) - min(r["arrival_time"] for r in done)
    ttft = [r["first_token_time"] - r["arrival_time"] for r in done]
    tpot = [
        (r["last_token_time"] - r["first_token_time"]) / (r["output_tokens"] - 1)
        for r in done
        if r["output_tokens"] > 1
    ]
    gaps = [b - a for r in done for a, b in pairwise(r["chunk_times"])]
    return Truth(
        requests=len(done),
        output_tokens=tokens,
        tok_s=tokens / window if window > 0 else None,
        ttft_ms=_mean_ms(ttft),
        tpot_ms=_mean_ms(tpot),
        itl_chunk_ms=_mean_ms(gaps),
    )


def _mean_ms(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) * 1000.0 if values else None
