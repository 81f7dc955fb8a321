"""CLI start-up: what `orch` costs before it does anything, in a new process each time.

Wall and CPU (user + system, of the process) seconds of `orch --help`, `orch run --help` and of
importing what `orch run` runs (``orchestrator.cli.run``), beside Python's own start; the
median of ``--repeats`` runs each. ``--before REV`` also times the code of git revision REV
(its ``orchestrator/`` extracted into a temporary folder), interleaved run by run with this
checkout's so both see the same machine load.

    python -m benchmarks.startup --before d3ae23d
    python -m benchmarks.startup --smoke     # one run each, for CI
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, Bench, Target

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3  # the issue's: `orch --help` in at most 0.3 s
CASES = {  # what is timed -> the interpreter's arguments
    "`python -c pass` (Python's own start)": ["-c", "pass"],
    "`import typer.main, typer.rich_utils` (what typer's help needs)": [
        "-c",
        "import typer.main, typer.rich_utils",
    ],
    "`orch --help`": ["-m", "orchestrator", "--help"],
    "`orch run --help`": ["-m", "orchestrator", "run", "--help"],
    "`import orchestrator.cli.run` (the run path)": ["-c", "import orchestrator.cli.run"],
}


def timed(argv: list[str], code: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``python ARGV`` importing orch from ``code``; a failure ends the
    benchmark. It runs in the folder above ``code``'s package: ``-m`` and ``-c`` put the
    working directory first on the path, so that must not hold another orch."""
    env = {**os.environ, "PYTHONPATH": str(code), "NO_COLOR": "1", "COLUMNS": "120"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"python {' '.join(argv)} failed ({proc.returncode}):\n{stderr[-2000:]!r}")
    return wall, usage.ru_utime + usage.ru_stime


def checkout(rev: str, into: Path) -> Path:
    """``orchestrator/`` as it was at ``rev``, under ``into`` (to put on PYTHONPATH)."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "orchestrator"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into


def measure(
    codes: dict[str, Path], repeats: int
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """code label -> case -> (wall, CPU) per repeat; every case and code takes turns."""
    times: dict[str, dict[str, list[tuple[float, float]]]] = {
        label: {case: [] for case in CASES} for label in codes
    }
    for code in codes.values():  # a first, unmeasured pass: bytecode caches written
        for argv in CASES.values():
            timed(argv, code)
    for _ in range(repeats):
        for case, argv in CASES.items():
            for label, code in codes.items():
                times[label][case].append(timed(argv, code))
    return times


def median(samples: list[tuple[float, float]], which: int) -> float:
    return statistics.median(s[which] for s in samples)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--before", help="git revision to time beside this checkout")
    parser.add_argument("--smoke", action="store_true", help="one run each")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory(prefix="orch-bench-startup-") as name:
        codes = {"after": ROOT}
        if args.before:
            codes = {"before": checkout(args.before, Path(name)), **codes}
        load = os.getloadavg()[0]
        times = measure(codes, repeats)
        load = max(load, os.getloadavg()[0])
    columns = ["what"]
    for label in codes:
        columns += [f"{label} wall s", f"{label} CPU s"]
    rows: list[list[str | float | int | None]] = []
    for case in CASES:
        row: list[str | float | int | None] = [case]
        for label in codes:
            row += [median(times[label][case], 0), median(times[label][case], 1)]
        rows.append(row)
    after = times["after"]
    bench = Bench(
        name="startup",
        title="CLI start-up",
        columns=columns,
        rows=rows,
        targets=[
            Target("`orch --help`, wall", median(after["`orch --help`"], 0), TARGET_S, "s"),
            Target("`orch --help`, CPU", median(after["`orch --help`"], 1), TARGET_S, "s"),
            Target("`orch run --help`, wall", median(after["`orch run --help`"], 0), TARGET_S, "s"),
        ],
        notes=[
            f"Medians of {repeats} runs each, a new process every time (bytecode already "
            "compiled); CPU is the process's user + system time."
            + (f" Before: revision {args.before}." if args.before else ""),
            f"The machine was shared: load average up to {load:.1f} on {os.cpu_count()} cores "
            "(wall over CPU shows how long each process waited for a core).",
        ],
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
