"""The GPU telemetry on a real GPU: the agent's own sampler while a CUDA process loads the GPU.

Run it on any machine with an NVIDIA GPU and a Python (no engine needed; PyTorch, when present,
makes the load: bf16 matmuls between two idle stretches). It samples the GPU the way a run
does and prints what the energy figures rest on: the energy counter against the integral of
power over the whole time and over the loaded part, the longest gap between reads, the reads
per second and the sampler's own CPU time, the power and SM clock range, and the throttle
reasons seen. Commit its output under ``benchmarks/results/`` (``--out``) whenever such a
machine is at hand.

    python -m benchmarks.gpu_check                       # GPU 0, 5 s idle, 20 s load, 5 s idle
    python -m benchmarks.gpu_check --gpu 1 --load-s 60
    python -m benchmarks.gpu_check --library ./libfake-nvml.so --no-load   # a dry run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, Bench, Target
from orchestrator.metrics.energy import MAX_DISAGREEMENT, gpu_window
from orchestrator.remote.telemetry import (
    NVML_LIBRARY,
    NvmlReader,
    Sampler,
    TelemetryUnavailable,
    reason_names,
)

LOAD = """
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while time.time() < end:
    for _ in range(20):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
"""
CPU_TARGET = 0.01  # the issue's: the sampler costs at most 1% of one core


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--interval-s", type=float, default=0.1)
    parser.add_argument("--library", default=NVML_LIBRARY)
    parser.add_argument("--no-load", action="store_true", help="sample only, start no CUDA load")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def load(gpu: int, seconds: float) -> subprocess.Popen[bytes] | None:
    """A PyTorch process running matmuls on ``gpu`` for ``seconds``; None without PyTorch."""
    if importlib.util.find_spec("torch") is None:
        print("no PyTorch here: sampling without a load", file=sys.stderr)
        return None
    env = {"CUDA_VISIBLE_DEVICES": str(gpu)}
    return subprocess.Popen([sys.executable, "-c", LOAD, str(seconds)], env={**os.environ, **env})


def main() -> None:
    args = arguments()
    try:
        reader = NvmlReader([args.gpu], args.library)
    except TelemetryUnavailable as e:
        sys.exit(f"gpu_check: {e} (is this a machine with an NVIDIA GPU and its driver?)")
    limit = reader.power_limit_w(args.gpu)
    sampler = Sampler(reader, args.interval_s).start()
    started = time.time()
    time.sleep(args.idle_s)
    proc = None if args.no_load else load(args.gpu, args.load_s)
    load_start = time.time()
    if proc is not None:
        proc.wait()
    else:
        time.sleep(args.load_s)
    load_end = time.time()
    time.sleep(args.idle_s)
    ended = time.time()
    samples = sampler.stop()
    reader.close()
    whole = gpu_window(args.gpu, samples, started, ended)
    loaded = gpu_window(args.gpu, samples, load_start, load_end)
    span = ended - started
    reasons = sorted({n for s in samples if s.reasons for n in reason_names(s.reasons)})
    watts = [s.power_w for s in samples if s.power_w is not None]
    clocks = [s.sm_mhz for s in samples if s.sm_mhz is not None]
    rows: list[list[str | float | int | None]] = []
    offs: list[float] = []
    for name, w in (("whole run", whole), ("loaded part", loaded)):
        if not w.energy_j or w.integral_j is None or w.energy_source != "counter":
            sys.exit(f"gpu_check: no energy counter on GPU {args.gpu}: {'; '.join(w.problems)}")
        offs.append(100 * abs(w.integral_j - w.energy_j) / w.energy_j)
        rows.append([name, w.energy_j, w.integral_j, offs[-1], w.max_gap_s])
    off_whole = offs[0]
    bench = Bench(
        name="gpu_check",
        title="GPU telemetry on a real GPU",
        columns=["window", "counter J", "power integral J", "differ %", "longest gap s"],
        rows=rows,
        targets=[
            Target(
                "counter and integral differ, whole run", off_whole, MAX_DISAGREEMENT * 100, "%"
            ),
            Target(
                "sampler CPU, share of one core", 100 * sampler.cpu_s / span, CPU_TARGET * 100, "%"
            ),
        ],
        notes=[
            f"GPU {args.gpu}: {len(samples)} reads in {span:.1f} s ({len(samples) / span:.1f}/s at "
            f"{args.interval_s:g} s), the sampler's CPU {sampler.cpu_s:.3f} s; power "
            f"{min(watts, default=0):.0f}-{max(watts, default=0):.0f} W (limit "
            f"{limit if limit is not None else '?'} W), SM clock {min(clocks, default=0)}-"
            f"{max(clocks, default=0)} MHz; reasons seen: {', '.join(reasons) or 'none'}.",
            "The load: "
            + (
                "none (--no-load)"
                if args.no_load
                else f"{args.load_s:g} s of bf16 "
                "8192^3 matmuls by PyTorch, between two idle stretches"
            )
            + ".",
        ],
        smoke=args.no_load,  # a dry run is not the check
    )
    bench.publish(args.out)
    if sampler.errors:
        sys.exit(f"gpu_check: {len(sampler.errors)} reads failed: {sampler.errors[0]}")


if __name__ == "__main__":
    main()
