"""Allocations on the real test cluster, asked for through a real sshd as its login node.

Jobs hold their GPUs until the test touches a stop file, so every step waits on an event (a
state squeue reports, a file a job wrote), never on time; the bounded waits only end a test
that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.agent.verify import UnsafeRemotePath
from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.slurm.allocation import (
    Allocation,
    AllocationFailed,
    AllocationTimeout,
    JobState,
    SubmitRejected,
    cancel,
    orch_jobs,
    push_job_script,
    submit,
    wait_running,
)
from orchestrator.slurm.jobs import JOB_SCRIPT, AllocationRequest
from tests.fixtures.slurm import SlurmCluster, SqueueJob
from tests.fixtures.sshd import SshdFactory, SshdHost

pytestmark = pytest.mark.integration

WAIT_S = 90.0  # bounds a wait for an event; generous for a loaded 2-core machine
POLL_S = 0.2
# What an allocated job runs: note its GPUs and job id, then hold the GPUs until told to stop
HOLD = 'echo "$CUDA_VISIBLE_DEVICES $SLURM_JOB_ID" > "$1"; while [ ! -e "$2" ]; do sleep 0.1; done'


def cluster_config(
    slurm: SlurmCluster, login: SshdHost, workdir: str, **overrides: object
) -> ClusterConfig:
    values: dict[str, object] = {
        "name": "orchtest",
        "login": login.host_config(workdir=workdir),
        "partition": slurm.partition,
        "gres": slurm.gres_type,
        "gpus_per_node": slurm.gpus,
        "time_limit": "00:30:00",
        "workdir": workdir,
    }
    values.update(overrides)
    return ClusterConfig(**values)  # type: ignore[arg-type]


def holding(run_id: str, shared: Path, workdir: str) -> AllocationRequest:
    """A 2-GPU request whose job writes ``<run>.env`` and runs until ``<run>.stop`` exists."""
    argv = ["sh", "-c", HOLD, "sh", str(shared / f"{run_id}.env"), str(shared / f"{run_id}.stop")]
    return AllocationRequest.for_run(run_id, 2, argv, workdir=workdir)


def ignore(_: JobState) -> None:
    """An on_state for waits whose states the test does not look at."""


async def eventually(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {WAIT_S}s waiting for {what}")
        await asyncio.sleep(0.1)


def job_env(shared: Path, run_id: str) -> str:
    path = shared / f"{run_id}.env"
    return path.read_text() if path.exists() else ""


def seen_as(states: list[JobState]) -> list[tuple[str, str | None]]:
    return [(state.state, state.reason) for state in states]


def test_an_allocation_runs_on_the_node_with_its_gpus(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """The workdir is given as ``~/...`` (through the login's home into tmp_path): sbatch gets
    it as an absolute path."""
    workdir = tmp_path / "work"

    async def scenario() -> tuple[int, Allocation, list[JobState], list[bool]]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            tilde = "~/" + os.path.relpath(workdir, await conn.home())
            config = cluster_config(slurm, login, tilde)
            job_id = await submit(conn, config, holding("r1", tmp_path, tilde))
            states: list[JobState] = []
            got = await wait_running(
                conn, job_id, on_state=states.append, pending_timeout=WAIT_S, poll=POLL_S
            )
            await eventually(lambda: job_env(tmp_path, "r1").endswith("\n"), "the job's env")
            pushed = [await push_job_script(conn, tilde)]  # there already: untouched
            (workdir / "orch-job.sh").write_text("#!/bin/sh\nexit 0\n")
            pushed.append(await push_job_script(conn, tilde))  # changed: rewritten
            (tmp_path / "r1.stop").touch()
            return job_id, got, states, pushed

    job_id, got, states, pushed = asyncio.run(scenario())
    assert got == Allocation(job_id=job_id, nodes=(slurm.node,), gpus=(0, 1), cpus=1)
    assert job_env(tmp_path, "r1") == f"0,1 {job_id}\n"
    assert states[-1].state == "RUNNING" and states[-1].nodes == (slurm.node,)
    assert states[-1].name == "orch-r1"
    assert pushed == [False, True]
    script = workdir / "orch-job.sh"
    assert script.read_text() == JOB_SCRIPT
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert [path.name for path in (workdir / "jobs").iterdir()] == [f"{job_id}.out"]


def test_a_second_request_waits_for_resources_until_the_first_is_cancelled(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    workdir = str(tmp_path / "work")

    async def scenario() -> tuple[int, int, Allocation, list[JobState]]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            config = cluster_config(slurm, login, workdir)
            first = await submit(conn, config, holding("first", tmp_path, workdir))
            await wait_running(conn, first, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S)
            second = await submit(conn, config, holding("second", tmp_path, workdir))
            states: list[JobState] = []
            waiting = asyncio.Event()

            def on_state(state: JobState) -> None:
                states.append(state)
                if (state.state, state.reason) == ("PENDING", "Resources"):
                    waiting.set()

            waiter = asyncio.ensure_future(
                wait_running(
                    conn, second, on_state=on_state, pending_timeout=WAIT_S * 2, poll=POLL_S
                )
            )
            await asyncio.wait_for(waiting.wait(), WAIT_S)
            assert not waiter.done()
            await cancel(conn, [first])
            got = await asyncio.wait_for(waiter, WAIT_S)
            await eventually(lambda: job_env(tmp_path, "second").endswith("\n"), "its env")
            return first, second, got, states

    first, second, got, states = asyncio.run(scenario())
    assert got == Allocation(job_id=second, nodes=(slurm.node,), gpus=(0, 1), cpus=1)
    assert job_env(tmp_path, "second") == f"0,1 {second}\n"
    seen = seen_as(states)
    assert ("PENDING", "Resources") in seen and seen[-1] == ("RUNNING", None)
    assert all(a != b for a, b in itertools.pairwise(seen)), "on_state hears changes only"
    assert slurm.squeue_jobs() == [SqueueJob(str(second), "RUNNING", "None")]


def test_a_request_pending_past_its_time_limit_is_cancelled_with_its_reason(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    workdir = str(tmp_path / "work")

    async def scenario() -> tuple[int, int, AllocationTimeout, list[JobState]]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            config = cluster_config(slurm, login, workdir)
            first = await submit(conn, config, holding("first", tmp_path, workdir))
            await wait_running(conn, first, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S)
            second = await submit(conn, config, holding("second", tmp_path, workdir))
            waiting = SqueueJob(str(second), "PENDING", "Resources")
            await eventually(lambda: waiting in slurm.squeue_jobs(), "the second job to wait")
            states: list[JobState] = []
            with pytest.raises(AllocationTimeout) as timed_out:
                await wait_running(
                    conn, second, on_state=states.append, pending_timeout=1.0, poll=POLL_S
                )
            return first, second, timed_out.value, states

    first, second, error, states = asyncio.run(scenario())
    assert (error.job_id, error.state, error.reason) == (second, "PENDING", "Resources")
    assert str(error) == f"login: job {second} was still PENDING (Resources) after 1s: cancelled"
    assert seen_as(states) == [("PENDING", "Resources")]
    assert slurm.squeue_jobs() == [SqueueJob(str(first), "RUNNING", "None")]


def test_a_job_that_ends_before_it_runs_fails_with_its_state_and_output(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """One job is cancelled by someone else while it waits; another fails at once (the test
    lets it end before waiting, so the waiter cannot see it running first)."""
    workdir = str(tmp_path / "work")

    def ended(job_id: int) -> bool:
        done = slurm.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T")
        return done.stdout.strip() == "FAILED"

    async def scenario() -> tuple[int, AllocationFailed, int, AllocationFailed]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            config = cluster_config(slurm, login, workdir)
            first = await submit(conn, config, holding("first", tmp_path, workdir))
            await wait_running(conn, first, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S)
            second = await submit(conn, config, holding("second", tmp_path, workdir))
            waiter = asyncio.ensure_future(
                wait_running(conn, second, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S)
            )
            waiting = SqueueJob(str(second), "PENDING", "Resources")
            await eventually(lambda: waiting in slurm.squeue_jobs(), "the second job to wait")
            assert slurm.run("scancel", str(second)).returncode == 0
            with pytest.raises(AllocationFailed) as cancelled:
                await asyncio.wait_for(waiter, WAIT_S)
            await cancel(conn, [first])

            boom = AllocationRequest.for_run(
                "boom", 0, ["sh", "-c", "echo starting; echo boom >&2; exit 3"], workdir=workdir
            )
            third = await submit(conn, config, boom)
            await eventually(lambda: ended(third), "the failing job to fail")
            with pytest.raises(AllocationFailed) as failed:
                await wait_running(
                    conn, third, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S
                )
            with pytest.raises(AllocationFailed) as unknown:
                await wait_running(
                    conn, 999999, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S
                )
            assert str(unknown.value) == (
                "login: job 999999 is no longer known to Slurm and never ran"
            )
            return second, cancelled.value, third, failed.value

    second, cancelled, third, failed = asyncio.run(scenario())
    assert (cancelled.job_id, cancelled.state, cancelled.reason) == (
        second,
        "CANCELLED",
        "Resources",
    )
    assert cancelled.output == []
    assert str(cancelled) == f"login: job {second} ended before it ran: CANCELLED (Resources)"
    assert (failed.job_id, failed.state, failed.reason) == (third, "FAILED", "NonZeroExitCode")
    assert failed.output == ["starting", "boom"]  # sbatch sends stderr to --output too
    assert str(failed) == (
        f"login: job {third} ended before it ran: FAILED (NonZeroExitCode); "
        "its output ends with:\nstarting\nboom"
    )


def test_a_bad_partition_is_refused_with_slurms_message(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    workdir = str(tmp_path / "work")

    async def scenario() -> SubmitRejected:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            config = cluster_config(slurm, login, workdir, partition="nope")
            with pytest.raises(SubmitRejected) as refused:
                await submit(conn, config, holding("r1", tmp_path, workdir))
            return refused.value

    error = asyncio.run(scenario())
    assert "sbatch: error: Batch job submission failed: Invalid partition name specified" in (
        error.stderr.splitlines()
    )
    assert str(error) == f"login: `sbatch` exited with 1: {error.stderr.strip()}"
    assert (error.host, error.returncode, error.argv[0]) == ("login", 1, "sbatch")
    assert error.hint == SubmitRejected.usual_hint
    assert "--partition=nope" in error.argv
    assert slurm.squeue_jobs() == []


def test_orch_jobs_lists_only_orchs_jobs_and_cancel_empties_the_queue(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    workdir = str(tmp_path / "work")
    script = tmp_path / "other.sh"
    script.write_text('#!/bin/sh\nwhile [ ! -e "$1" ]; do sleep 0.1; done\n')
    script.chmod(0o755)

    async def scenario() -> tuple[list[int], list[JobState], list[JobState], list[SqueueJob]]:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            config = cluster_config(slurm, login, workdir)
            first = await submit(conn, config, holding("first", tmp_path, workdir))
            await wait_running(conn, first, on_state=ignore, pending_timeout=WAIT_S, poll=POLL_S)
            second = await submit(conn, config, holding("second", tmp_path, workdir))
            done = slurm.run(
                "sbatch",
                "--parsable",
                "--job-name=other",
                f"--output={tmp_path}/other.out",
                str(script),
                str(tmp_path / "other.stop"),
            )
            assert done.returncode == 0, done.stderr
            other = int(done.stdout)
            listed = await orch_jobs(conn)
            await cancel(conn, [first, second, other])
            await eventually(lambda: slurm.squeue_jobs() == [], "scancel to empty the queue")
            await cancel(conn, [first, second, other])  # gone already: fine
            await cancel(conn, [999999])  # never was: fine
            after = await orch_jobs(conn)
            return [first, second, other], listed, after, slurm.squeue_jobs()

    (first, second, _other), listed, after, queue = asyncio.run(scenario())
    assert sorted((job.job_id, job.name, job.state) for job in listed) == [
        (first, "orch-first", "RUNNING"),
        (second, "orch-second", "PENDING"),
    ]
    assert {job.user for job in listed} == {login.user}
    assert after == [] and queue == []


def test_a_workdir_others_can_write_to_is_refused(
    slurm: SlurmCluster, login: SshdHost, sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    workdir = tmp_path / "open"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)

    async def scenario() -> str:
        async with sshd_factory.pool() as pool:
            conn = await pool.get(login.host_config())
            with pytest.raises(UnsafeRemotePath) as refused:
                await push_job_script(conn, str(workdir))
            return str(refused.value)

    message = asyncio.run(scenario())
    assert message == (
        f"login: refusing to use {workdir} for Slurm jobs: others can write to it (mode 0777)"
    )
    assert not (workdir / "orch-job.sh").exists()
