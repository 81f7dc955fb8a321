"""Where orch's load generator spends its time, and its error request by request.

A support script for ``benchmarks/client.py`` (which compares clients by their means): here
each request the load generator recorded is matched with the simulator's own record of it, and
the client can be profiled. The simulator plays a speculative launch whose chunks carry 1 or 2
tokens at random (an ngram drafter of one token), so each request's sequence of chunk sizes is
its fingerprint; Qwen3-8B on two simulated H100s at real speed, so the server streams what a
real one would (about 4-5k chunks/s from 64 to 1,024 streams; ``--speed 4``: four times as
many). The simulator is pinned to the first core, the load generator (in this process,
emitting through the agent's own writer to /dev/null) to the second.

Per load point (closed loop, ``waves`` x concurrency requests of ``tokens`` tokens): TPOT error
(mean over requests, client - truth, %), the median of each request's |TPOT error|, ITL error
(mean |client gap - true gap| over every chunk), TTFT error (mean, ms) split into send ->
arrival at the server and the rest, the server's delivery delay (a chunk's arrival at the client
- the step that made it: the simulator's own lag), the client's loop delay and send lag p99,
and its CPU seconds per 1,000 tokens.

    python -m benchmarks.loadgen_profile --concurrency 64 256 1024
    python -m benchmarks.loadgen_profile --concurrency 256 --profile benchmarks/results/profiles/loadgen-after.txt
    python -m benchmarks.loadgen_profile --smoke --out DIR   # seconds (CI)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from orchestrator.remote import loadrunner
from orchestrator.remote.dispatch import make_emit
from orchestrator.remote.stats import percentile
from orchestrator.remote.wire import LoadgenResult, RequestRecord, Wire
from orchestrator.sim.sandbox import Sandbox, prepare_sandbox

MODEL = "Qwen/Qwen3-8B"
SIM_ENV = {
    "ORCH_SIM_SPEED": "1",
    "ORCH_SIM_LOAD_S": "0",
    "ORCH_SIM_GPU_NAME": "NVIDIA H100 80GB HBM3",
    "ORCH_SIM_GPU_MEMORY_MIB": "81559",
}
DRAFTER = {"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 4}


def start_sim(
    box: Sandbox, core: int | None, log: Path, speed: float
) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["vllm", "serve", MODEL, "--port", str(port), "--tensor-parallel-size", "2"]
    argv += ["--max-num-seqs", "2048", "--max-model-len", "4096"]
    argv += ["--speculative-config", json.dumps(DRAFTER)]
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **box.env(), **SIM_ENV, "ORCH_SIM_SPEED": f"{speed:g}"},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=pin,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(log.read_text()[-2000:])


def truth(port: int, since: float) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/sim/ground_truth"
    with urllib.request.urlopen(url, timeout=60) as r:
        found: list[dict[str, Any]] = json.load(r)["requests"]
    return [t for t in found if not t["warmup"] and t["arrival_time"] >= since]


def run_point(
    port: int, concurrency: int, tokens: int, waves: int, profile: Path | None
) -> tuple[LoadgenResult, list[RequestRecord], float, float]:
    """One closed loop; (result, records, CPU s, wall time it started)."""
    n = concurrency * waves
    items = [f"Question {k}: tell me about the number {k}." for k in range(n)]
    spec = {"port": port, "model": MODEL, "prompts": {"kind": "list", "items": items}}
    spec |= {"num_prompts": n, "concurrency": concurrency, "max_tokens": tokens}
    spec |= {"ignore_eos": True, "temperature": 0.0}
    records: list[RequestRecord] = []
    with open(os.devnull, "w") as null:
        sink = make_emit(null)

        def emit(event: Wire) -> None:
            sink(event)
            if isinstance(event, RequestRecord):
                records.append(event)

        since, before = time.time(), resource.getrusage(resource.RUSAGE_SELF)
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        result = loadrunner.run(spec, emit)
        if profiler:
            profiler.disable()
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if profiler and profile:
        write_profile(profiler, profile, f"c={concurrency}, {tokens} tokens, {n} requests")
    return result, records, cpu, since


def write_profile(profiler: cProfile.Profile, path: Path, what: str) -> None:
    text = io.StringIO()
    text.write(f"orch loadgen under cProfile, {what} (python -m benchmarks.loadgen_profile)\n")
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    text.write("---- by cumulative time ----\n")
    stats.sort_stats("cumulative").print_stats(30)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue())


def figures(
    result: LoadgenResult, records: list[RequestRecord], found: list[dict[str, Any]], cpu: float
) -> dict[str, Any]:
    """Each recorded request against the server's record of it (by chunk sizes)."""
    by_chunks: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for t in found:
        by_chunks.setdefault(tuple(t["chunk_tokens"]), []).append(t)
    ttft, arrive, tpot_c, tpot_t, itl, deliver = [], [], [], [], [], []
    for r in records:
        same = by_chunks.get(tuple(c.tokens for c in r.chunks), [])
        if not r.ok or r.warmup or len(same) != 1 or not r.output_tokens or r.ttft is None:
            continue
        t = same[0]
        ttft.append(r.ttft - t["ttft_s"])
        arrive.append(t["arrival_time"] - r.start_wall)
        tpot_c.append(((r.e2el or 0.0) - r.ttft) / (r.output_tokens - 1))
        tpot_t.append(t["decode_s"] / (t["output_tokens"] - 1))
        times = [c.t for c in r.chunks]
        true = t["chunk_times"]
        itl += [
            abs((times[i] - times[i - 1]) - (true[i] - true[i - 1])) for i in range(1, len(times))
        ]
        deliver += [r.start_wall + times[i] - true[i] for i in range(len(times))]
    lag = result.client_lag
    mean_t = statistics.fmean(tpot_t)

    def ms(values: list[float], p: float | None = None) -> float:
        return round(
            (statistics.fmean(values) if p is None else percentile(values, p) or 0.0) * 1e3, 2
        )

    return {
        "concurrency": result.concurrency,
        "requests": result.requests,
        "matched": len(tpot_t),
        "tpot_truth_ms": round(mean_t * 1e3, 3),
        "tpot_err_pct": round((statistics.fmean(tpot_c) - mean_t) / mean_t * 100, 3),
        "tpot_abs_err_median_pct": round(
            statistics.median(abs(c - t) / t for c, t in zip(tpot_c, tpot_t, strict=True)) * 100, 3
        ),
        "itl_abs_err_mean_ms": ms(itl),
        "ttft_err_mean_ms": ms(ttft),
        "send_to_server_arrival_mean_ms": ms(arrive),
        "server_delivery_p99_ms": ms(deliver, 99),
        "loop_delay_p99_ms": lag.loop_delay_ms.p99 if lag else None,
        "send_lag_p99_ms": lag.send_lag_ms.p99 if lag else None,
        "cpu_s_per_1k_tokens": round(cpu / max(1, result.output_tokens) * 1000, 4),
        # getattr: the same script profiles an older orch for a before/after comparison
        "event_loop": getattr(result, "event_loop", None),
        "arrival_clock": getattr(result, "arrival_clock", None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--speed", type=float, default=1.0, help="x real time: more chunks/s")
    parser.add_argument("--profile", type=Path, help="cProfile the last load point into this")
    parser.add_argument("--smoke", action="store_true", help="4 streams, 16 tokens: seconds")
    parser.add_argument("--out", type=Path, help="write loadgen_profile.json here")
    args = parser.parse_args()
    if args.smoke:
        args.concurrency, args.tokens = [4], 16
    mine = sorted(os.sched_getaffinity(0))
    sim_core, client_core = (mine[0], mine[1]) if len(mine) >= 2 else (None, None)
    if client_core is not None:
        os.sched_setaffinity(0, {client_core})
    rows = []
    with tempfile.TemporaryDirectory(prefix="orch-loadgen-profile-") as tmp:
        box = prepare_sandbox(Path(tmp) / "sandbox")
        proc, port = start_sim(box, sim_core, Path(tmp) / "sim.log", args.speed)
        try:
            for i, c in enumerate(args.concurrency):
                last = i == len(args.concurrency) - 1
                result, records, cpu, since = run_point(
                    port, c, args.tokens, args.waves, args.profile if last else None
                )
                time.sleep(0.5)  # the simulator's last records
                rows.append(figures(result, records, truth(port, since), cpu))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        data = {"smoke": args.smoke, "python": sys.version.split()[0], "rows": rows}
        (args.out / "loadgen_profile.json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
