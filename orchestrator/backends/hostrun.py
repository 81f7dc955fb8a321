"""One host's runs during `orch run`: one after another, or, with ``share_gpus``, at once on GPU
slots of their own (``runner/slots.py`` has the rules).

A run that fails is recorded and the next one goes on. A host that cannot be reached again
has its remaining runs recorded as not run, with the cause; the other hosts go on. With shared
GPUs the runs under way when the host is lost end as they end (they lost the host too), and
the runs still waiting for GPUs are recorded as not run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.config import Playbook
from orchestrator.doctor.findings import warning
from orchestrator.errors import OrchError
from orchestrator.results.model import RunResult
from orchestrator.runner.execute import execute_run, failed_result, not_run_results
from orchestrator.runner.manifest import with_gpu_ids
from orchestrator.runner.preflight import HostSession
from orchestrator.runner.progress import DoctorNotice, Observer, PhaseChanged, RunPhase
from orchestrator.runner.server import ServerRegistry, live_agent, pool_reconnect
from orchestrator.runner.slots import GpuSlots, SlotNeed, host_gpu_count, runs_alone
from orchestrator.runner.state import RunJob

if TYPE_CHECKING:
    from orchestrator.transport import ConnectionPool


@dataclass
class HostRun:
    """What one host's runs share: its session, where results go, and whether it is gone."""

    session: HostSession
    pool: ConnectionPool
    registry: ServerRegistry
    observer: Observer
    results: dict[str, list[RunResult]]
    gone: str | None = None  # why the runs left are not run: the host was lost

    def not_run(self, job: RunJob) -> None:
        assert self.gone is not None
        self.results[job.key] = not_run_results(job, self.gone, self.observer)
        self.observer.on_event(PhaseChanged(job.key, RunPhase.FAILED, reason=self.gone))

    def failed(self, job: RunJob, error: OrchError) -> None:
        self.results[job.key] = failed_result(job, error, self.observer)
        self.observer.on_event(PhaseChanged(job.key, RunPhase.FAILED, reason=error.message))

    async def run(self, job: RunJob) -> None:
        """``job`` executed and its results recorded (failed or not run, if it comes to that)."""
        session = self.session
        if self.gone is not None:
            self.not_run(job)
            return
        if session.agent is None or session.facts is None:
            error = session.error or OrchError("host not reachable")
            self.failed(job, error)
            self.gone = f"not run: host {session.host.name} could not be reached ({error.message})"
            return
        # a live agent per run: a connection that dropped during the previous run (run 1
        # failed with "connection lost") is re-opened here instead of failing this run at once
        try:
            agent = await live_agent(self.pool, session.host, session.agent)
        except OrchError as exc:  # the host is gone: this run fails, the ones left are not run
            self.failed(job, exc)
            self.gone = (
                f"not run: host {session.host.name} was lost during {job.key} ({exc.message})"
            )
            return
        self.results[job.key] = await execute_run(
            job,
            agent=agent,
            reconnect=pool_reconnect(self.pool, session.host, session.agent),
            registry=self.registry,
            observer=self.observer,
        )


def host_slots(playbook: Playbook, session: HostSession, observer: Observer) -> GpuSlots | None:
    """The host's GPU slots when the playbook shares GPUs and the host's GPU count is known
    (probed, else hosts.yaml's ``gpus:``); None: its runs go one after another (told, when
    sharing was asked for, unless the host is a CPU host, whose runs always do)."""
    if not playbook.share_gpus or session.facts is None:
        return None
    count = host_gpu_count(session.host, len(session.facts.gpus) or None)
    if count == 0:  # a CPU host: one server at a time (runner/slots.py)
        return None
    if count is None:
        observer.on_event(
            DoctorNotice(
                run="*",
                host=session.host.name,
                finding=warning(
                    "share_gpus",
                    f"host {session.host.name}'s GPU count is unknown (nvidia-smi gave none and "
                    "hosts.yaml has no `gpus:`), so its runs go one after another. Fix: give "
                    "its `gpus:` in hosts.yaml.",
                ),
            )
        )
        return None
    return GpuSlots(count)


def slot_need(job: RunJob) -> SlotNeed:
    plan = job.plan
    return SlotNeed(job.key, plan.gpus, plan.port, alone=runs_alone(plan.env))


async def run_host(host: HostRun, jobs: Sequence[RunJob], slots: GpuSlots | None) -> None:
    """``jobs`` (one host's, in playbook order): one after another without ``slots``, else
    each as soon as its GPUs and port are free, never overtaking an earlier one."""
    if slots is None or host.session.agent is None:
        for job in jobs:
            await host.run(job)
        return
    await _shared(host, jobs, slots)


async def _shared(host: HostRun, jobs: Sequence[RunJob], slots: GpuSlots) -> None:
    """The slot scheduler: start each job when ``slots`` fits it, release its GPUs when it
    ends. An exception in one job (a results folder that cannot be written) stops the others:
    it is raised once they are cancelled, as the sequential loop would raise it."""
    changed = asyncio.Condition()
    tasks: list[asyncio.Task[None]] = []

    async def one(job: RunJob) -> None:
        try:
            await host.run(job)
        finally:
            slots.release(job.key)
            async with changed:
                changed.notify_all()

    try:
        for job in jobs:
            need = slot_need(job)
            async with changed:
                while host.gone is None and slots.fits(need) is None:
                    _raise_failed(tasks)
                    await changed.wait()
            _raise_failed(tasks)
            if host.gone is not None:  # no GPUs to wait for on a host that is lost
                host.not_run(job)
                continue
            grant = slots.take(need)
            if grant.gpu_ids is not None:
                job.gpu_ids = list(grant.gpu_ids)
                job.manifest = with_gpu_ids(job.manifest, grant.gpu_ids)
            tasks.append(asyncio.create_task(one(job)))
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _raise_failed(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            raise error
