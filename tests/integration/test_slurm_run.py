"""`orch run` on a Slurm cluster end to end (issue 12): the real CLI, a real login sshd, a real
single-node Slurm with two fake GPUs, and the engine simulator as the engines.

- the demo playbook, sent to the cluster by changing its runs' ``hosts:``, gives the figures
  it gives on embedded hosts, and its runs (2 GPUs each on a 2-GPU node) are submitted at once
  and serialised by Slurm (the second waits PENDING (Resources)), not by orch;
- a run whose allocation never starts is cancelled at the pending limit and recorded as not
  run with Slurm's reason;
- Ctrl-C while an allocation is pending, and while a run measures, leaves no job in the queue
  and no engine process.

Every wait is for an event (a line orch prints, a state squeue reports); the bounds only end a
test that would otherwise hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.results.model import RunResult
from tests.fixtures.slurm import SlurmCluster
from tests.fixtures.slurm_login import cluster_entry
from tests.fixtures.sshd import SshdFactory, SshdHost, free_port, sshd_binary
from tests.fixtures.truth import lag_s, timing_tolerance

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 300.0
WAIT_S = 120.0
SIM_ENV = {"ORCH_SIM_LOAD_S": "0.2", "ORCH_SIM_SPEED": "4"}
CLUSTER = "hpc"
DEMO_RUNS = ("sglang-mtp", "vllm-dflash", "vllm-dflash-broken")


# -- files and processes ----------------------------------------------------------------------


def inventory(tmp: Path, factory: SshdFactory, login: SshdHost, *, embedded: bool) -> list[str]:
    """hosts.yaml with the cluster (and the demo's embedded hosts, same simulator settings);
    the options that use it."""
    hosts = {
        name: {"transport": "embedded", "gpus": "2 x RTX A6000", "tags": ["sim"], "env": SIM_ENV}
        for name in ("sim-a6000-1", "sim-a6000-2")
    }
    doc: dict[str, Any] = {
        "ssh_config": str(factory.ssh_config_path),
        "clusters": {CLUSTER: cluster_entry(login, env=SIM_ENV)},
    }
    if embedded:
        doc["hosts"] = hosts
    path = tmp / "hosts.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return ["--hosts", str(path), "--known-hosts", str(factory.write_known_hosts())]


def demo_copy(dest: Path, *, hosts: list[str] | None) -> Path:
    """The demo playbook with free ports; ``hosts`` replaces every run's own ``hosts:``."""
    book = yaml.safe_load((ROOT / "playbooks" / "demo.yaml").read_text())
    ports: dict[int, int] = {}
    for run in book["runs"]:
        run["port"] = ports.setdefault(run["port"], free_port())  # runs sharing one still do
        if hosts is not None:
            run["hosts"] = hosts
    if hosts is not None:
        book["hosts"] = hosts
    dest.write_text(yaml.safe_dump(book, sort_keys=False))
    return dest


def small_playbook(dest: Path, *, duration_s: float | None = None, **top: object) -> Path:
    workload: dict[str, object] = {
        "prompts": "builtin:math",
        "num_prompts": 1000 if duration_s else 6,
        "concurrency": 2,
        "max_tokens": 48,
        "warmup": 1,
    }
    if duration_s:
        workload["duration_s"] = duration_s
    book = {
        "name": "slurm",
        "hosts": [CLUSTER],
        "defaults": {"engine": "vllm", "model": "Qwen/Qwen3-8B", "workload": workload},
        "runs": [{"name": "plain", "port": free_port()}],
        **top,
    }
    dest.write_text(yaml.safe_dump(book, sort_keys=False))
    return dest


def start_orch(args: list[str], cwd: Path, stderr: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "NO_COLOR": "1", "ORCH_EMBEDDED_ROOT": str(cwd / "embedded")}
    with stderr.open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=CLI_TIMEOUT_S)
    return proc.returncode, out


def wait_for_line(proc: subprocess.Popen[str], stderr: Path, text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while text not in stderr.read_text():
        assert proc.poll() is None, f"orch ended before {text!r}:\n{stderr.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} after {WAIT_S}s:\n{stderr.read_text()}"
        time.sleep(0.1)


def wait_no_processes(login: SshdHost) -> list[str]:
    """The processes started through the login node (engines in jobs included: sbatch and
    srun hand them its environment marker) once they are gone, or what is left."""
    deadline = time.monotonic() + 30.0
    while (left := login.leftover_pids()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{pid} {command_line(pid)}" for pid in left]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"


def settled_queue(slurm: SlurmCluster) -> list[object]:
    """The queue once no job is COMPLETING any more (bounded): what orch left in it."""
    deadline = time.monotonic() + 30.0
    jobs = slurm.squeue_jobs()
    while any(j.state == "COMPLETING" for j in jobs) and time.monotonic() < deadline:
        time.sleep(0.1)
        jobs = slurm.squeue_jobs()
    return list(jobs)


def queue_ends_as(slurm: SlurmCluster, job_ids: list[str]) -> None:
    """Wait until the queue holds ``job_ids`` alone (a cancelled job shows COMPLETING for a
    moment while Slurm cleans up after it)."""
    slurm.wait_until(
        lambda: [j.job_id for j in slurm.squeue_jobs()] == job_ids, f"the queue to be {job_ids}"
    )


def hold_gpus(slurm: SlurmCluster, tmp: Path) -> str:
    """A job (not orch's) holding both GPUs until cancelled; its id once it runs."""
    script = tmp / "hold.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    script.chmod(0o755)
    done = slurm.run(
        "sbatch",
        "--parsable",
        "--job-name=someone-else",
        f"--partition={slurm.partition}",
        f"--gres=gpu:{slurm.gres_type}:{slurm.gpus}",
        f"--output={tmp}/hold-%j.out",
        str(script),
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    slurm.wait_until(
        lambda: any(j.job_id == job_id and j.state == "RUNNING" for j in slurm.squeue_jobs()),
        "the GPU holder running",
    )
    return job_id


def results_of(folder: Path) -> dict[str, RunResult]:
    return {p.parent.name.split("_")[0]: RunResult.load(p) for p in folder.glob("*/summary.json")}


def manifest_of(folder: Path, run: str) -> dict[str, Any]:
    (path,) = folder.glob(f"{run}_*/manifest.json")
    return json.loads(path.read_text())


# -- the demo, on embedded hosts and on the cluster -------------------------------------------


@dataclass
class Demo:
    embedded: dict[str, RunResult]
    cluster: dict[str, RunResult]
    cluster_dir: Path
    cluster_code: int
    embedded_code: int
    progress: str
    left: list[str]
    queue_after: list[object]


@pytest.fixture(scope="module")
def demo(
    tmp_path_factory: pytest.TempPathFactory,
    slurm_cluster: SlurmCluster,
    ssh_client_key: Path,
) -> Iterator[Demo]:
    binary = sshd_binary()
    if binary is None:
        pytest.fail("sshd is missing: run `make test`, which installs openssh-server")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    tmp = tmp_path_factory.mktemp("slurm-demo")
    factory = SshdFactory(tmp / "sshd", ssh_client_key, binary)
    slurm_cluster.cancel_all()
    try:
        login = factory.start("login", env=slurm_cluster.env)
        opts = inventory(tmp, factory, login, embedded=True)
        outcomes = {}
        started = {}
        for where, hosts in (("embedded", None), ("cluster", [CLUSTER])):  # both at once
            book = demo_copy(tmp / f"demo-{where}.yaml", hosts=hosts)
            results = tmp / f"results-{where}"
            stderr = tmp / f"{where}.stderr"
            args = ["run", str(book), *opts, "--results", str(results)]
            started[where] = (start_orch(args, tmp, stderr), results, stderr)
        for where, (proc, results, stderr) in started.items():
            code, _ = finish(proc)
            (folder,) = results.iterdir()
            outcomes[where] = (code, folder, stderr.read_text())
        yield Demo(
            embedded=results_of(outcomes["embedded"][1]),
            cluster=results_of(outcomes["cluster"][1]),
            cluster_dir=outcomes["cluster"][1],
            cluster_code=outcomes["cluster"][0],
            embedded_code=outcomes["embedded"][0],
            progress=outcomes["cluster"][2],
            left=wait_no_processes(login),
            queue_after=settled_queue(slurm_cluster),
        )
    finally:
        factory.close()
        slurm_cluster.cancel_all()


def decode_tolerance(*results: RunResult) -> float:
    """5% between two measurements of the same engine, widened on a busy machine by what
    their clients measured of their own lag over a request's decode time (timing_tolerance)."""
    late, decode_s = 0.0, float("inf")
    for r in results:
        lag = r.loadgen.client_lag if r.loadgen else None
        delay = lag.loop_delay_ms if lag else None
        late = max(late, lag_s(delay.p99 if delay else None, lag.loop_tick_ms if lag else None))
        req = r.requests
        if req is not None and req.tpot_ms.median and req.completed:
            tokens = req.total_output_tokens / req.completed
            decode_s = min(decode_s, req.tpot_ms.median * max(tokens - 1, 1) / 1000)
    return timing_tolerance(0.05, 2 * late, decode_s)  # two clients, each may be late


def test_the_demo_on_the_cluster_gives_the_embedded_figures(demo: Demo) -> None:
    # both collapse the broken drafter on purpose (exit 3), nothing else
    assert demo.embedded_code == demo.cluster_code == 3, demo.progress
    assert sorted(demo.cluster) == sorted(demo.embedded) == sorted(DEMO_RUNS)
    for run in DEMO_RUNS:
        ours, theirs = demo.cluster[run], demo.embedded[run]
        assert ours.error is None and theirs.error is None
        assert ours.requests is not None and theirs.requests is not None
        assert ours.requests.completed == theirs.requests.completed > 0
        assert ours.requests.failed == 0
        assert ours.acceptance is not None and theirs.acceptance is not None
        assert ours.acceptance.client == pytest.approx(theirs.acceptance.client, rel=0.02), run
        rel = decode_tolerance(ours, theirs)
        assert ours.requests.decode_tok_s.median == pytest.approx(
            theirs.requests.decode_tok_s.median, rel=rel
        ), run
        assert ours.requests.tpot_ms.median == pytest.approx(
            theirs.requests.tpot_ms.median, rel=rel
        ), run
    assert demo.cluster["vllm-dflash-broken"].verdict == demo.embedded["vllm-dflash-broken"].verdict


def test_each_run_records_its_job_node_and_gpus(demo: Demo) -> None:
    jobs = set()
    for run in DEMO_RUNS:
        slurm = manifest_of(demo.cluster_dir, run)["slurm"]
        assert slurm["cluster"] == CLUSTER and slurm["partition"] == "gpu"
        assert len(slurm["nodes"]) == 1 and slurm["gpus"] == [0, 1]
        jobs.add(slurm["job_id"])
    assert len(jobs) == 3


def test_runs_needing_all_gpus_are_serialised_by_slurm_not_orch(demo: Demo) -> None:
    """sglang-mtp and vllm-dflash (different ports, 2 GPUs each) are submitted together; Slurm
    keeps the second PENDING (Resources) until the first has given its GPUs back."""
    first = manifest_of(demo.cluster_dir, "sglang-mtp")["slurm"]["job_id"]
    second = manifest_of(demo.cluster_dir, "vllm-dflash")["slurm"]["job_id"]
    assert f"{CLUSTER} vllm-dflash: queued: job {second} PENDING (Resources)" in demo.progress
    assert second == first + 1
    a, b = demo.cluster["sglang-mtp"].times, demo.cluster["vllm-dflash"].times
    assert a.measure_ended_at is not None and b.measure_started_at is not None
    assert b.started_at > a.measure_ended_at  # the second began once the first had ended


def test_the_demo_leaves_no_job_and_no_engine(demo: Demo) -> None:
    assert demo.queue_after == []
    assert demo.left == []


# -- allocations that do not start; Ctrl-C ---------------------------------------------------


def test_a_run_whose_allocation_never_starts_is_recorded_not_run(
    tmp_path: Path, slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory
) -> None:
    holder = hold_gpus(slurm, tmp_path)
    opts = inventory(tmp_path, sshd_factory, login, embedded=False)
    book = small_playbook(tmp_path / "p.yaml", slurm={"pending_timeout_s": 3})
    stderr = tmp_path / "stderr"
    code, out = finish(start_orch(["run", str(book), *opts, "--results", "r"], tmp_path, stderr))
    assert code == 1, stderr.read_text()
    (folder,) = (tmp_path / "r").iterdir()
    (result,) = results_of(folder).values()
    assert result.not_run and result.error is not None
    assert "PENDING (Resources)" in result.error.message and "cancelled" in result.error.message
    assert manifest_of(folder, "plain")["slurm"]["job_id"] is not None
    queue_ends_as(slurm, [holder])


def test_ctrl_c_while_pending_leaves_no_job(
    tmp_path: Path, slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory
) -> None:
    holder = hold_gpus(slurm, tmp_path)
    opts = inventory(tmp_path, sshd_factory, login, embedded=False)
    book = small_playbook(tmp_path / "p.yaml")
    stderr = tmp_path / "stderr"
    proc = start_orch(["run", str(book), *opts, "--results", "r"], tmp_path, stderr)
    try:
        wait_for_line(proc, stderr, "PENDING (Resources)")
        assert len(slurm.squeue_jobs()) == 2  # orch's job waits behind the holder
        proc.send_signal(signal.SIGINT)
        code, _ = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130, stderr.read_text()
    queue_ends_as(slurm, [holder])


@contextlib.contextmanager
def measuring(
    tmp_path: Path, factory: SshdFactory, login: SshdHost
) -> Iterator[tuple[subprocess.Popen[str], list[str], Path]]:
    """`orch run` of a long run on the cluster, once it measures: (process, the inventory
    options, its stderr file); killed on the way out if the test did not end it."""
    opts = inventory(tmp_path, factory, login, embedded=False)
    book = small_playbook(tmp_path / "p.yaml", duration_s=120)
    stderr = tmp_path / "stderr"
    proc = start_orch(["run", str(book), *opts, "--results", "r"], tmp_path, stderr)
    try:
        wait_for_line(proc, stderr, f"{CLUSTER} plain: measuring")
        yield proc, opts, stderr
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_while_measuring_leaves_no_job_and_no_engine(
    tmp_path: Path,
    slurm: SlurmCluster,
    login: SshdHost,
    sshd_factory: SshdFactory,
    sig: signal.Signals,
) -> None:
    with measuring(tmp_path, sshd_factory, login) as (proc, _opts, stderr):
        assert [j.state for j in slurm.squeue_jobs()] == ["RUNNING"]
        proc.send_signal(sig)
        code, _ = finish(proc)
    assert code == 128 + sig, stderr.read_text()
    queue_ends_as(slurm, [])
    assert wait_no_processes(login) == []


def test_orch_stop_run_id_cancels_that_runs_job_and_the_run_says_so(
    tmp_path: Path, slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory
) -> None:
    with measuring(tmp_path, sshd_factory, login) as (proc, opts, stderr):
        (folder,) = (tmp_path / "r").iterdir()
        run_id = manifest_of(folder, "plain")["run_id"]
        stop = subprocess.run(
            [sys.executable, "-m", "orchestrator", "stop", run_id, *opts],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )
        code, _ = finish(proc)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert f"{CLUSTER}: cancelled job " in stop.stdout and f"orch-{run_id}" in stop.stdout
    assert code == 1, stderr.read_text()  # the run failed: its engine went away mid-measure
    (result,) = results_of(folder).values()
    assert result.error is not None and not result.not_run
    queue_ends_as(slurm, [])
    assert wait_no_processes(login) == []


def test_without_a_shared_workdir_everything_travels_through_the_job(
    tmp_path: Path, slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory
) -> None:
    """``shared_fs: false``: the compute node's workdir is a directory the login node's files
    never go to; the agent, the specs and the job's answer travel through srun steps."""
    node_workdir = tmp_path / "node-local"
    entry = cluster_entry(login, env=SIM_ENV, shared_fs=False, workdir=str(node_workdir))
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        yaml.safe_dump(
            {"ssh_config": str(sshd_factory.ssh_config_path), "clusters": {CLUSTER: entry}}
        )
    )
    opts = ["--hosts", str(hosts), "--known-hosts", str(sshd_factory.write_known_hosts())]
    book = small_playbook(tmp_path / "p.yaml")
    stderr = tmp_path / "stderr"
    code, _ = finish(start_orch(["run", str(book), *opts, "--results", "r"], tmp_path, stderr))
    assert code == 0, stderr.read_text()
    (folder,) = (tmp_path / "r").iterdir()
    (result,) = results_of(folder).values()
    assert result.error is None and result.requests is not None
    assert result.requests.completed == 6 and result.requests.failed == 0
    manifest = manifest_of(folder, "plain")
    run_id, job_id = manifest["run_id"], manifest["slurm"]["job_id"]
    jobdir = node_workdir / "jobs" / run_id
    assert (jobdir / "runs" / run_id / "server.log").stat().st_size > 0
    assert [p.name for p in jobdir.glob("agent-*.pyz")]  # the job's own copy
    assert not (jobdir / "launch.json").exists() and not (jobdir / "hold.json").exists()
    assert not (login.workdir / "jobs").exists()  # nothing of the run on the login's side
    output = jobdir / "job.out"  # the job's answer, in the run's private folder on the node
    assert '"event":"launched"' in output.read_text()
    assert output.stat().st_mode & 0o777 == 0o600 and jobdir.stat().st_mode & 0o777 == 0o700
    assert job_id is not None
    queue_ends_as(slurm, [])


def test_runs_on_one_port_share_a_node_at_once_on_ports_of_their_own(
    tmp_path: Path, slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory
) -> None:
    """Two 1-GPU runs planned on one port, allowed two allocations: Slurm gives both the node
    at once (no --exclusive), and the second listens on the next free port."""
    entry = cluster_entry(login, env=SIM_ENV, sbatch_options=[])
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        yaml.safe_dump(
            {"ssh_config": str(sshd_factory.ssh_config_path), "clusters": {CLUSTER: entry}}
        )
    )
    opts = ["--hosts", str(hosts), "--known-hosts", str(sshd_factory.write_known_hosts())]
    port = free_port()
    workload = {
        "prompts": "builtin:math",
        "num_prompts": 1000,
        "duration_s": 6,
        "concurrency": 2,
        "max_tokens": 48,
        "warmup": 1,
    }
    book = tmp_path / "p.yaml"
    book.write_text(
        yaml.safe_dump(
            {
                "name": "two",
                "hosts": [CLUSTER],
                "slurm": {"max_allocations": 2},
                "defaults": {
                    "engine": "vllm",
                    "model": "Qwen/Qwen3-8B",
                    "port": port,
                    "workload": workload,
                },
                "runs": [{"name": "left"}, {"name": "right"}],
            },
            sort_keys=False,
        )
    )
    stderr = tmp_path / "stderr"
    code, _ = finish(start_orch(["run", str(book), *opts, "--results", "r"], tmp_path, stderr))
    assert code == 0, stderr.read_text()
    (folder,) = (tmp_path / "r").iterdir()
    results = results_of(folder)
    left, right = manifest_of(folder, "left"), manifest_of(folder, "right")
    assert left["slurm"]["nodes"] == right["slurm"]["nodes"]
    assert sorted([left["port"], right["port"]]) == [port, port + 1]
    moved = left if left["port"] == port + 1 else right
    assert moved["port_planned"] == port and f"--port {port + 1}" in " ".join(moved["argv"])
    a, b = results["left"].times, results["right"].times
    assert a.measure_started_at is not None and b.measure_started_at is not None
    assert a.measure_ended_at is not None and b.measure_ended_at is not None
    # they measured at the same time: each window began before the other ended
    assert a.measure_started_at < b.measure_ended_at and b.measure_started_at < a.measure_ended_at
    assert all(r.error is None for r in results.values())
    queue_ends_as(slurm, [])
