"""The three clients the client benchmark compares, each run as a pinned process, its figures
read from its own export: orch's load generator (`orch loadgen`'s summary.json), AIPerf
(``profile_export_aiperf.json``) and GuideLLM (``benchmarks.json``).

The peers live in their own venvs under ``benchmarks/.venvs/`` (git-ignored), installed from
PyPI at the pinned versions the first time they are needed. A peer that cannot be installed
or run is reported as such, with why, and the benchmark goes on without it.

Each is configured the way its documentation recommends for an accurate measurement of a
streaming OpenAI-compatible server: token counts from the server's usage (AIPerf
``--use-server-token-count``; GuideLLM and orch ask for usage in every chunk), no warm-up
(each measurement gets a fresh simulator, and its ground truth counts every request), one
worker process (the client has one core).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.client_sim import MODEL, Case, pin

ROOT = Path(__file__).resolve().parent
VENVS = ROOT / ".venvs"
PINNED = {"aiperf": "aiperf==0.13.0", "guidellm": "guidellm==0.8.1"}
INSTALL_TIMEOUT_S = 1800.0
PROMPT_TOKENS = 64


@dataclass(frozen=True)
class ToolRun:
    """One client's measurement of one case: its figures (None: not reported), or why none."""

    tool: str
    error: str | None = None
    tok_s: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_chunk_ms: float | None = None
    completed: int | None = None
    failed: int | None = None
    cpu_s: float | None = None
    wall_s: float | None = None
    lag: str | None = None  # the client's own account of how late it was, as it defines it
    flagged: str | None = None  # the client marked its own measurement failed: why


@dataclass(frozen=True)
class Peer:
    """An installed peer (``python`` of its venv, its version) or why there is none."""

    name: str
    python: Path | None
    version: str | None
    error: str | None = None


# ---------------------------------------------------------------- set-up


def ensure_peer(name: str) -> Peer:
    """The peer's venv, created and installed from PyPI (pinned) when missing."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    version = _installed(python, name)
    if version is None:
        print(f"installing {PINNED[name]} into {venv} (once) ...", flush=True)
        try:
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", PINNED[name]],
                check=True,
                timeout=INSTALL_TIMEOUT_S,
                capture_output=True,
                text=True,
            )
        except subprocess.CalledProcessError as exc:
            tail = (exc.stderr or exc.stdout or "").strip().splitlines()[-3:]
            return Peer(name, None, None, f"pip install {PINNED[name]} failed: {' '.join(tail)}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Peer(name, None, None, f"could not install {PINNED[name]}: {exc}")
        version = _installed(python, name)
    if version is None:
        return Peer(name, None, None, f"{name} not importable after installing it")
    return Peer(name, python, version)


def _installed(python: Path, package: str) -> str | None:
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


# ---------------------------------------------------------------- running a client


@dataclass(frozen=True)
class Finished:
    code: int | None  # None: killed at the deadline
    cpu_s: float
    wall_s: float


def run_pinned(
    argv: list[str], *, env: dict[str, str], cwd: Path, core: int | None, timeout_s: float
) -> Finished:
    """Run ``argv`` on ``core``; its CPU time is the rusage of the process and of the children
    it waited for (AIPerf's and GuideLLM's worker processes)."""
    started = time.perf_counter()
    with (cwd / "client.log").open("ab") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: pin(core),
        )
    deadline = started + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - started
            return Finished(proc.returncode, usage.ru_utime + usage.ru_stime, wall)
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)  # the client's own process group
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - started
            return Finished(None, usage.ru_utime + usage.ru_stime, wall)
        time.sleep(0.05)


def _tail(cwd: Path) -> str:
    try:
        lines = (cwd / "client.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " / ".join(line.strip() for line in lines[-3:])[-400:]


def _failed(tool: str, done: Finished, cwd: Path, what: str) -> ToolRun:
    why = "timed out" if done.code is None else f"exit {done.code}"
    return ToolRun(
        tool, error=f"{what} ({why}): {_tail(cwd)}", cpu_s=done.cpu_s, wall_s=done.wall_s
    )


def timeout_for(case: Case) -> float:
    """Generous: start-up (a minute for GuideLLM), then several times the ideal duration."""
    ideal = case.num_prompts / case.concurrency * case.max_tokens / case.chunk_tokens * case.step_ms
    return 120.0 + 5 * ideal / 1000.0


def run_loadgen(case: Case, url: str, cwd: Path, core: int | None) -> Finished:
    """`orch loadgen` on ``case`` in a process of its own pinned on ``core``, writing under
    ``cwd/results`` (the client benchmark's and the saturation calibration's one command)."""
    argv = [sys.executable, "-m", "orchestrator", "loadgen", url, "--model", MODEL]
    argv += ["--prompts", f"random:{PROMPT_TOKENS}", "--num-prompts", str(case.num_prompts)]
    argv += ["-c", str(case.concurrency), "--max-tokens", str(case.max_tokens), "--ignore-eos"]
    argv += ["--warmup", "0", "--out", str(cwd / "results"), "--json"]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT.parent)}
    return run_pinned(argv, env=env, cwd=cwd, core=core, timeout_s=timeout_for(case))


def run_orch(case: Case, url: str, cwd: Path, core: int | None) -> ToolRun:
    """`orch loadgen` in a process of its own, like the peers (start-up included)."""
    done = run_loadgen(case, url, cwd, core)
    summaries = sorted((cwd / "results").glob("*/*/summary.json"))
    if done.code not in (0, 1) or not summaries:  # 1: measured, but marked failed
        return _failed("orch", done, cwd, "orch loadgen failed")
    data = json.loads(summaries[-1].read_text())
    req = data.get("requests") or {}
    lag = req.get("client_lag") or {}
    error = data.get("error") or {}
    send = (lag.get("send_lag_ms") or {}).get("p99")
    loop = (lag.get("loop_delay_ms") or {}).get("p99")
    return ToolRun(
        "orch",
        tok_s=req.get("output_throughput"),
        ttft_ms=(req.get("ttft_ms") or {}).get("mean"),
        tpot_ms=(req.get("tpot_ms") or {}).get("mean"),
        itl_chunk_ms=(req.get("itl_chunk_ms") or {}).get("mean"),
        completed=req.get("completed"),
        failed=req.get("failed"),
        cpu_s=done.cpu_s,
        wall_s=done.wall_s,
        lag=f"send p99 {_ms(send)}, loop p99 {_ms(loop)}",
        flagged=error.get("kind") or error.get("type"),  # "client_saturated" ...
    )


def peer_env(hf_home: Path) -> dict[str, str]:
    """Offline, with the benchmark's own tokenizer cache (``client_tokenizer.py``)."""
    return {
        **os.environ,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_COLOR": "1",
        "GUIDELLM__MAX_WORKER_PROCESSES": "1",
    }


def run_aiperf(
    peer: Peer, case: Case, url: str, cwd: Path, core: int | None, hf_home: Path, tokenizer: str
) -> ToolRun:
    assert peer.python is not None
    out = cwd / "aiperf"
    argv = [str(peer.python.parent / "aiperf"), "profile", "--model", MODEL, "--url", url]
    argv += ["--endpoint-type", "chat", "--streaming", "--concurrency", str(case.concurrency)]
    argv += ["--request-count", str(case.num_prompts), "--tokenizer", tokenizer]
    argv += ["--prompt-input-tokens-mean", str(PROMPT_TOKENS), "--prompt-input-tokens-stddev", "0"]
    argv += ["--prompt-output-tokens-mean", str(case.max_tokens)]
    argv += ["--prompt-output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true"]
    argv += ["--use-server-token-count", "--workers-max", "1", "--ui-type", "none"]
    argv += ["--no-server-metrics", "--no-gpu-telemetry", "--output-artifact-dir", str(out)]
    done = run_pinned(argv, env=peer_env(hf_home), cwd=cwd, core=core, timeout_s=timeout_for(case))
    export = out / "profile_export_aiperf.json"
    if done.code != 0 or not export.is_file():
        return _failed("AIPerf", done, cwd, "aiperf profile failed")
    data = json.loads(export.read_text())
    count = _stat(data, "request_count", "avg")
    errors = _stat(data, "request_error_rate", "avg")
    lag = _stat(data, "credit_to_start_latency", "p99")
    return ToolRun(
        "AIPerf",
        tok_s=_stat(data, "output_token_throughput", "avg"),
        ttft_ms=_stat(data, "time_to_first_token", "avg"),
        tpot_ms=_stat(data, "inter_token_latency", "avg"),  # (e2e - ttft) / (tokens - 1)
        itl_chunk_ms=_stat(data, "inter_chunk_latency", "avg"),
        completed=int(count) if count is not None else None,
        failed=round(count * errors / 100) if count is not None and errors is not None else None,
        cpu_s=done.cpu_s,
        wall_s=done.wall_s,
        lag=f"credit→start p99 {_ms(lag)}",
    )


def run_guidellm(
    peer: Peer, case: Case, url: str, cwd: Path, core: int | None, hf_home: Path, tokenizer: str
) -> ToolRun:
    assert peer.python is not None
    out = cwd / "guidellm.json"
    scenario = {
        "spec": {
            "backend": {"kind": "openai_http", "target": url, "model": MODEL},
            "profile": {"kind": "concurrent", "streams": [case.concurrency]},
            "data": [
                {
                    "kind": "synthetic_text",
                    "prompt_tokens": PROMPT_TOKENS,
                    "output_tokens": case.max_tokens,
                }
            ],
            "tokenizer": {"kind": "hf_auto", "model": tokenizer},
            "constraints": [{"kind": "max_requests", "count": case.num_prompts}],
            "outputs": [{"kind": "json", "path": str(out)}],
        }
    }
    path = cwd / "scenario.json"
    path.write_text(json.dumps(scenario, indent=1))
    argv = [str(peer.python.parent / "guidellm"), "run", "-c", str(path)]
    argv += ["--disable-console-interactive"]
    done = run_pinned(argv, env=peer_env(hf_home), cwd=cwd, core=core, timeout_s=timeout_for(case))
    if done.code != 0 or not out.is_file():
        return _failed("GuideLLM", done, cwd, "guidellm run failed")
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics, sched = bench["metrics"], bench.get("scheduler_metrics") or {}
    totals = metrics.get("request_totals") or {}
    lag = sched.get("request_targeted_start_delay_avg")
    return ToolRun(
        "GuideLLM",
        tok_s=_ok(metrics, "output_tokens_per_second"),
        ttft_ms=_ok(metrics, "time_to_first_token_ms"),
        # GuideLLM's ITL is (last - first token) / (tokens - 1) per request, i.e. TPOT as orch
        # and AIPerf define it; its own "TPOT" includes the TTFT; no per-chunk figure
        tpot_ms=_ok(metrics, "inter_token_latency_ms"),
        completed=totals.get("successful"),
        failed=(totals.get("errored") or 0) + (totals.get("incomplete") or 0),
        cpu_s=done.cpu_s,
        wall_s=done.wall_s,
        lag=f"start delay mean {_ms(lag * 1000 if lag is not None else None)}",
    )


def _stat(data: dict[str, Any], name: str, key: str) -> float | None:
    value = (data.get(name) or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def _ok(metrics: dict[str, Any], name: str) -> float | None:
    value = ((metrics.get(name) or {}).get("successful") or {}).get("mean")
    return float(value) if isinstance(value, int | float) else None


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} ms"
