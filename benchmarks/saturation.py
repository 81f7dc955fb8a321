"""Calibrating the client-saturation detector: does it flag exactly the runs whose timings are
wrong?

Each run is ``orch loadgen`` (a closed loop) against the engine simulator with a fixed step and
one token per chunk (``client_sim.py``), its figures compared with the simulator's own record
of every request. A run's timings are *wrong* when its TPOT (mean) is off the truth by more than
``WRONG_TPOT_PCT`` (the client benchmark's accuracy target) or its TTFT (mean) by more than
``WRONG_TTFT_STEPS`` decode steps (a first chunk read one step late). (Not the ITL tail: the
truth stamps a chunk when its step ends, not when the simulator wrote it, and at 16 streams and
more the simulator's own writing moved the tail by 10-30% with no client error.) A run is *flagged* when orch's
detector (``client_warnings`` in ``orchestrator/runner/summarize.py``, fed the run's own
summary) says the client was saturated. The calibration wants flagged ⇔ wrong.

Load points: 1 to 256 streams at steps the client keeps up with (256 streams at 40 ms is the
wave-boundary case: every stream ends and restarts at once), and two it cannot (64 streams at
2.5 ms, 256 at 10 ms: 25.6k tokens/s offered on one client core). Each alone (the simulator on
one core, the client on the other) and busy (a busy-loop process shares the client's core, so
the client gets about half of it in time slices of a few ms).

    python -m benchmarks.saturation              # 2 repeats of 12 runs, a few minutes
    python -m benchmarks.saturation --repeats 1
    python -m benchmarks.saturation --smoke      # 1 and 4 streams, alone and busy (CI)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.client import cores, error_pct
from benchmarks.client_peers import run_loadgen
from benchmarks.client_sim import Case, Sim, Truth, pin, truth_of
from benchmarks.common import Bench, Target, arguments
from orchestrator.metrics.summary import ClientLag
from orchestrator.runner.summarize import client_warnings
from orchestrator.sim.sandbox import prepare_sandbox

WRONG_TPOT_PCT = 1.0  # the client benchmark's TPOT target up to 256 streams
WRONG_TTFT_STEPS = 1.0
# the detector before this calibration: send lag p99 > 100 ms or event-loop delay p99 > 20 ms
OLD_SEND_P99_MS, OLD_LOOP_P99_MS = 100.0, 20.0
COLUMNS = [
    "load",
    "client",
    "TPOT err %",
    "TTFT err ms",
    "timings",
    "send lag p50 / p99 ms",
    "loop delay p99 ms",
    "shared reads %",
    "first-read shared %",
    "old rule",
    "orch now",
]


def point(concurrency: int, step_ms: float, max_tokens: int, waves: int) -> Case:
    return Case("plain", concurrency, step_ms, 1, max_tokens, concurrency * waves)


FULL = [
    point(1, 10, 64, 4),
    point(16, 10, 64, 2),
    point(64, 20, 64, 2),
    point(256, 40, 32, 2),  # the wave-boundary case
    point(64, 2.5, 128, 4),  # 25.6k tok/s: more than one client core keeps up with
    point(256, 10, 64, 2),  # 25.6k tok/s at 256 streams
]
SMOKE = [point(1, 5, 16, 2), point(4, 5, 16, 2)]
LOADS = ("alone", "busy")


@dataclass(frozen=True)
class Run:
    case: Case
    load: str
    summary: dict[str, Any]
    truth: Truth

    @property
    def requests(self) -> dict[str, Any]:
        return self.summary.get("requests") or {}

    @property
    def tpot_err(self) -> float | None:
        return error_pct((self.requests.get("tpot_ms") or {}).get("mean"), self.truth.tpot_ms)

    @property
    def ttft_err(self) -> float | None:
        ttft = (self.requests.get("ttft_ms") or {}).get("mean")
        return None if ttft is None or self.truth.ttft_ms is None else ttft - self.truth.ttft_ms

    @property
    def wrong(self) -> bool:
        tpot, ttft = self.tpot_err, self.ttft_err
        return (
            tpot is None
            or abs(tpot) > WRONG_TPOT_PCT
            or ttft is None
            or abs(ttft) > WRONG_TTFT_STEPS * self.case.step_ms
        )

    @property
    def lag(self) -> ClientLag:
        return ClientLag.model_validate(self.requests.get("client_lag") or {})

    @property
    def old_rule(self) -> bool:
        send, loop = self.lag.send_lag_ms.p99, self.lag.loop_delay_ms
        return (send or 0.0) > OLD_SEND_P99_MS or (
            loop is not None and (loop.p99 or 0.0) > OLD_LOOP_P99_MS
        )

    @property
    def flagged(self) -> bool:
        """What orch's detector says of this run now (a closed loop: no rate to fall short of)."""
        return bool(
            client_warnings(
                client_lag=self.lag,
                request_rate=None,
                achieved_rate=None,
                scheduled_rate=None,
                arrival_clock=(self.summary.get("loadgen") or {}).get("arrival_clock"),
            )
        )


def busy_loop(core: int | None) -> subprocess.Popen[bytes]:
    """A process that spins on ``core``: the client's neighbour on a busy host."""
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        start_new_session=True,
        preexec_fn=lambda: pin(core),
    )


def run_orch(case: Case, url: str, cwd: Path, core: int | None) -> dict[str, Any]:
    """`orch loadgen` pinned on ``core``: its summary.json (a failed run ends the benchmark)."""
    done = run_loadgen(case, url, cwd, core)
    summaries = sorted((cwd / "results").glob("*/*/summary.json"))
    if done.code not in (0, 1) or not summaries:  # 1: measured, marked failed
        log = (cwd / "client.log").read_text(errors="replace")[-1500:]
        raise SystemExit(f"orch loadgen failed at {case.label} (exit {done.code}):\n{log}")
    data: dict[str, Any] = json.loads(summaries[-1].read_text())
    return data


def measure(case: Case, load: str, scratch: Path) -> Run:
    sim_core, client_core = cores()
    work = Path(tempfile.mkdtemp(prefix=f"c{case.concurrency}-{load}-", dir=scratch))
    sim = Sim(prepare_sandbox(scratch / "sandbox"), case, sim_core, work / "sim.log")
    spinner = None
    try:
        sim.wait_ready()
        spinner = busy_loop(client_core) if load == "busy" else None
        summary = run_orch(case, sim.url, work, client_core)
    finally:
        if spinner is not None:
            os.killpg(spinner.pid, signal.SIGKILL)
            spinner.wait()
        raw = sim.stop()
    run = Run(case, load, summary, truth_of(raw, case))
    print(f"  {case.label} {load}: {_brief(run)}", flush=True)
    return run


def _brief(run: Run) -> str:
    return (
        f"TPOT {run.tpot_err or 0:+.2f}%, TTFT {run.ttft_err or 0:+.1f} ms, "
        f"{'wrong' if run.wrong else 'right'}, {'flagged' if run.flagged else 'not flagged'}"
    )


def row(run: Run) -> list[str | float | int | None]:
    lag = run.lag
    send = lag.send_lag_ms
    loop = lag.loop_delay_ms.p99 if lag.loop_delay_ms else None
    return [
        run.case.label,
        run.load,
        run.tpot_err,
        run.ttft_err,
        "wrong" if run.wrong else "right",
        f"{_num(send.p50)} / {_num(send.p99)}",
        loop,
        lag.shared_read_pct,
        lag.first_read_shared_pct,
        "flagged" if run.old_rule else "–",
        "flagged" if run.flagged else "–",
    ]


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def verdicts(runs: list[Run]) -> tuple[list[Target], list[str]]:
    """How often each rule disagrees with the truth: false alarms and misses."""
    lines, targets = [], []
    for name, said in (("orch now", lambda r: r.flagged), ("old rule", lambda r: r.old_rule)):
        false_alarms = sum(1 for r in runs if said(r) and not r.wrong)
        misses = sum(1 for r in runs if r.wrong and not said(r))
        flagged = sum(1 for r in runs if said(r))
        lines.append(
            f"- {name}: flagged {flagged} of {len(runs)} runs; false alarms (flagged, timings "
            f"right) {false_alarms}; misses (timings wrong, not flagged) {misses}"
        )
        if name == "orch now":
            targets.append(Target("orch now: false alarms", false_alarms, 0, "runs"))
            targets.append(Target("orch now: misses", misses, 0, "runs"))
    wrong = sum(1 for r in runs if r.wrong)
    lines.insert(0, f"- {len(runs)} runs, {wrong} with wrong timings")
    return targets, lines


def notes(summary: list[str], repeats: int) -> list[str]:
    return [
        *summary,
        f"- Timings wrong: |TPOT error| > {WRONG_TPOT_PCT:g}% or |TTFT error| > "
        f"{WRONG_TTFT_STEPS:g} decode step; errors are signed (client - truth), means over "
        "requests. Truth: the simulator's record of every request (`benchmarks/client_sim.py`).",
        "- Old rule: send lag p99 > 100 ms or event-loop delay p99 > 20 ms (before this "
        "calibration). Orch now: `client_warnings` on the run's summary "
        "(docs/guarantees.md, 'Client saturation').",
        "- Alone: the simulator pinned to one core, `orch loadgen` to the other; busy: a "
        "busy-loop process pinned beside the client. Closed loops, 1 token per chunk, "
        f"{repeats} repeat(s) of each; each run on a fresh simulator.",
        "- The machine is shared with other work and noisy: a run's figures move between repeats.",
    ]


def main() -> None:
    args = arguments(__doc__ or "", "1 and 4 streams, alone and busy, seconds", repeats=2)
    sim_core, _ = cores()
    if sim_core is not None:
        os.sched_setaffinity(0, {sim_core})  # this process waits on the simulator's core
    repeats = 1 if args.smoke else args.repeats
    runs: list[Run] = []
    scratch = Path(tempfile.mkdtemp(prefix="orch-bench-saturation-"))
    try:
        for _ in range(repeats):
            for c in SMOKE if args.smoke else FULL:
                for load in LOADS:
                    runs.append(measure(c, load, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    targets, summary = verdicts(runs)
    Bench(
        name="saturation",
        title="Client saturation: the detector against the simulator's truth",
        columns=COLUMNS,
        rows=[row(r) for r in runs],
        targets=targets,
        notes=notes(summary, repeats),
        smoke=args.smoke,
    ).publish(args.out)


if __name__ == "__main__":
    main()
