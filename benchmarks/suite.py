"""The test suite's own time: what `make test` costs a developer and CI, tier by tier.

Runs pytest the way `make pytest` does (two xdist workers, the Makefile's scheduling) and
reads its JUnit report: the wall time against the targets (≤4 min of pytest on 2 cores idle,
the real-engine tier at most 3 more), each tier's summed test time, the slowest modules, and
the CPU the run used (of pytest and every process it waited for; what sshd's or the Slurm
daemons' children used after their parent was killed is not counted).

    python -m benchmarks.suite                # the whole suite, real-engine tier included
    python -m benchmarks.suite --skip-real    # without the real-engine tier
    python -m benchmarks.suite --smoke        # two quick modules, for CI
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import RESULTS, Bench, Target

ROOT = Path(__file__).resolve().parents[1]
PYTEST_S = 240.0  # the issue's: ≤4 min of pytest on 2 cores idle ...
REAL_TIER_S = 180.0  # ... and the real-engine tier at most 3 more once its venv exists
WORKERS = 2
SMOKE_TESTS = ["tests/unit/test_slurm_jobs.py", "tests/unit/test_slurm_facts.py"]
TOP_MODULES = 12


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    code: int
    failed: list[str]  # the tests that failed or errored, by node id
    modules: dict[str, float]  # module -> summed test time (setup, call, teardown), seconds
    tests: Counter[str]  # module -> number of tests


def tier(module: str) -> str:
    """``tests.integration.test_x`` -> ``integration``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else parts[0]


def read_junit(path: Path) -> tuple[dict[str, float], Counter[str], list[str]]:
    """Per module its summed test time and its number of tests; the tests that failed."""
    times: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    failed: list[str] = []
    if not path.is_file():  # pytest died before it wrote one
        return times, counts, failed
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname") or "?"
        times[module] += float(case.get("time") or 0.0)
        counts[module] += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{module}::{case.get('name')}")
    return times, counts, failed


def run_suite(tests: list[str], skip_real: bool) -> Run:
    env = {**os.environ, **({"ORCH_SKIP_REAL_ENGINE": "1"} if skip_real else {})}
    with tempfile.TemporaryDirectory(prefix="orch-bench-suite-") as name:
        junit = Path(name) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-q", "-n", str(WORKERS), "--dist", "loadscope"]
        argv += ["-p", "no:cacheprovider", f"--junitxml={junit}", *tests]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=False)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        times, counts, failed = read_junit(junit)
    return Run(wall, cpu, done.returncode, failed, times, counts)


def bench(run: Run, *, skip_real: bool, smoke: bool) -> Bench:
    tiers: dict[str, float] = defaultdict(float)
    for module, seconds in run.modules.items():
        tiers[tier(module)] += seconds
    rows: list[list[str | float | int | None]] = [
        ["pytest, wall", round(run.wall_s, 1), None],
        ["CPU used (user + system)", round(run.cpu_s, 1), None],
    ]
    for name, seconds in sorted(tiers.items(), key=lambda kv: -kv[1]):
        rows.append([f"tier {name}, summed test time", round(seconds, 1), None])
    slowest = sorted(run.modules.items(), key=lambda kv: -kv[1])[:TOP_MODULES]
    for module, seconds in slowest:
        rows.append([f"`{module}`", round(seconds, 1), run.tests[module]])
    real = tiers.get("real_engine", 0.0)
    limit = PYTEST_S if skip_real else PYTEST_S + REAL_TIER_S
    what = "pytest wall" + ("" if skip_real else ", real-engine tier included")
    targets = [Target(what, run.wall_s, limit, "s")]
    if not skip_real and real:
        targets.append(Target("real-engine tier, summed test time", real, REAL_TIER_S, "s"))
    notes = [
        f"{sum(run.tests.values())} tests passed or skipped on {WORKERS} workers."
        f" The CPU used over {WORKERS} x the wall is {run.cpu_s / (WORKERS * run.wall_s):.0%}:"
        " the rest of the time both workers wait (simulated engine time, sleeps of tests that"
        " watch a process, an engine's start-up on one core).",
    ]
    return Bench(
        name="suite-no-real" if skip_real and not smoke else "suite",
        title="Test suite time" + (" (real-engine tier off)" if skip_real else ""),
        columns=["what", "seconds", "tests"],
        rows=rows,
        targets=[] if smoke else targets,
        notes=notes,
        smoke=smoke,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-real", action="store_true", help="ORCH_SKIP_REAL_ENGINE=1")
    parser.add_argument("--smoke", action="store_true", help=f"only {', '.join(SMOKE_TESTS)}")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run = run_suite(SMOKE_TESTS if args.smoke else [], args.skip_real or args.smoke)
    if run.code != 0:  # a failed suite's time is not the suite's: nothing is written
        failed = "".join(f"\n  {name}" for name in run.failed)
        sys.exit(
            f"pytest failed (exit status {run.code}) after {run.wall_s:.0f} s: not recorded"
            + (f"; failed:{failed}" if failed else "")
        )
    bench(run, skip_real=args.skip_real or args.smoke, smoke=args.smoke).publish(args.out)


if __name__ == "__main__":
    main()
