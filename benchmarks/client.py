"""Client accuracy and capacity: orch's load generator against AIPerf and GuideLLM.

Each client drives the engine simulator configured for a known step and a known number of
tokens per chunk (``ORCH_SIM_STEP_MS``, ``ORCH_SIM_CHUNK_TOKENS``: ``orchestrator/sim/fixed.py``),
and its figures are compared with what the simulator really did (its ground truth:
``client_sim.py``). The simulator runs on one core, the client on the other; each measurement
gets a fresh simulator, so its ground truth holds that client's requests only.

Load points, closed loop (``concurrency`` streams, each request ``max_tokens`` long): 1, 64,
256 and 1024 streams, plain (1 token per chunk) and speculative (4 tokens per chunk: an ngram
drafter whose 3 drafts are always accepted); and an offered-rate ladder at 64 streams (plain:
the step shortened so the server offers 3.2k, 12.8k and 25.6k tokens/s). The offered rate is
what the server streams when no client ever makes it wait: streams x tokens per chunk / step.
At 64 streams and more, rungs are then added, orch first, until the step between the last rung
orch reports ok and the first it marks failed is found (``client_ladder.py``; ``--rungs`` per
shape); the peers measure the added rungs of the ladder too, the other shapes' are orch's only.
Targets count only what orch would report (``client_targets.py``).

Columns: achieved tok/s (what the client reports) against the truth (tokens the simulator
generated / its window); TPOT error (the client's mean (last - first token) / (tokens - 1)
against the truth's), ITL error (mean gap between chunks), TTFT error (client's mean - the
server's mean, in ms: the client's share of the first token's latency, network included);
client CPU seconds (the client process and the workers it waited for, start-up included) per
1,000 tokens; the client's own account of its lag, each as it defines it.

    python -m benchmarks.client           # ~25 min; installs the peers on first use
    python -m benchmarks.client --rungs 1 # fewer rungs added per shape (default 3)
    python -m benchmarks.client --smoke   # orch only, 1 and 4 streams, seconds (CI)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.client_ladder import next_step, rung
from benchmarks.client_peers import (
    Peer,
    ToolRun,
    ensure_peer,
    run_aiperf,
    run_guidellm,
    run_orch,
)
from benchmarks.client_sim import Case, Sim, truth_of
from benchmarks.client_targets import BAR_PCT, Measured, error_pct, targets
from benchmarks.client_tokenizer import REPO_ID, build_tokenizer
from benchmarks.common import Bench, arguments
from orchestrator.sim.sandbox import prepare_sandbox

CACHE = Path(__file__).resolve().parent / ".cache"
STEPS = 128  # decode steps per request at 1-256 streams; 32 at 1024 (else a wave lasts long)
COLUMNS = [
    "load",
    "tool",
    "achieved tok/s",
    "truth tok/s",
    "offered tok/s",
    "TPOT err %",
    "ITL err %",
    "TTFT err ms",
    "client CPU s/1k tok",
    "client lag",
]


def case(mode: str, concurrency: int, step_ms: float, steps: int, waves: int, **kw: bool) -> Case:
    tokens = 4 if mode == "spec" else 1
    return Case(mode, concurrency, step_ms, tokens, steps * tokens, concurrency * waves, **kw)


FULL = [
    case("plain", 1, 10, STEPS, 5),
    case("plain", 64, 20, STEPS, 2, ladder=True),  # 3.2k tok/s
    case("plain", 64, 5, STEPS, 8, ladder=True),  # 12.8k tok/s
    case("plain", 64, 2.5, STEPS, 16, ladder=True),  # 25.6k tok/s
    case("plain", 256, 40, 64, 2),
    case("plain", 1024, 200, 32, 2),
    case("spec", 1, 10, STEPS, 5),
    case("spec", 64, 20, STEPS, 2),
    case("spec", 256, 40, 64, 2),
    case("spec", 1024, 200, 32, 2),
]
SMOKE = [case("plain", 1, 5, 32, 8), case("plain", 4, 5, 32, 2)]
EXTENDED = {(mode, c) for mode in ("plain", "spec") for c in (64, 256, 1024)}  # get rungs added


def cores() -> tuple[int | None, int | None]:
    """(the simulator's core, the client's core); both None on a single core."""
    mine = sorted(os.sched_getaffinity(0))
    return (mine[0], mine[1]) if len(mine) >= 2 else (None, None)


Client = Callable[[Case, str, Path, int | None], ToolRun]


def clients(peers: list[Peer], hf_home: Path, tokenizer_dir: Path) -> dict[str, Client]:
    """Each client that can run, by name, as a call (case, url, work folder, core)."""
    out: dict[str, Client] = {"orch": run_orch}
    ready = {p.name: p for p in peers if p.error is None}
    if "aiperf" in ready:
        aiperf = ready["aiperf"]

        def run_a(c: Case, url: str, work: Path, core: int | None) -> ToolRun:
            return run_aiperf(aiperf, c, url, work, core, hf_home, REPO_ID)

        out["AIPerf"] = run_a
    if "guidellm" in ready:
        guidellm = ready["guidellm"]

        def run_g(c: Case, url: str, work: Path, core: int | None) -> ToolRun:
            return run_guidellm(guidellm, c, url, work, core, hf_home, str(tokenizer_dir))

        out["GuideLLM"] = run_g
    return out


def measure(case: Case, run: Client, name: str, scratch: Path) -> Measured:
    """One client on one case, against its own fresh simulator."""
    sim_core, client_core = cores()
    work = Path(tempfile.mkdtemp(prefix=f"{name}-c{case.concurrency}-", dir=scratch))
    box = prepare_sandbox(scratch / "sandbox")
    sim = Sim(box, case, sim_core, work / "sim.log")
    try:
        sim.wait_ready()
        result = run(case, sim.url, work, client_core)
    finally:
        raw = sim.stop()
    print(f"  {name:8} {case.label}: {_brief(result)}", flush=True)
    return Measured(case, result, truth_of(raw, case))


def _brief(run: ToolRun) -> str:
    if run.error:
        return "failed: " + run.error[:160]
    return f"{run.tok_s or 0:,.0f} tok/s, TPOT {run.tpot_ms or 0:.2f} ms, {run.wall_s or 0:.0f} s"


def row(m: Measured) -> list[str | float | int | None]:
    run, truth, c = m.run, m.truth, m.case
    tags = ", ".join(t for t, on in (("ladder", c.ladder), ("added", c.added)) if on)
    load = c.label + (f" ({tags})" if tags else "")
    if run.error is not None:
        return [
            load,
            run.tool,
            None,
            None,
            c.offered_tok_s,
            None,
            None,
            None,
            None,
            "failed (see notes)",
        ]
    cpu = run.cpu_s / truth.output_tokens * 1000 if run.cpu_s and truth.output_tokens else None
    lag = (run.lag or "–") + (f"; marked failed: {run.flagged}" if run.flagged else "")
    return [
        load,
        run.tool,
        run.tok_s,
        truth.tok_s,
        c.offered_tok_s,
        error_pct(run.tpot_ms, truth.tpot_ms),
        error_pct(run.itl_chunk_ms, truth.itl_chunk_ms),
        run.ttft_ms - truth.ttft_ms if run.ttft_ms is not None and truth.ttft_ms else None,
        cpu,
        lag,
    ]


def shapes(cases: list[Case]) -> list[list[Case]]:
    """The cases by shape (mode and concurrency), in their first case's order."""
    out: dict[tuple[str, int], list[Case]] = {}
    for c in cases:
        out.setdefault((c.mode, c.concurrency), []).append(c)
    return list(out.values())


def run_shape(
    base: list[Case], run_with: dict[str, Client], scratch: Path, added: int
) -> list[Measured]:
    """The shape's base rungs by every client, then up to ``added`` rungs more where orch's ok
    region ends (the ladder's by every client, others' by orch), by offered rate."""
    out = [measure(c, run, name, scratch) for c in base for name, run in run_with.items()]
    if (base[0].mode, base[0].concurrency) in EXTENDED:
        for _ in range(added):
            ok_at = {m.case.step_ms: m.ok for m in out if m.run.tool == "orch"}
            step = next_step(ok_at)
            if step is None or step in ok_at:
                break
            c = rung(base[0], step)
            who = run_with if c.ladder else {"orch": run_with["orch"]}
            out += [measure(c, run, name, scratch) for name, run in who.items()]
    return sorted(out, key=lambda m: m.case.offered_tok_s)  # stable: tools keep their order


def notes(
    peers: list[Peer], measured: list[Measured], missing: list[str], smoke: bool
) -> list[str]:
    versions = ", ".join(
        f"{p.name} {p.version}" if p.error is None else f"{p.name}: not run ({p.error})"
        for p in peers
    )
    out = [
        "- Closed loops against the engine simulator with a fixed step and tokens per chunk; "
        "each client and each load point on a fresh simulator; the simulator pinned to one "
        "core, the client to the other. Truth: the simulator's own record of every request "
        "(module docstring of `benchmarks/client.py`). Errors are signed: client - truth.",
        "- Peers: " + (versions or "none (smoke run: orch only)") + ". AIPerf with "
        "`--use-server-token-count --workers-max 1`; GuideLLM with 1 worker process "
        "(`GUIDELLM__MAX_WORKER_PROCESSES=1`); both offline with a word-level tokenizer that "
        "counts the simulator's tokens exactly. GuideLLM reports no per-chunk ITL; its "
        "'inter token latency' is the TPOT compared here (its own TPOT includes the TTFT).",
        "- Client CPU includes each client's start-up (imports, worker processes): small "
        "runs overstate it. The client lag column is each tool's own measure: orch's send "
        "lag and event-loop delay p99, AIPerf's credit-to-start p99, GuideLLM's mean delay "
        "of a request's start against its target.",
        "- Targets take no figure from a rung orch marked failed (client saturated: a user "
        "gets only the failure); capacity takes a rung only when its tok/s and TPOT errors are "
        f"within orch's {BAR_PCT:g}% accuracy bar (`ACCURACY_BAR`, "
        "`orchestrator/results/validity.py`), orch's and the peers' alike. '(added)' rungs "
        "were chosen while running, from orch's verdicts at the shape's rungs before "
        "(`benchmarks/client_ladder.py`); 1 stream is not extended.",
        "- The machine is shared and noisy: re-run on a quiet machine before trusting a figure.",
    ]
    out += [f"- {m}." for m in missing if not smoke]
    for m in measured:
        if m.run.error:
            out.append(f"- {m.run.tool} at {m.case.label}: {m.run.error}")
    return out


def main() -> None:
    args = arguments(__doc__ or "", "orch only, 1 and 4 streams, a few seconds, no peers", rungs=3)
    sim_core, _ = cores()
    if sim_core is not None:
        os.sched_setaffinity(0, {sim_core})  # this process waits on the simulator's core
    hf_home = CACHE / "hf"
    tokenizer_dir = build_tokenizer(hf_home)
    peers = [] if args.smoke else [ensure_peer("aiperf"), ensure_peer("guidellm")]
    run_with = clients(peers, hf_home, tokenizer_dir)
    measured: list[Measured] = []
    scratch = Path(tempfile.mkdtemp(prefix="orch-bench-client-"))
    try:
        for base in shapes(SMOKE if args.smoke else FULL):
            measured += run_shape(base, run_with, scratch, args.rungs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found, missing = targets(measured)
    bench = Bench(
        name="client",
        title="Client accuracy and capacity against AIPerf and GuideLLM",
        columns=COLUMNS,
        rows=[row(m) for m in measured],
        targets=found,
        notes=notes(peers, measured, missing, args.smoke),
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
