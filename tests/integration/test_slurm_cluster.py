"""The Slurm test cluster itself: what orch's Slurm backend tests will stand on.

A private single-node cluster with two fake GPUs: batch jobs and job steps get
``CUDA_VISIBLE_DEVICES`` for the GPUs they asked for, a third GPU pair waits for ``Resources``
until the first pair is free, scancel empties the queue, and stopping a cluster leaves no
process behind. Jobs wait on files, never on time, so no assertion depends on speed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.procs import alive, pids_with_env
from tests.fixtures.slurm import (
    MARKER,
    SlurmCluster,
    SqueueJob,
    pids_holding,
    start_cluster,
    stop_cluster,
)

PRINT_GPUS = '#!/bin/sh\necho "gpus=$CUDA_VISIBLE_DEVICES"\n'
# waits until the file named by $1 exists, so the test decides when the job ends
WAIT_FOR_FILE = (
    '#!/bin/sh\nwhile [ ! -e "$1" ]; do sleep 0.1; done\necho "gpus=$CUDA_VISIBLE_DEVICES"\n'
)


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, with an empty queue before and after each test."""
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def sbatch(cluster: SlurmCluster, *argv: str) -> str:
    done = cluster.run("sbatch", "--parsable", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_cluster_offers_one_idle_node_with_two_gpus(cluster: SlurmCluster) -> None:
    done = cluster.run("sinfo", "--noheader", "--format=%P %N %G %T")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["gpu*", cluster.node, "gpu:a6000:2", "idle"]
    assert cluster.env["SLURM_CONF"] == str(cluster.conf)


def test_a_batch_job_with_two_gpus_sees_both(cluster: SlurmCluster, tmp_path: Path) -> None:
    job = script(tmp_path, "print.sh", PRINT_GPUS)
    out = tmp_path / "out.txt"
    # --wait: sbatch returns when the job has ended, with the job's exit code
    sbatch(cluster, "--wait", "--gres=gpu:2", f"--output={out}", str(job))
    assert out.read_text() == "gpus=0,1\n"


def test_srun_runs_a_step_on_one_gpu(cluster: SlurmCluster) -> None:
    done = cluster.run("srun", "--gres=gpu:1", "sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"')
    assert (done.returncode, done.stdout) == (0, "gpus=0\n"), done.stderr


def test_a_second_gpu_pair_waits_for_resources_then_runs(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    job = script(tmp_path, "wait.sh", WAIT_FOR_FILE)
    go_first, go_second = tmp_path / "go-first", tmp_path / "go-second"
    first = sbatch(
        cluster, "--gres=gpu:2", f"--output={tmp_path}/first.out", str(job), str(go_first)
    )
    second = sbatch(
        cluster, "--gres=gpu:2", f"--output={tmp_path}/second.out", str(job), str(go_second)
    )
    running_and_waiting = [
        SqueueJob(first, "RUNNING", "None"),
        SqueueJob(second, "PENDING", "Resources"),
    ]
    cluster.wait_until(
        lambda: cluster.squeue_jobs() == running_and_waiting, "the second job to wait"
    )

    go_first.touch()
    cluster.wait_until(
        lambda: cluster.squeue_jobs() == [SqueueJob(second, "RUNNING", "None")],
        "the second job to run alone",
    )
    assert (tmp_path / "first.out").read_text() == "gpus=0,1\n"

    assert cluster.run("scancel", second).returncode == 0
    cluster.wait_until(lambda: not cluster.squeue_jobs(), "scancel to empty the queue")
    assert cluster.squeue_jobs() == []


def test_stopping_a_cluster_leaves_no_process(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """A second, throw-away cluster (they coexist) stopped while a job runs: its daemons, the
    job step and the job's processes are all gone."""
    root = Path(tempfile.mkdtemp(prefix="orch-slurm-"))
    root.chmod(0o755)
    other = start_cluster(root)
    try:
        job = script(tmp_path, "wait.sh", WAIT_FOR_FILE)
        never = tmp_path / "never"
        sbatch(other, f"--output={tmp_path}/out", str(job), str(never))
        other.wait_until(lambda: [j.state for j in other.squeue_jobs()] == ["RUNNING"], "a job")
        daemons = [proc.pid for proc in other.daemons.values()]
        assert len(daemons) == 3 and all(alive(pid) for pid in daemons)
        assert pids_with_env(MARKER, str(root))  # the job's shell carries the marker
        stop_cluster(other)
        assert [pid for pid in daemons if alive(pid)] == []
        assert pids_with_env(MARKER, str(root)) == []
        assert pids_holding(root) == []
    finally:
        stop_cluster(other)
        shutil.rmtree(root, ignore_errors=True)
    # the session's cluster was not disturbed
    done = slurm_cluster.run("sinfo", "--noheader", "--format=%T")
    assert done.stdout == "idle\n"
