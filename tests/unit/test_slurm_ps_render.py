"""How `orch ps` and `orch stop` show a cluster's jobs and a cluster that could not be asked."""

from __future__ import annotations

from rich.console import Console

from orchestrator.backends.reports import ClusterJobs, HostServers, PsReport, StopReport
from orchestrator.cli.servers import host_errors, job_json, jobs_table, ps_json
from orchestrator.slurm.jobs import JobState
from tests.fixtures.cli import WIDTH

RUNNING = JobState(7, "orch-r1", "RUNNING", None, ("node1",), "1:02", "me")
PENDING = JobState(8, "orch-r2", "PENDING", "Resources", (), "0:00", "me")


def rows(clusters: list[ClusterJobs]) -> list[list[str]]:
    console = Console(width=WIDTH, record=True, color_system=None)
    console.print(jobs_table(clusters))
    text = console.export_text()
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.startswith("│") and "cluster" not in line
    ]


def test_the_jobs_table_has_one_row_per_job_and_one_per_failed_cluster() -> None:
    clusters = [
        ClusterJobs("hpc", jobs=[RUNNING, PENDING]),
        ClusterJobs("far", error="connection refused", hint="is it up?"),
    ]
    assert rows(clusters) == [
        ["hpc", "7", "orch-r1", "RUNNING", "-", "node1", "1:02"],
        ["hpc", "8", "orch-r2", "PENDING", "Resources", "-", "0:00"],
        ["far", "-", "connection refused", "", "", "", ""],
    ]


def test_a_job_in_json() -> None:
    assert job_json("hpc", RUNNING) == {
        "cluster": "hpc",
        "job_id": 7,
        "name": "orch-r1",
        "state": "RUNNING",
        "reason": None,
        "nodes": ["node1"],
        "time": "1:02",
    }


def test_a_failed_cluster_is_an_error_like_a_host_after_the_hosts() -> None:
    hosts = [HostServers("gpu-1", error="timed out", hint="h1"), HostServers("gpu-2")]
    clusters = [ClusterJobs("hpc", jobs=[RUNNING]), ClusterJobs("far", error="refused")]
    assert host_errors(hosts, clusters) == [
        {"host": "gpu-1", "error": "timed out", "hint": "h1"},
        {"host": "far", "error": "refused", "hint": None},
    ]


def test_ps_json_has_jobs_only_when_clusters_were_asked() -> None:
    assert ps_json([HostServers("gpu-1")]) == {"servers": [], "errors": []}
    assert ps_json([], [ClusterJobs("hpc", jobs=[PENDING])])["jobs"] == [job_json("hpc", PENDING)]


def test_a_failed_cluster_fails_the_report() -> None:
    assert not PsReport([HostServers("gpu-1")], [ClusterJobs("hpc")]).failed
    assert PsReport([HostServers("gpu-1")], [ClusterJobs("hpc", error="refused")]).failed
    stop = StopReport([], None, [ClusterJobs("hpc", jobs=[RUNNING, PENDING]), ClusterJobs("x")])
    assert (stop.failed, stop.cancelled) == (False, [("hpc", RUNNING), ("hpc", PENDING)])
    assert StopReport([], None, [ClusterJobs("x", error="refused")]).failed
