"""The overhead of a run around its workload: what `orch run` costs beyond the requests.

On an embedded host whose simulator loads at once (``ORCH_SIM_LOAD_S=0``), with no warm-up:

- first run: the wall time of `orch run` (a new process: imports, connect, push, probe, doctor,
  launch, readiness, measure, stop, results) minus the measurement's own window
  (``summary.json``'s ``measure_s``);
- each further load point on a running server: a five-point sweep against a one-point run, the
  difference in overhead divided by the four extra points;
- the agent re-pushed: `orch hosts check --json` after the runs reports the bytes it had to push
  (the agent is already there: 0 expected).

Each figure is the median of ``--repeats`` runs.

    python -m benchmarks.overhead
    python -m benchmarks.overhead --smoke   # one repeat of 1 and 2 points, for CI
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import Bench, Target, arguments, embedded_host, free_port, orch

POINTS = [1, 2, 3, 4, 5]
SATURATED = "client_saturated"


def playbook(path: Path, concurrency: int | list[int], port: int) -> Path:
    workload = {
        "prompts": "builtin:math",
        "num_prompts": 16,  # one request read late is then 6%, not 12.5% (the 10% bar)
        "concurrency": concurrency,
        "max_tokens": 32,
        "warmup": 0,
    }
    book = {
        "name": path.stem,
        "hosts": ["sim"],
        "defaults": {"engine": "vllm", "model": "Qwen/Qwen3-8B", "workload": workload},
        "runs": [{"name": "plain", "port": port}],
    }
    path.write_text(yaml.safe_dump(book, sort_keys=False))
    return path


def timed_run(book: Path, hosts: Path, results: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds of `orch run`, seconds its measurements' windows took together)."""
    started = time.perf_counter()
    args = ["run", str(book), "--hosts", str(hosts), "--results", str(results)]
    done = orch(args, env, allowed=(0, 1))
    wall = time.perf_counter() - started
    folder = max(results.iterdir())
    summaries = [json.loads(p.read_text()) for p in folder.rglob("summary.json")]
    # what is timed here is orch around the requests: a point whose client fell behind (a busy
    # machine) was orchestrated all the same; any other failure ends the benchmark
    other = [s["error"] for s in summaries if s.get("error") and s["error"]["kind"] != SATURATED]
    if other or (done.returncode and not summaries):
        raise SystemExit(f"orch run failed ({done.returncode}): {other}\n{done.stderr[-2000:]}")
    return wall, sum(s["times"]["measure_s"] or 0.0 for s in summaries)


def pushed_bytes(hosts: Path, env: dict[str, str]) -> int:
    done = orch(["hosts", "check", "--hosts", str(hosts), "--json"], env)
    return sum(int(h.get("agent_bytes_pushed", 0)) for h in json.loads(done.stdout)["hosts"])


def main() -> None:
    args = arguments(__doc__ or "", "one repeat of 1 and 2 points", repeats=5)
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory(prefix="orch-bench-overhead-") as name:
        tmp = Path(name)
        env, hosts = embedded_host(tmp)
        one = playbook(tmp / "one.yaml", 1, free_port())
        points = POINTS[:2] if args.smoke else POINTS
        sweep = playbook(tmp / "sweep.yaml", points, free_port())
        singles, sweeps = [], []
        for i in range(repeats):
            singles.append(timed_run(one, hosts, tmp / f"r1-{i}", env))
            sweeps.append(timed_run(sweep, hosts, tmp / f"r5-{i}", env))
        again = pushed_bytes(hosts, env)
    first = statistics.median(w - m for w, m in singles)
    per_point = statistics.median(
        ((w5 - m5) - (w1 - m1)) / (len(points) - 1)
        for (w1, m1), (w5, m5) in zip(singles, sweeps, strict=True)
    )
    bench = Bench(
        name="overhead",
        title="Overhead of a run around its workload",
        columns=["what", "wall s", "workload s", "overhead s"],
        rows=[
            [
                "`orch run`, one load point (new process)",
                statistics.median(w for w, _ in singles),
                statistics.median(m for _, m in singles),
                first,
            ],
            [
                f"`orch run`, a {len(points)}-point sweep on one server",
                statistics.median(w for w, _ in sweeps),
                statistics.median(m for _, m in sweeps),
                statistics.median(w - m for w, m in sweeps),
            ],
        ],  # fmt: skip
        targets=[
            Target("overhead of a first run", first, 1.5, "s"),
            Target("overhead of each further load point", per_point, 0.2, "s"),
            Target("agent bytes re-pushed on the next command", float(again), 0.0, "B"),
        ],
        notes=[
            f"Medians of {repeats} runs; the workload is 16 requests per point (c=1..{len(points)}, 32 "
            "tokens) on an embedded host whose simulator loads at once. The first run's "
            "overhead includes starting Python and importing orch in a new process."
        ],
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
