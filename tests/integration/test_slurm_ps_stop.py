"""`orch ps` and `orch stop --all` on a Slurm cluster: the CLI, a real sshd as the login node,
a real Slurm. orch's jobs are those named ``orch-...``; another job of the same user is left
alone. Every step waits on a state squeue reports, never on time.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from pathlib import Path

import pytest

from orchestrator.config import load_inventory
from orchestrator.slurm.allocation import submit
from orchestrator.slurm.jobs import AllocationRequest
from tests.fixtures.cli import orch_in_process
from tests.fixtures.slurm import SlurmCluster, SqueueJob
from tests.fixtures.slurm_login import cluster_entry, write_cluster_inventory
from tests.fixtures.sshd import SshdFactory, SshdHost

pytestmark = pytest.mark.integration

SLEEP = ("sleep", "600")  # outlives the test; the test cancels every job it submits


def submit_jobs(
    options: list[str], sshd_factory: SshdFactory, requests: list[AllocationRequest]
) -> list[int]:
    """Submit ``requests`` to the inventory's cluster through its login node, in order."""
    cluster = load_inventory(options[1]).clusters["hpc"]

    async def scenario() -> list[int]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(cluster.login)
            return [await submit(conn, cluster, request) for request in requests]

    return asyncio.run(scenario())


def test_ps_lists_and_stop_all_cancels_only_orchs_jobs(
    login: SshdHost, sshd_factory: SshdFactory, slurm: SlurmCluster, tmp_path: Path
) -> None:
    options = write_cluster_inventory(tmp_path, sshd_factory, {"hpc": cluster_entry(login)})
    workdir = str(login.workdir)
    other = AllocationRequest(
        run_id="other",
        gpus=0,
        job_name="someone-else",
        argv=SLEEP,
        output=posixpath.join(workdir, "jobs", "%j.out"),
    )
    first, second, foreign = submit_jobs(
        options,
        sshd_factory,
        [
            AllocationRequest.for_run("r1", 2, SLEEP, workdir=workdir),
            AllocationRequest.for_run("r2", 2, SLEEP, workdir=workdir),
            other,
        ],
    )
    # --exclusive and both GPUs each: the first runs, the others wait for the node
    slurm.wait_until(
        lambda: (
            slurm.squeue_jobs()[:2]
            == [
                SqueueJob(str(first), "RUNNING", "None"),
                SqueueJob(str(second), "PENDING", "Resources"),
            ]
        ),
        "the first orch job to run and the second to wait for the node",
    )

    ps = orch_in_process("ps", *options, "--json", cwd=tmp_path)

    assert ps.returncode == 0, ps.stdout + ps.stderr
    listed = json.loads(ps.stdout)
    times = [job.pop("time") for job in listed["jobs"]]
    assert listed == {
        "servers": [],
        "errors": [],
        "jobs": [
            {
                "cluster": "hpc",
                "job_id": first,
                "name": "orch-r1",
                "state": "RUNNING",
                "reason": None,
                "nodes": [slurm.node],
            },
            {
                "cluster": "hpc",
                "job_id": second,
                "name": "orch-r2",
                "state": "PENDING",
                "reason": "Resources",
                "nodes": [],
            },
        ],
    }
    assert times[1] == "0:00"  # a pending job has used no time

    table = orch_in_process("ps", *options, cwd=tmp_path)
    assert table.returncode == 0, table.stdout + table.stderr
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in table.stdout.splitlines()
        if line.startswith("│ hpc")
    ]
    assert [row[:6] for row in rows] == [
        ["hpc", str(first), "orch-r1", "RUNNING", "-", slurm.node],
        ["hpc", str(second), "orch-r2", "PENDING", "Resources", "-"],
    ]

    stop = orch_in_process("stop", "--all", *options, "--json", cwd=tmp_path)

    assert stop.returncode == 0, stop.stdout + stop.stderr
    cancelled = json.loads(stop.stdout)
    assert [(j["job_id"], j["name"]) for j in cancelled.pop("cancelled")] == [
        (first, "orch-r1"),
        (second, "orch-r2"),
    ]
    assert cancelled == {"stopped": [], "errors": []}
    slurm.wait_until(
        lambda: [job.job_id for job in slurm.squeue_jobs()] == [str(foreign)],
        "only the job not named orch- to be left",
    )

    again = orch_in_process("stop", "--all", *options, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout == "nothing was running\n"
    slurm.run("scancel", str(foreign))


def test_an_unreachable_login_node_fails_ps_and_stop_like_a_host(
    login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    options = write_cluster_inventory(tmp_path, sshd_factory, {"hpc": cluster_entry(login)})
    login.stop()

    for command in (["ps"], ["stop", "--all"]):
        result = orch_in_process(*command, *options, "--json", cwd=tmp_path)

        assert result.returncode == 1, command
        (error,) = json.loads(result.stdout)["errors"]
        assert error["host"] == "hpc"
        assert f"connection refused by 127.0.0.1:{login.port}" in error["error"]
        assert error["hint"]
