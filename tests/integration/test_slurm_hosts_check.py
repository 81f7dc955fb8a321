"""`orch hosts check` on Slurm clusters: the CLI, a real sshd as the login node, a real Slurm.

The login node is an ordinary sshd whose sessions find the private test cluster through
``SLURM_CONF``; orch reaches it like any host and runs sinfo and ``sbatch --test-only`` there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.fixtures.cli import orch_in_process
from tests.fixtures.slurm import SlurmCluster
from tests.fixtures.slurm_login import cluster_entry, write_cluster_inventory
from tests.fixtures.sshd import SshdFactory, SshdHost

GPU_PARTITION = {"name": "gpu", "default": True, "state": "up", "nodes": 1, "gres": ["gpu:a6000:2"]}


def write_inventory(
    tmp_path: Path, factory: SshdFactory, clusters: dict[str, dict[str, object]]
) -> list[str]:
    """The hosts.yaml (clusters only) and the arguments of `orch hosts check` that use it."""
    return ["hosts", "check", *write_cluster_inventory(tmp_path, factory, clusters)]


def test_a_cluster_reports_its_slurm_partitions_and_that_it_can_submit(
    login: SshdHost, sshd_factory: SshdFactory, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    args = write_inventory(tmp_path, sshd_factory, {"hpc": cluster_entry(login)})

    result = orch_in_process(*args, "--json", cwd=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["hosts"] == []
    (hpc,) = report["clusters"]
    message = hpc.pop("submit_message")
    version = hpc.pop("slurm_version")
    assert hpc == {
        "name": "hpc",
        "reachable": True,
        "error": None,
        "hint": None,
        "partitions": [GPU_PARTITION],
        "can_submit": True,
        "problems": [],
        "ok": True,
    }
    assert re.fullmatch(r"22\.05\.\d+", version), version
    assert re.fullmatch(
        rf"Job \d+ to start at \S+ using \d+ processors on nodes {slurm_cluster.node} "
        r"in partition gpu",
        message,
    ), message
    # the fixed job script was pushed, as for a real job; --test-only queued nothing
    assert (login.workdir / "orch-job.sh").read_text() == '#!/bin/sh\nexec "$@"\n'
    assert slurm_cluster.squeue_jobs() == []

    table = orch_in_process(*args, cwd=tmp_path)
    assert table.returncode == 0, table.stdout + table.stderr
    row = next(line for line in table.stdout.splitlines() if "hpc" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells == ["hpc", "reachable", version, "gpu* up, 1 node, gpu:a6000:2", "yes", "ok"]


def test_a_wrong_partition_or_gres_fails_the_check_and_says_why(
    login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    clusters = {
        "hpc": cluster_entry(login),
        "wrong-partition": cluster_entry(login, partition="cpu"),
        "wrong-gres": cluster_entry(login, gres="h100"),
    }
    args = write_inventory(tmp_path, sshd_factory, clusters)

    result = orch_in_process(*args, "--json", cwd=tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    reports = {c["name"]: c for c in json.loads(result.stdout)["clusters"]}
    assert list(reports) == ["hpc", "wrong-partition", "wrong-gres"]
    assert (reports["hpc"]["ok"], reports["hpc"]["problems"]) == (True, [])
    wrong = reports["wrong-partition"]
    assert (wrong["reachable"], wrong["error"], wrong["can_submit"], wrong["ok"]) == (
        True,
        None,
        False,
        False,
    )
    assert wrong["partitions"] == [GPU_PARTITION]
    assert wrong["problems"] == [
        "partition 'cpu' does not exist; partitions: gpu",
        "cannot submit: Invalid partition name specified",
    ]
    assert reports["wrong-gres"]["problems"] == [
        "partition 'gpu' has no node with gpu:h100:2 (its nodes offer gpu:a6000:2)",
        "cannot submit: Requested node configuration is not available",
    ]

    table = orch_in_process(*args, cwd=tmp_path)
    assert table.returncode == 1
    assert "partition 'cpu' does not exist; partitions: gpu" in table.stdout

    only = orch_in_process(*args, "--json", "--only", "hpc", cwd=tmp_path)
    assert only.returncode == 0, only.stdout + only.stderr
    assert [c["name"] for c in json.loads(only.stdout)["clusters"]] == ["hpc"]


def test_an_unreachable_login_node_fails_the_cluster(
    login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    entry = cluster_entry(login)
    login.stop()
    args = write_inventory(tmp_path, sshd_factory, {"hpc": entry})

    result = orch_in_process(*args, "--json", cwd=tmp_path)

    assert result.returncode == 1
    (hpc,) = json.loads(result.stdout)["clusters"]
    assert (hpc["reachable"], hpc["slurm_version"], hpc["can_submit"]) == (False, None, None)
    assert f"connection refused by 127.0.0.1:{login.port}" in hpc["error"]
    assert hpc["hint"]
