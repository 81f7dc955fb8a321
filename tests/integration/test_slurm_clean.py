"""`orch clean` on a Slurm cluster: the CLI, a real sshd as the login node, a real Slurm. The
job folders in the shared workdir whose jobs have left the queue go; the folder of a job still
in the queue stays whatever its records say (its engine runs on a node, where the login node's
processes cannot tell). Waits on states squeue reports, never on time.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.config import load_inventory
from orchestrator.slurm.allocation import submit
from orchestrator.slurm.jobs import AllocationRequest
from tests.fixtures.cli import orch_in_process
from tests.fixtures.leftruns import finished_run
from tests.fixtures.slurm import SlurmCluster
from tests.fixtures.slurm_login import cluster_entry, write_cluster_inventory
from tests.fixtures.sshd import SshdFactory, SshdHost

pytestmark = pytest.mark.integration

DAY = 86400.0


def finished_job(workdir: Path, run_id: str, *, ended_at: float) -> Path:
    """``jobs/<id>/`` as a run on the cluster leaves it: the run's records, ended."""
    job = workdir / "jobs" / run_id
    finished_run(job / "runs", run_id, ended_at=ended_at)
    return job


def test_clean_removes_finished_job_folders_and_spares_a_queued_jobs(
    login: SshdHost, sshd_factory: SshdFactory, slurm: SlurmCluster, tmp_path: Path
) -> None:
    options = write_cluster_inventory(tmp_path, sshd_factory, {"hpc": cluster_entry(login)})
    workdir = login.workdir
    now = time.time()
    done = finished_job(workdir, "r-done", ended_at=now - 2 * DAY)
    queued = finished_job(workdir, "r-queued", ended_at=now - 2 * DAY)
    cluster = load_inventory(options[1]).clusters["hpc"]

    async def submit_queued() -> int:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(cluster.login)
            request = AllocationRequest.for_run(
                "r-queued", 2, ("sleep", "600"), workdir=str(workdir)
            )
            return await submit(conn, cluster, request)

    job_id = asyncio.run(submit_queued())
    try:
        slurm.wait_until(
            lambda: [j.job_id for j in slurm.squeue_jobs()] == [str(job_id)],
            "the queued run's job to be in the queue",
        )

        dry = orch_in_process("clean", *options, "--dry-run", "--json", cwd=tmp_path)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        (entry,) = json.loads(dry.stdout)["hosts"]
        assert entry["host"] == "hpc" and entry["error"] is None
        assert [(p["run_id"], p["removed"]) for p in entry["pruned"]] == [("r-done", False)]
        assert entry["live"] == ["r-queued"]
        assert done.is_dir()

        result = orch_in_process("clean", *options, "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        (entry,) = json.loads(result.stdout)["hosts"]
        (pruned,) = entry["pruned"]
        assert (pruned["run_id"], pruned["removed"], pruned["error"]) == ("r-done", True, None)
        assert pruned["ended_at"] == pytest.approx(now - 2 * DAY)
        assert entry["live"] == ["r-queued"] and entry["kept"] == []
        assert entry["workdir"] == os.path.realpath(workdir)
        assert not done.exists()
        assert (queued / "runs" / "r-queued" / "server.log").is_file()
    finally:
        slurm.run("scancel", str(job_id))
    slurm.wait_until(lambda: slurm.squeue_jobs() == [], "the queued run's job to be cancelled")

    # out of the queue, its folder is a finished run's like any other
    table = orch_in_process("clean", *options, cwd=tmp_path)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "hpc: removed r-queued" in table.stdout
    assert not queued.exists()
    assert sorted(p.name for p in (workdir / "jobs").iterdir() if p.is_dir()) == []
