"""The backend seam (``orchestrator/backends/``): its registry, `orch clean` on a Slurm cluster
(the agent's job-folder prune on real files, the backend with a fake login node), and a check
that commands never ask which kind a place is."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends import base, by_backend, select_places
from orchestrator.backends import slurm as slurm_backend
from orchestrator.backends.reports import CleanReport
from orchestrator.config import load_inventory
from orchestrator.config.hostconfig import ClusterConfig, HostConfig
from orchestrator.errors import HostUnreachable
from orchestrator.remote import prune
from orchestrator.remote.wire import PruneResult, PruneSpec
from orchestrator.slurm.allocation import JobState

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"
DAY = 86400.0

HOSTS_YAML = """
hosts:
  gpu1: {address: 10.0.0.1, gpus: 2}
  gpu2: {address: 10.0.0.2, tags: [big]}
clusters:
  hpc:
    login: {address: login.example}
    partition: gpu
    python: /shared/venv/bin/python
    workdir: /shared/orch
  scratch:
    login: {address: login2.example}
    partition: gpu
    python: /shared/venv/bin/python
    workdir: /local/orch
    shared_fs: false
    tags: [big]
"""


# -- the registry -----------------------------------------------------------------------------


def test_every_registered_backend_loads_under_its_own_kind() -> None:
    assert list(base.REGISTRY) == ["ssh", "slurm"]
    for kind in base.REGISTRY:
        found = base.backend(kind)
        assert found.place.kind == kind
    assert [b.place.noun for b in base.backends()] == ["host", "cluster"]


def test_places_are_selected_and_grouped_backend_by_backend(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    inventory = load_inventory(path)

    places = select_places(inventory, None)
    assert [(p.name, p.backend) for p in places] == [
        ("gpu1", "ssh"),
        ("gpu2", "ssh"),
        ("hpc", "slurm"),
        ("scratch", "slurm"),
    ]
    big = select_places(inventory, ["big"])
    assert [p.name for p in big] == ["gpu2", "scratch"]
    groups = [(b.place.kind, [p.name for p in mine]) for b, mine in by_backend(big)]
    assert groups == [("ssh", ["gpu2"]), ("slurm", ["scratch"])]
    only_hosts = by_backend(select_places(inventory, ["gpu1"]))
    assert [(b.place.kind, [p.name for p in mine]) for b, mine in only_hosts] == [("ssh", ["gpu1"])]
    assert base.backend_of(places[2]).place.front_door
    assert not base.backend_of(places[0]).place.front_door


# -- the agent's prune of a cluster's job folders ---------------------------------------------


def make_job(workdir: Path, run_id: str, *, ended_at: float | None, pid: int = 999999) -> Path:
    """``jobs/<id>/`` as a run on a cluster leaves it: its agent workdir, the run's records in
    ``runs/<id>/`` (written on the node), the launch spec beside them."""
    job = workdir / "jobs" / run_id
    run = job / "runs" / run_id
    run.mkdir(parents=True)
    (job / "launch.json").write_text("{}")
    record = {
        "run_id": run_id, "pid": pid, "pgid": pid, "supervisor_pid": 1,
        "argv": ["vllm", "serve", "m", "--api-key", "sk-secret"], "requested_argv": ["vllm"],
        "env_keys": [], "port": 8000, "cwd": str(run), "log": str(run / "server.log"),
        "started_at": time.time() - 3 * DAY, "start_ticks": None, "boot_id": None,
    }  # fmt: skip
    (run / "server.json").write_text(json.dumps(record))
    (run / "server.log").write_text("x" * 64)
    if ended_at is not None:
        exit_record = {"pid": pid, "returncode": 0, "signal": None, "ended_at": ended_at}
        (run / "exit.json").write_text(json.dumps(exit_record))
    return job


def test_prune_of_job_folders_trusts_the_queue_not_the_login_nodes_processes(
    tmp_path: Path,
) -> None:
    now = time.time()
    # a pid alive here (this process) says nothing: the engine ran on a node
    make_job(tmp_path, "old", ended_at=now - 2 * DAY, pid=os.getpid())
    make_job(tmp_path, "recent", ended_at=now - 60)
    make_job(tmp_path, "queued", ended_at=now - 2 * DAY)  # still in squeue: live
    (tmp_path / "jobs" / "submitted").mkdir()  # no record yet: a job submitted meanwhile
    stale = tmp_path / "jobs" / "never-ran"
    stale.mkdir()
    os.utime(stale, (now - 2 * DAY, now - 2 * DAY))
    raw = {"workdir": str(tmp_path), "keep": 1, "jobs": True, "live": ["queued"]}

    dry = prune.run({**raw, "dry_run": True}, lambda e: None)
    assert sorted(p.run_id for p in dry.pruned) == ["never-ran", "old"]
    assert not any(p.removed for p in dry.pruned)
    assert (tmp_path / "jobs" / "old").is_dir()

    size = sum(f.stat().st_size for f in (tmp_path / "jobs" / "old").rglob("*") if f.is_file())
    result = prune.run(raw, lambda e: None)
    old = next(p for p in result.pruned if p.run_id == "old")
    assert old.removed and old.bytes == size
    assert old.ended_at == pytest.approx(now - 2 * DAY)
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == [
        "queued",
        "recent",
        "submitted",
    ]
    assert result.kept == ["recent"]
    assert result.live == ["queued", "submitted"]


def test_prune_of_a_hosts_runs_spares_the_run_ids_said_to_be_live(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    os.utime(run, (time.time() - DAY, time.time() - DAY))
    result = prune.run({"workdir": str(tmp_path), "live": ["r1"]}, lambda e: None)
    assert result.pruned == [] and result.live == ["r1"]
    assert run.is_dir()


# -- orch clean on a cluster, through its backend, with a fake login node ---------------------


def cluster(name: str, *, shared_fs: bool = True) -> ClusterConfig:
    workdir = "/shared/orch"
    login = HostConfig(name=name, address=f"{name}.example", workdir=workdir)
    return ClusterConfig(
        name=name, login=login, partition="gpu", workdir=workdir, shared_fs=shared_fs
    )


def job_state(job_id: int, name: str) -> JobState:
    return JobState(job_id, name, "RUNNING", None, ("node1",), "1:00", "me")


class FakeAgent:
    """The login node's agent: records each prune spec, answers with an empty result."""

    specs: list[tuple[str, PruneSpec]] = []

    def __init__(self, conn: str, host: HostConfig) -> None:
        self.conn, self.host = conn, host

    async def workdir(self) -> str:
        return f"/real/{self.host.name}"

    async def prune(self, spec: PruneSpec, *, timeout: float | None = None) -> PruneResult:
        FakeAgent.specs.append((self.host.name, spec))
        return PruneResult(
            pruned=[], kept=[], live=list(spec.live), specs_removed=[], dry_run=spec.dry_run
        )


class FakePool:
    async def get(self, host: HostConfig) -> str:
        if host.name == "down":
            raise HostUnreachable(host.name, "connection refused by down.example:22")
        return f"conn:{host.name}"


def test_clean_on_clusters_prunes_job_folders_of_jobs_that_left_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def orch_jobs(conn: str) -> list[JobState]:
        assert conn == "conn:hpc"  # only a shared workdir asks the queue
        return [job_state(7, "orch-r1-abcd"), job_state(8, "orch-r2-ef01")]

    monkeypatch.setattr(slurm_backend, "Agent", FakeAgent)
    monkeypatch.setattr(slurm_backend, "orch_jobs", orch_jobs)
    FakeAgent.specs = []
    places = [
        cluster("hpc").as_host(),
        cluster("scratch", shared_fs=False).as_host(),
        cluster("down").as_host(),
    ]
    backend = base.backend_of(places[0])

    report = asyncio.run(
        backend.clean(FakePool(), places, older_than_s=3600.0, keep=2, dry_run=True)  # type: ignore[arg-type]
    )

    assert isinstance(report, CleanReport) and report.dry_run
    assert FakeAgent.specs == [
        (
            "hpc",
            PruneSpec(
                workdir="/real/hpc",
                older_than_s=3600.0,
                keep=2,
                dry_run=True,
                jobs=True,
                live=["r1-abcd", "r2-ef01"],
            ),
        ),
        ("scratch", PruneSpec(workdir="/real/scratch", older_than_s=3600.0, keep=2, dry_run=True)),
    ]
    hpc, scratch, down = report.hosts
    assert (hpc.host, hpc.note, hpc.error) == ("hpc", None, None)
    assert hpc.result is not None and hpc.result.live == ["r1-abcd", "r2-ef01"]
    assert scratch.note == slurm_backend.NOT_SHARED
    assert down.result is None and down.error == "connection refused by down.example:22"
    assert report.failed


# -- the seam holds ---------------------------------------------------------------------------


def cluster_reads(path: Path) -> list[str]:
    """Every ``X.cluster`` read, but ``c.cluster``: cli/ renders ClusterJobs (a report, in its
    loops named ``c``), which names the cluster it answered for."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "cluster"
        and not (isinstance(node.value, ast.Name) and node.value.id == "c")
    ]


def slurm_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        modules: list[Any] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        out += [
            f"{path.relative_to(ROOT)}:{node.lineno} {m}"
            for m in modules
            if m.startswith(("orchestrator.slurm", "orchestrator.config.cluster"))
            or m in ("orchestrator.backends.slurm", "orchestrator.backends.clusterrun")
        ]
    return out


@pytest.mark.parametrize("package", ["commands", "cli", "runner", "engines"])
def test_no_command_asks_whether_a_place_is_a_cluster(package: str) -> None:
    """Commands go through the backend of each place: none reads ``host.cluster`` or imports
    the Slurm code, so a Kubernetes backend needs no edit here."""
    files = sorted((ROOT / package).glob("*.py"))
    assert files
    assert [hit for path in files for hit in cluster_reads(path)] == []
    if package != "cli":  # cli/ renders the Slurm backend's reports (jobs, partitions)
        assert [hit for path in files for hit in slurm_imports(path)] == []
