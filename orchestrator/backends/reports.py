"""What the backends answer for `orch hosts check`, `ps`, `stop` and `clean`: one typed report
per command, which each backend fills for its places and the command merges (``+``).

Hosts answer with their agent's records (servers, pruned folders); clusters with what their
scheduler says (jobs) beside those. Errors are without the place's name: every line that shows
one names the place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.agent.facts import HostFacts
from orchestrator.remote.wire import PruneResult, ServerState, StopOutcome
from orchestrator.slurm.allocation import JobState
from orchestrator.slurm.facts import Partition, SubmitCheck

# -- ps and stop ------------------------------------------------------------------------------


@dataclass
class HostServers:
    """One host's answer: its servers (``ps``) or what was stopped, or why it could not be asked."""

    host: str
    servers: list[ServerState] = field(default_factory=list)
    stopped: list[StopOutcome] = field(default_factory=list)
    error: str | None = None  # without the host's name: every line that shows it names the host
    hint: str | None = None
    machine_id: str | None = None  # which machine and real workdir answered (None: not known)
    workdir: str | None = None
    also: list[str] = field(default_factory=list)  # other host entries for the same workdir

    @property
    def place(self) -> tuple[str, str] | None:
        """(machine id, real workdir) when both are known: entries with equal places share one
        workdir, hence its servers."""
        if self.machine_id and self.workdir:
            return (self.machine_id, self.workdir)
        return None

    @property
    def names(self) -> list[str]:
        return [self.host, *self.also]


def is_live(server: ServerState) -> bool:
    """Running, or something of its process group still is (exiting)."""
    return server.alive or bool(server.group_pids)


def same_place(entries: Sequence[HostServers]) -> list[HostServers]:
    """One entry per (machine, workdir): the first entry of each place, naming the others in
    ``also``; entries whose place is unknown (a host that could not be asked) stay as they are."""
    out: list[HostServers] = []
    first: dict[tuple[str, str], HostServers] = {}
    for entry in entries:
        place = entry.place
        if place is None:
            out.append(entry)
        elif place in first:
            first[place].also.append(entry.host)
        else:
            first[place] = entry
            out.append(entry)
    return out


@dataclass
class ClusterJobs:
    """One cluster's answer: orch's jobs in its queue (``ps``) or those cancelled (``stop``),
    or why its login node could not be asked."""

    cluster: str
    jobs: list[JobState] = field(default_factory=list)
    error: str | None = None  # without the cluster's name, as HostServers.error
    hint: str | None = None


@dataclass(frozen=True)
class PsReport:
    """What `orch ps` found: servers on the hosts, orch's jobs on the clusters."""

    hosts: list[HostServers] = field(default_factory=list)
    clusters: list[ClusterJobs] = field(default_factory=list)

    def __add__(self, other: PsReport) -> PsReport:
        return PsReport(self.hosts + other.hosts, self.clusters + other.clusters)

    @property
    def failed(self) -> bool:
        """Some host or cluster could not be asked."""
        return any(r.error for r in self.hosts) or any(c.error for c in self.clusters)


@dataclass(frozen=True)
class StopReport:
    """What `orch stop` did on every host and cluster it asked."""

    hosts: list[HostServers]
    run_id: str | None
    clusters: list[ClusterJobs] = field(default_factory=list)

    def __add__(self, other: StopReport) -> StopReport:
        return StopReport(self.hosts + other.hosts, self.run_id, self.clusters + other.clusters)

    @property
    def stopped(self) -> list[tuple[str, StopOutcome]]:
        """(host, server) of every server that was running and is now stopped."""
        return [(r.host, s) for r in self.hosts for s in r.stopped if s.was_running]

    @property
    def cancelled(self) -> list[tuple[str, JobState]]:
        """(cluster, job) of every orch job that was in a queue and is now cancelled."""
        return [(c.cluster, job) for c in self.clusters for job in c.jobs]

    @property
    def failed(self) -> bool:
        """Some host or cluster could not be asked."""
        return any(r.error for r in self.hosts) or any(c.error for c in self.clusters)

    @property
    def unknown_run(self) -> bool:
        """A run id was given, every host answered, and none of them ever launched it."""
        return (
            bool(self.run_id)
            and not self.failed
            and not any(r.stopped for r in self.hosts)
            and not self.cancelled
        )


# -- clean ------------------------------------------------------------------------------------


@dataclass
class HostClean:
    """One workdir's answer (``also``: other host entries for it), or why it could not be asked.
    ``note``: what was left alone and why (a cluster whose runs' folders only its nodes see)."""

    host: str
    result: PruneResult | None = None
    also: list[str] = field(default_factory=list)
    error: str | None = None
    hint: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class CleanReport:
    hosts: list[HostClean]
    dry_run: bool

    def __add__(self, other: CleanReport) -> CleanReport:
        return CleanReport(self.hosts + other.hosts, self.dry_run)

    @property
    def failed(self) -> bool:
        """A host could not be asked, or a folder could not be removed."""
        return any(
            h.error or (h.result and any(p.error for p in h.result.pruned)) for h in self.hosts
        )


# -- hosts check ------------------------------------------------------------------------------


@dataclass
class HostReport:
    name: str
    reachable: bool = False
    error: str | None = None
    hint: str | None = None
    facts: HostFacts | None = None
    gpu_problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # what every run imports (aiohttp)
    warnings: list[str] = field(default_factory=list)
    agent_bytes_pushed: int = 0
    cpu_only: bool = False  # hosts.yaml declares `gpus: none`: no GPU is expected

    @property
    def ok(self) -> bool:
        """Reachable, the agent ran, and the GPUs are the ones declared (warnings do not count)."""
        return self.reachable and self.error is None and not self.gpu_problems and not self.missing

    @property
    def failure(self) -> str | None:
        """What stopped the check, by the step that failed: a host that answered SSH but could
        not run the agent (a wrong `python`) is no "unreachable" host."""
        if self.error is None:
            return None
        return f"{'agent failed' if self.reachable else 'unreachable'}: {self.error}"

    @property
    def problems(self) -> list[str]:
        return [*self.gpu_problems, *self.missing, *self.warnings]


@dataclass
class ClusterReport:
    """One Slurm cluster: how far the check got through its login node, and what Slurm said."""

    name: str
    reachable: bool = False  # the login node answered SSH
    error: str | None = None
    hint: str | None = None
    version: str | None = None
    partitions: list[Partition] = field(default_factory=list)
    submit: SubmitCheck | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The login node answered, Slurm did, the partition has the GPUs, and a job would be
        accepted."""
        return self.reachable and self.error is None and not self.problems

    @property
    def failure(self) -> str | None:
        if self.error is None:
            return None
        return f"{'slurm failed' if self.reachable else 'login unreachable'}: {self.error}"


@dataclass(frozen=True)
class CheckReport:
    """`orch hosts check`: one report per host and per cluster, in the order asked."""

    hosts: list[HostReport] = field(default_factory=list)
    clusters: list[ClusterReport] = field(default_factory=list)

    def __add__(self, other: CheckReport) -> CheckReport:
        return CheckReport(self.hosts + other.hosts, self.clusters + other.clusters)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.hosts) and all(r.ok for r in self.clusters)
