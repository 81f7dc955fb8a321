"""Allocations on a Slurm cluster, asked for through an SSH connection to its login node.

The I/O edge of ``jobs.py``: submit a batch job, wait for it to run while reporting its queue
state, cancel it, list orch's jobs. Every Slurm command goes through ``_slurm``, the one place
a failing command becomes an ``orchestrator.errors`` type naming the login node. The caller owns
the jobs it submits: an interrupted ``wait_running`` leaves its job to the caller's ``cancel``.
"""

from __future__ import annotations

import asyncio
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from orchestrator.agent.verify import UnsafeRemotePath
from orchestrator.config.hostconfig import ClusterConfig
from orchestrator.errors import HostError, RemoteCommandError
from orchestrator.slurm.jobs import (
    JOB_NAME_PREFIX,
    JOB_SCRIPT,
    Allocation,
    AllocationRequest,
    JobState,
    SlurmOutputError,
    job_script_path,
    parse_allocation,
    parse_sbatch,
    parse_squeue,
    parse_stdout_path,
    sbatch_argv,
    scancel_argv,
    scontrol_show_job_argv,
    squeue_argv,
)
from orchestrator.transport import CompletedProcess, Connection

T = TypeVar("T")

__all__ = [
    "Allocation",
    "AllocationFailed",
    "AllocationTimeout",
    "JobState",
    "SlurmCommandError",
    "SubmitRejected",
    "cancel",
    "job_state",
    "login_workdir",
    "orch_jobs",
    "push_job_script",
    "submit",
    "wait_running",
]

DEVNULL = "/dev/null"  # a job whose output orch sends elsewhere itself
COMMAND_TIMEOUT_S = 60.0  # a busy slurmctld can take seconds to answer, never minutes
OUTPUT_TAIL_LINES = 20
FIRST_POLL_S = 0.1  # a pending job: then 0.2, 0.4 ... up to ``poll``
SCRIPT_MODE = 0o755
# What Slurm says of a job it no longer knows (purged after MinJobAge, or never was)
UNKNOWN_JOB = "Invalid job id specified"
# scancel of a job already ending or ended (older Slurm versions exit 1 with these)
ALREADY_GONE = (UNKNOWN_JOB, "already completing or completed")
NO_SLURM_HINT = (
    "is Slurm's client (sbatch, squeue, scancel, scontrol) on the PATH of a non-interactive "
    "SSH session on the login node? Try `ssh <login> squeue --version`"
)


class SlurmCommandError(RemoteCommandError):
    """A Slurm command on the login node failed; ``stderr`` is what Slurm said."""

    usual_hint: str | None = None

    def __init__(
        self, host: str, message: str, *, argv: Sequence[str], returncode: int, stderr: str
    ) -> None:
        hint = NO_SLURM_HINT if returncode == 127 else self.usual_hint
        super().__init__(host, message, hint=hint)
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


class SubmitRejected(SlurmCommandError):
    """sbatch refused the job (an unknown partition, account or gres, a bad time limit ...)."""

    usual_hint = (
        "check the cluster's partition, account, qos, gres, time_limit and sbatch_options in "
        "hosts.yaml; `sinfo` on the login node lists what the cluster offers"
    )


class AllocationTimeout(HostError):
    """The job was still waiting when the pending time limit passed; it has been cancelled.
    ``reason`` is Slurm's last word on why it waited (``Resources``, ``Priority`` ...)."""

    def __init__(
        self, host: str, *, job_id: int, state: str, reason: str | None, waited: float
    ) -> None:
        why = f"{state} ({reason})" if reason else state
        super().__init__(
            host,
            f"job {job_id} was still {why} after {waited:g}s: cancelled",
            hint="allow a longer pending time, or ask for fewer GPUs or another partition",
        )
        self.job_id = job_id
        self.state = state
        self.reason = reason


class AllocationFailed(HostError):
    """The job ended before it ran (cancelled by someone, failed at launch, purged ...).

    ``state`` and ``reason`` are Slurm's (None when Slurm no longer knows the job);
    ``output`` holds the last lines of the job's output file, when it could be read.
    """

    def __init__(
        self,
        host: str,
        *,
        job_id: int,
        state: str | None,
        reason: str | None,
        output: Sequence[str] = (),
    ) -> None:
        if state is None:
            message = f"job {job_id} is no longer known to Slurm and never ran"
        else:
            why = f"{state} ({reason})" if reason else state
            message = f"job {job_id} ended before it ran: {why}"
        if output:
            message += "; its output ends with:\n" + "\n".join(output)
        super().__init__(host, message)
        self.job_id = job_id
        self.state = state
        self.reason = reason
        self.output = list(output)


async def _slurm(
    conn: Connection,
    argv: Sequence[str],
    read: Callable[[CompletedProcess], T],
    *,
    error: type[SlurmCommandError] = SlurmCommandError,
    tolerate: Sequence[str] = (),
) -> T:
    """Run a Slurm command and ``read`` its result: the one place where its failures become
    errors naming the login node. A non-zero exit raises ``error`` with Slurm's stderr,
    unless each line of that stderr holds one of ``tolerate`` (``read`` then sees the exit
    code); output ``read`` cannot understand raises SlurmCommandError."""
    done = await conn.run(argv, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0 and not _only(done.stderr, tolerate):
        said = done.stderr.strip() or "(nothing on stderr)"
        raise error(
            conn.host,
            f"`{argv[0]}` exited with {done.returncode}: {said}",
            argv=argv,
            returncode=done.returncode,
            stderr=done.stderr,
        )
    try:
        return read(done)
    except SlurmOutputError as exc:
        raise SlurmCommandError(
            conn.host,
            f"`{argv[0]}`: {exc.message}",
            argv=argv,
            returncode=done.returncode,
            stderr=done.stderr,
        ) from exc


def _only(stderr: str, tolerated: Sequence[str]) -> bool:
    """Every complaint is a tolerated one: ``scancel 7 8`` exiting 1 because 8 is gone is
    fine, not when 7 could not be cancelled either."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return bool(lines) and all(any(text in line for text in tolerated) for line in lines)


async def _absolute(conn: Connection, path: str) -> str:
    """``~/x`` as the login's absolute path: sbatch, unlike SFTP, gets no shell to expand it."""
    if path == "~" or path.startswith("~/"):
        return await conn.home() + path[1:]
    return path


async def login_workdir(conn: Connection, cluster: ClusterConfig) -> str:
    """Where the job script lives on the login node, absolute: the cluster's workdir when it
    is shared with the compute nodes, else the login node's own (``login.workdir``)."""
    return await _absolute(conn, cluster.login.workdir)


async def push_job_script(conn: Connection, workdir: str) -> bool:
    """Put ``JOB_SCRIPT`` in the workdir (mode 0755) unless exactly that file is there; True
    when it was written. A workdir others can write to is refused: they could swap the
    script that every job execs."""
    workdir = await _absolute(conn, workdir)
    await conn.makedirs(workdir, mode=0o700)
    attrs = await conn.lstat(workdir, follow=True)
    mode = (attrs.permissions if attrs else None) or 0
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeRemotePath(
            conn.host,
            f"refusing to use {workdir} for Slurm jobs: others can write to it "
            f"(mode {mode & 0o7777:04o})",
            hint=f"run `chmod go-w {workdir}` on the login node",
        )
    path = job_script_path(workdir)
    present = await conn.lstat(path)
    if (
        present is not None
        and stat.S_ISREG(present.permissions or 0)
        and (present.permissions or 0) & 0o7777 == SCRIPT_MODE
        and await conn.read_bytes(path) == JOB_SCRIPT.encode()
    ):
        return False
    await conn.put_bytes(JOB_SCRIPT.encode(), path, mode=SCRIPT_MODE)
    return True


async def submit(conn: Connection, cluster: ClusterConfig, request: AllocationRequest) -> int:
    """Submit one batch job; its id. The job script is pushed first (when missing or
    changed) and the output's directory made, without which the job fails at launch."""
    workdir = await _absolute(conn, cluster.workdir)
    await push_job_script(conn, workdir)
    output = await _absolute(conn, request.output)
    if output != DEVNULL:
        await conn.makedirs(posixpath.dirname(output), mode=0o700)
    argv = sbatch_argv(replace(cluster, workdir=workdir), replace(request, output=output))
    return await _slurm(
        conn, argv, lambda done: parse_sbatch(done.stdout, done.stderr), error=SubmitRejected
    )


async def job_state(conn: Connection, job_id: int) -> JobState | None:
    """The job as squeue sees it now, ended ones included; None once Slurm forgot it."""

    def read(done: CompletedProcess) -> JobState | None:
        jobs = parse_squeue(done.stdout) if done.returncode == 0 else []
        return next((job for job in jobs if job.job_id == job_id), None)

    argv = squeue_argv([job_id], all_states=True)
    return await _slurm(conn, argv, read, tolerate=[UNKNOWN_JOB])


async def wait_running(
    conn: Connection,
    job_id: int,
    *,
    on_state: Callable[[JobState], None],
    pending_timeout: float,
    poll: float = 2.0,
) -> Allocation:
    """Wait until the job runs; its allocation.

    ``on_state`` hears every change of state or reason (PENDING Priority -> PENDING Resources
    -> RUNNING). Past ``pending_timeout`` seconds the job is cancelled and AllocationTimeout
    raised; a job that ends first raises AllocationFailed.

    The first looks come quickly, then every ``poll``: on an idle partition the job runs
    within a scheduler pass, and a fixed 2 s poll would add a second to every run; a job that
    waits for resources costs four more squeue calls in all.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + pending_timeout
    seen: tuple[str, str | None] | None = None
    polls = 0
    while True:
        job = await job_state(conn, job_id)
        if job is None:
            raise AllocationFailed(conn.host, job_id=job_id, state=None, reason=None)
        if (job.state, job.reason) != seen:
            seen = (job.state, job.reason)
            on_state(job)
        if job.running:
            return await _slurm(
                conn, scontrol_show_job_argv(job_id), lambda done: parse_allocation(done.stdout)
            )
        if job.ended:
            raise await _failed(conn, job)
        left = deadline - loop.time()
        if left <= 0:
            await cancel(conn, [job_id])
            raise AllocationTimeout(
                conn.host, job_id=job_id, state=job.state, reason=job.reason, waited=pending_timeout
            )
        await asyncio.sleep(min(poll, left, FIRST_POLL_S * 2 ** min(polls, 16)))
        polls += 1


async def _failed(conn: Connection, job: JobState) -> AllocationFailed:
    """AllocationFailed with the end of the job's output file, when Slurm still names it and
    the login node can read it (it cannot on a cluster without a shared filesystem)."""
    path = await _slurm(
        conn,
        scontrol_show_job_argv(job.job_id),
        lambda done: parse_stdout_path(done.stdout) if done.returncode == 0 else None,
        tolerate=[UNKNOWN_JOB],
    )
    lines: list[str] = []
    if path:
        tail = await conn.run(
            ["tail", "-n", str(OUTPUT_TAIL_LINES), "--", path], timeout=COMMAND_TIMEOUT_S
        )
        lines = tail.stdout.splitlines() if tail.returncode == 0 else []
    return AllocationFailed(
        conn.host, job_id=job.job_id, state=job.state, reason=job.reason, output=lines
    )


async def cancel(conn: Connection, job_ids: Sequence[int]) -> None:
    """scancel the jobs; one that has already ended or is unknown is fine (nothing to do)."""
    if job_ids:
        await _slurm(conn, scancel_argv(job_ids), lambda done: None, tolerate=ALREADY_GONE)


async def orch_jobs(conn: Connection) -> list[JobState]:
    """This login's jobs named ``orch-...`` that are pending, running or completing."""
    whoami = await conn.run(["id", "-un"], timeout=COMMAND_TIMEOUT_S, check=True)
    jobs = await _slurm(
        conn, squeue_argv(user=whoami.stdout.strip()), lambda done: parse_squeue(done.stdout)
    )
    return [job for job in jobs if job.name.startswith(JOB_NAME_PREFIX)]
