"""What a command reports while it works, as typed events for whoever shows them.

The runner and the commands say *what* happened (a run entered a phase, for this reason; so many
requests are done); the CLI's renderer (``cli/display.py``) decides how it looks. No markup and
no phase text crosses the layers, so the CLI never parses a phase back from a string.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.doctor.findings import Finding


class RunPhase(str, Enum):
    """Where one run of a playbook is; the value is how the phase reads to people."""

    WAITING = "waiting"
    QUEUED = "queued"  # waiting for its Slurm allocation; the reason is the job's queue state
    LAUNCHING = "launching"
    LOADING = "loading model"
    WARM_UP = "warm-up"
    MEASURING = "measuring"
    STOPPING = "stopping"
    DONE = "done"
    COLLAPSE = "collapse"  # done, and the measurement found a speculative-decoding collapse
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (RunPhase.DONE, RunPhase.COLLAPSE, RunPhase.FAILED)

    @property
    def under_way(self) -> bool:
        """Between launch and the run's end: its server may be running."""
        return self is not RunPhase.WAITING and not self.finished


@dataclass(frozen=True)
class RunAdded:
    """A run the playbook will execute (``total``: its request count per measurement, None for
    a duration; ``points``: its measurements; ``kept``: those an earlier session made)."""

    key: str
    run: str
    host: str
    total: int | None
    points: int = 1
    kept: int = 0


@dataclass(frozen=True)
class PointStarted:
    """A run began one measurement of its sweep (``label``: "c=8 #2"); ``done`` measurements
    of ``total`` are finished (an SLO search may raise ``total`` as it goes)."""

    key: str
    host: str
    label: str
    done: int
    total: int


@dataclass(frozen=True)
class PointDone:
    """A measurement's result was written (measured, failed or not run)."""

    key: str
    host: str
    label: str
    verdict: str


@dataclass(frozen=True)
class PhaseChanged:
    """``reason``: why a run failed (masked), or the server's readiness state while loading."""

    key: str
    phase: RunPhase
    reason: str | None = None


@dataclass(frozen=True)
class RequestsDone:
    """Measured requests so far (warm-up requests are not counted)."""

    key: str
    done: int
    failed: int


@dataclass(frozen=True)
class LiveThroughput:
    """The load generator's latest progress: tok/s over its last interval, and the GPUs'
    newest read (all their power together, their mean SM clock) when they are sampled."""

    key: str
    tok_s: float | None
    gpu_power_w: float | None = None
    gpu_sm_mhz: float | None = None


@dataclass(frozen=True)
class LatestAcceptance:
    """The acceptance length of the engine's latest spec-decode log line."""

    key: str
    length: float | None


@dataclass(frozen=True)
class Connecting:
    hosts: int


@dataclass(frozen=True)
class DoctorNotice:
    """A doctor finding (not ``ok``) on a run that is launched anyway; ``overridden_by`` is what
    let a run with an error launch (``--force``, ``doctor: warn``), None for a warning."""

    run: str
    host: str
    finding: Finding
    overridden_by: str | None = None


@dataclass(frozen=True)
class ExecutionStarted:
    """The runs are about to start (preflight and the doctor are done)."""


@dataclass(frozen=True)
class ExecutionEnded:
    """Every run has ended, or the playbook was interrupted."""


@dataclass(frozen=True)
class StoppingServers:
    """Clean-up (after an interrupt or an error): ``count`` servers still running on ``host``
    are being stopped, by SIGTERM, then SIGKILL if still there after ``timeout_s``."""

    host: str
    count: int
    timeout_s: float


@dataclass(frozen=True)
class ServerLeftRunning:
    """A clean-up stop that failed: a server may still run (``message`` and ``hint`` say what
    to do about it)."""

    host: str
    message: str
    hint: str | None = None


RunEvent = (
    RunAdded
    | PhaseChanged
    | PointStarted
    | PointDone
    | RequestsDone
    | LiveThroughput
    | LatestAcceptance
    | Connecting
    | DoctorNotice
    | ExecutionStarted
    | ExecutionEnded
    | StoppingServers
    | ServerLeftRunning
)


class Observer(Protocol):
    """What the runner tells while a playbook runs; the CLI's display implements it."""

    def on_event(self, event: RunEvent) -> None: ...


class NullObserver:
    """For callers that show nothing."""

    def on_event(self, event: RunEvent) -> None:
        return None


@dataclass
class RecordingObserver:
    """Keeps every event, for tests."""

    events: list[RunEvent] = field(default_factory=list)

    def on_event(self, event: RunEvent) -> None:
        self.events.append(event)

    def phases(self, key: str) -> list[RunPhase]:
        return [e.phase for e in self.events if isinstance(e, PhaseChanged) and e.key == key]


class HostPhase(str, Enum):
    """Where `orch hosts check` is with one host."""

    WAITING = "waiting"
    CONNECTING = "connecting"
    PUSHING_AGENT = "pushing agent"
    PROBING = "probing"
    FAILED = "failed"
    DONE = "done"
    PROBLEMS = "problems"


HostPhaseCallback = Callable[[str, HostPhase], None]  # (host name, phase)
