"""GPU slots: which runs of one host may run at the same time, on which GPUs (``share_gpus``).

A playbook with ``share_gpus: true`` lets a host run several servers at once, each on GPUs of
its own (orch sets ``CUDA_VISIBLE_DEVICES``). The rules, the same at run time
(``commands/run.py``) and in the dry run's estimate (``simulate``):

- Runs start in playbook order, never overtaking: a run that waits for GPUs holds back the runs
  after it, so a big run is not starved by small ones and the order is the one written.
- A run starts as soon as it has ``gpus`` free GPUs (the lowest free indices) and no running
  run of the host listens on its port: two runs on one port wait for each other, never collide.
- At most ``MAX_RUNS_PER_HOST`` runs of a host at once: they share its one SSH connection,
  where each holds a channel for its log and one for its load generator.
- A run that cannot share runs alone, once the host is idle, and gets no GPU ids from orch:
  its environment (its own or its host's) sets ``CUDA_VISIBLE_DEVICES``, it needs more GPUs
  than the host has (the doctor and the agent then say so), or the host's GPU count is unknown.

Without ``share_gpus`` every run is such a lone run: one after another, as always. So is every
run of a CPU host (``gpus: none``, a GPU count of 0): one server at a time, given no GPU ids,
whatever nvidia-smi shows there (servers sharing its cores would measure each other).

Pure: no I/O, no clock. GPU indices are nvidia-smi's (the agent sets ``CUDA_DEVICE_ORDER``
to ``PCI_BUS_ID`` with them, so CUDA numbers the GPUs the same way).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.config.hostconfig import HostConfig

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# runs of one host at once: each keeps two of its connection's channels busy (the log's tail,
# the load generator); transport/ssh.py opens at most MAX_CHANNELS (9) at a time, two of
# them the agent's background streams and one kept for short calls; more runs would wait
# for channels, with every channel held by tails at 9
MAX_RUNS_PER_HOST = 3


@dataclass(frozen=True)
class SlotNeed:
    """What one run asks of its host: ``gpus`` GPUs and ``port``; ``alone``: run by itself."""

    key: str
    gpus: int
    port: int
    alone: bool = False


@dataclass(frozen=True)
class Grant:
    """A run's place on its host: the GPU ids orch gives it, None when it runs alone."""

    gpu_ids: tuple[int, ...] | None


@dataclass(frozen=True)
class Placement:
    """Where ``simulate`` put a run: when it starts and ends (s from the host's start), its
    GPUs (None: alone, no ids), and the runs it waited for, if it had to."""

    key: str
    start: float
    end: float
    gpu_ids: tuple[int, ...] | None
    waited_for: tuple[str, ...] = ()


@dataclass
class GpuSlots:
    """One host's GPUs and the runs holding them. ``gpu_count`` None (or 0): every run alone."""

    gpu_count: int | None
    max_runs: int = MAX_RUNS_PER_HOST
    holders: dict[str, SlotNeed] = field(default_factory=dict)
    gpus_of: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def shares(self, need: SlotNeed) -> bool:
        """Whether ``need`` runs beside others (else it runs alone)."""
        return not need.alone and bool(self.gpu_count) and need.gpus <= (self.gpu_count or 0)

    @property
    def free(self) -> list[int]:
        taken = {i for ids in self.gpus_of.values() for i in ids}
        return [i for i in range(self.gpu_count or 0) if i not in taken]

    def blockers(self, need: SlotNeed) -> list[str]:
        """The running runs ``need`` waits for (empty: it can start now)."""
        if not self.holders:
            return []
        if not self.shares(need) or any(not self.shares(h) for h in self.holders.values()):
            return list(self.holders)  # a lone run: before it, or while it runs, nothing else
        same_port = [k for k, h in self.holders.items() if h.port == need.port]
        if same_port:
            return same_port
        if len(self.free) < need.gpus or len(self.holders) >= self.max_runs:
            return list(self.holders)
        return []

    def fits(self, need: SlotNeed) -> Grant | None:
        """The place ``need`` would get now, None while it must wait."""
        if self.blockers(need):
            return None
        return Grant(tuple(self.free[: need.gpus]) if self.shares(need) else None)

    def take(self, need: SlotNeed) -> Grant:
        grant = self.fits(need)
        if grant is None:
            raise ValueError(f"{need.key} cannot start now: {', '.join(self.blockers(need))}")
        self.holders[need.key] = need
        self.gpus_of[need.key] = grant.gpu_ids or ()
        return grant

    def release(self, key: str) -> None:
        self.holders.pop(key, None)
        self.gpus_of.pop(key, None)


def simulate(
    needs: Sequence[SlotNeed],
    gpu_count: int | None,
    durations: Sequence[float],
    *,
    max_runs: int = MAX_RUNS_PER_HOST,
) -> list[Placement]:
    """Where and when each run would go, in playbook order, if each took ``durations[i]`` s.

    Mirrors the run-time worker: a run waits (holding back the ones after it) until
    ``GpuSlots.fits``; runs ending at one moment free their GPUs together.
    """
    slots = GpuSlots(gpu_count, max_runs)
    running: list[tuple[float, int, str]] = []  # (end, order, key): a heap
    out: list[Placement] = []
    now = 0.0
    for order, (need, duration) in enumerate(zip(needs, durations, strict=True)):
        waited: list[str] = []
        while slots.fits(need) is None:
            waited += [k for k in slots.blockers(need) if k not in waited]
            end, _, key = heapq.heappop(running)
            now = max(now, end)
            slots.release(key)
            while running and running[0][0] <= now:  # every run ending then frees its GPUs
                slots.release(heapq.heappop(running)[2])
        grant = slots.take(need)
        out.append(Placement(need.key, now, now + duration, grant.gpu_ids, tuple(waited)))
        heapq.heappush(running, (now + duration, order, need.key))
    return out


def host_gpu_count(host: HostConfig, probed: int | None = None) -> int | None:
    """The GPUs a host has: as probed (nvidia-smi) when it answered, else hosts.yaml's
    ``gpus:`` count, else unknown. A CPU host (``gpus: none``) has 0, whatever was probed:
    its runs go one after another on the CPU."""
    if host.cpu_only:
        return 0
    if probed:
        return probed
    return host.gpus.count if host.gpus is not None else None


def runs_alone(env: Mapping[str, str]) -> bool:
    """A run whose environment picks its GPUs itself is never given others."""
    return VISIBLE_DEVICES in env


def overlapping(placements: Sequence[Placement]) -> dict[str, list[str]]:
    """For each run, the runs of its host that run at the same time as it (by the schedule)."""
    return {
        p.key: [q.key for q in placements if q is not p and q.start < p.end and p.start < q.end]
        for p in placements
    }
