"""Join the benchmarks' Markdown into ``benchmarks/results/README.md``, in a fixed order.

    python -m benchmarks.collect

A benchmark not run yet gets a line saying so, so the README never claims a figure that no
file backs. A smoke run (``--smoke``, what CI runs) is never collected: its figures are not
the benchmark's.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.common import RESULTS, replace_file

# name -> what it measures, in the order the README shows them
BENCHMARKS = {
    "client": "Client accuracy and capacity against AIPerf and GuideLLM",
    "gpu_check": "GPU telemetry on a real GPU",
    "fanout": "Fan-out of `orch hosts check` against ssh and Ansible",
    "logpath": "Log path: lines per second and delay, host to parsed event",
    "nightly": "Nightly verdict: detection on synthetic histories",
    "overhead": "Overhead of a run around its workload",
    "reports": "Reports over 1,000 runs",
    "saturation": "Client saturation: the detector against the simulator's truth",
    "startup": "CLI start-up",
    "suite": "Test suite time",
    "suite-no-real": "Test suite time (real-engine tier off)",
}
HEAD = """\
# orch's benchmarks of itself

Each table comes from one command (`make bench` runs them all), on the machine it names; the
JSON file of the same name beside this one holds every figure. Re-run a benchmark to refresh
its table, then `python -m benchmarks.collect` to rebuild this file.
"""


def collect(results: Path = RESULTS) -> str:
    parts = [HEAD]
    for name, what in BENCHMARKS.items():
        md, data = results / f"{name}.md", results / f"{name}.json"
        if md.is_file() and data.is_file() and not json.loads(data.read_text()).get("smoke"):
            parts.append(md.read_text(encoding="utf-8"))
            notes = results / f"{name}.notes.md"  # what was found and fixed, by hand
            if notes.is_file():
                parts.append(notes.read_text(encoding="utf-8"))
        else:
            parts.append(f"## {what}\n\nNot measured yet.\n")
    return "\n".join(parts)


def main() -> None:
    path = replace_file(RESULTS / "README.md", collect())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
