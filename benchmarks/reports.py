"""Reports over many runs: `orch report` and `orchestrator.results.load()` over 1,000 runs.

Set-up: one real `orch run` on an embedded host (the simulator, loading at once) leaves a
results folder with every file a run writes (summary.json, manifest.json, requests.jsonl,
events.jsonl, server.log). Its runs are copied into playbook folders of 20 runs each until there
are ``--runs`` runs, each renamed (its summary says which run it is), so both readers see what
a year of nightly results looks like. Each reader then runs in a process of its own, timed, its
peak memory taken from the kernel (``wait4``'s ``ru_maxrss``).

    python -m benchmarks.reports            # 1,000 runs
    python -m benchmarks.reports --smoke    # 4 runs: CI checks that it still works
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.common import Bench, arguments, embedded_host, orch

RUNS_PER_FOLDER = 20
LOAD = (
    "import json,sys,time\n"
    "t=time.perf_counter()\n"
    "from orchestrator import results\n"
    "frame=results.load(sys.argv[1])\n"
    "print(json.dumps({'rows': len(frame), 'seconds': time.perf_counter()-t}))\n"
)


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_mib: float
    output: str


def measure(argv: list[str], env: dict[str, str]) -> Measured:
    """Wall time and peak resident memory of one process running ``argv`` (reaped with
    ``wait4``, so its own peak, not that of an earlier child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(
                f"{argv[:4]} failed ({proc.returncode}):\n{err.read().decode()[-3000:]}"
            )
        return Measured(seconds, usage.ru_maxrss / 1024, out.read().decode())


def template(tmp: Path, prompts: int = 64) -> Path:
    """A real results folder: two runs (vLLM with DFlash, SGLang with MTP) on one embedded host."""
    env, hosts = embedded_host(tmp)
    workload = {
        "prompts": "builtin:mixed",
        "num_prompts": prompts,
        "concurrency": 8,
        "max_tokens": 128,
        "warmup": 2,
    }
    book = tmp / "template.yaml"
    runs = [
        {
            "name": "vllm-dflash",
            "engine": "vllm",
            "port": 38391,
            "speculative": {
                "method": "dflash",
                "draft_model": "z-lab/Qwen3.6-27B-DFlash",
                "num_draft_tokens": 15,
            },
            "extra_args": ["--attention-backend", "flash_attn"],
            "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
        },
        {
            "name": "sglang-mtp",
            "engine": "sglang",
            "port": 38392,
            "speculative": {"method": "mtp", "num_draft_tokens": 3},
        },
    ]
    book.write_text(
        yaml.safe_dump(
            {
                "name": "template",
                "hosts": ["sim"],
                "defaults": {
                    "model": "Qwen/Qwen3.6-27B",
                    "tensor_parallel": 2,
                    "workload": workload,
                },
                "runs": runs,
            },
            sort_keys=False,
        )
    )
    out = tmp / "template-results"
    orch(["run", str(book), "--hosts", str(hosts), "--results", str(out)], env)
    (folder,) = out.iterdir()
    return folder


def replicate(folder: Path, root: Path, runs: int) -> int:
    """``runs`` copies of the template's runs under ``root``, 20 to a playbook folder."""
    sources = sorted(p.parent for p in folder.glob("*/summary.json"))
    made = 0
    for batch in range((runs + RUNS_PER_FOLDER - 1) // RUNS_PER_FOLDER):
        dest = root / f"20260101T{batch:06d}Z-nightly"
        dest.mkdir(parents=True)
        for order in range(min(RUNS_PER_FOLDER, runs - made)):
            source = sources[order % len(sources)]
            name = f"{source.name.split('_')[0]}-{order}"
            target = dest / f"{name}_sim"
            shutil.copytree(source, target)
            summary = json.loads((target / "summary.json").read_text())
            summary["run"].update(name=name, key=f"{name}@sim", folder=target.name, order=order)
            (target / "summary.json").write_text(json.dumps(summary))
            made += 1
    return made


def main() -> None:
    args = arguments(__doc__ or "", "4 runs, to check it works", runs=1000)
    runs = 4 if args.smoke else args.runs
    prompts = 8 if args.smoke else 64
    with tempfile.TemporaryDirectory(prefix="orch-bench-reports-") as name:
        tmp = Path(name)
        env, _hosts = embedded_host(tmp)
        root = tmp / "results"
        made = replicate(template(tmp, prompts), root, runs)
        rows_per_run = prompts + 2  # measured + warm-up
        size_mib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20
        load = measure([sys.executable, "-c", LOAD, str(root)], env)
        rows = json.loads(load.output)["rows"]
        folders = sorted(str(p) for p in root.iterdir())
        report = measure(
            [sys.executable, "-m", "orchestrator", "report", *folders, "--out", str(tmp / "r")],
            env,
        )
    bench = Bench(
        name="reports",
        title=f"Reports over {made:,} runs",
        columns=["reader", "runs", "rows", "seconds", "peak MiB"],
        rows=[
            [
                "`orchestrator.results.load()` (new process, imports included)",
                made,
                rows,
                load.seconds,
                load.peak_mib,
            ],
            [
                f"`orch report` ({len(folders)} folders, HTML + Markdown)",
                made,
                None,
                report.seconds,
                report.peak_mib,
            ],
        ],
        notes=[
            f"{made:,} runs in {len(folders)} results folders, {size_mib:,.0f} MiB of files "
            f"(each run: summary.json, manifest.json, requests.jsonl with {rows_per_run} requests, "
            "events.jsonl, server.log), copied from one real `orch run` on the simulator."
        ],
        smoke=args.smoke,
    )
    bench.publish(args.out)


if __name__ == "__main__":
    main()
