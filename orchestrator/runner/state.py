"""What one run carries through ``runner/``: the job the pipeline worked out (``RunJob``) and
the state its tail and load generator share while it is live (``LiveState``).

Their own module, below ``execute.py`` (which runs them) and ``summarize.py`` and
``assemble.py`` (which read them into a result), so those import them without importing the
run's execution back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.hostconfig import Secrets
from orchestrator.doctor import ModelConfig
from orchestrator.doctor.findings import Finding
from orchestrator.engines.logs import LogFollower
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.loadgen.prompts import PromptSet
from orchestrator.loadgen.records import RequestRecord
from orchestrator.results.model import RunResult
from orchestrator.results.store import AppendLog
from orchestrator.sweep.points import Measurement, planned


@dataclass
class RunJob:
    """Everything one run needs that the pipeline worked out before any server started.

    ``kept``: measurements (by folder, relative to ``run_dir``) an earlier session of this
    playbook run completed: ``orch run --resume`` keeps them and measures the rest. ``session``
    numbers the server sessions of the run's folder (its server files carry it after the first).
    """

    key: str
    order: int
    plan: PlannedLaunch
    run_dir: Path
    prompts: PromptSet
    run_id: str
    doctor: list[Finding] = field(default_factory=list)
    drafter: ModelConfig | None = None  # for ranking collapse causes
    target: ModelConfig | None = None  # for the roofline's decode shape
    manifest: dict[str, Any] = field(default_factory=dict)  # written, stamped, when the run starts
    kept: dict[str, RunResult] = field(default_factory=dict)
    session: int = 1
    gpu_ids: list[int] | None = None  # CUDA_VISIBLE_DEVICES on a shared host

    def server_file(self, name: str) -> str:
        """``server.log``, or ``server-2.log`` for the second session of the run's folder."""
        if self.session == 1:
            return name
        stem, dot, ext = name.partition(".")
        return f"{stem}-{self.session}{dot}{ext}"

    def measurements(self) -> list[Measurement]:
        return planned(self.plan.run)

    @property
    def total(self) -> int:
        """Measurements planned (an SLO search adds its own as it goes)."""
        slo = self.plan.run.workload.slo
        extra = slo.max_points * self.plan.run.workload.repeat if slo and slo.search else 0
        return len(self.measurements()) + extra


@dataclass
class LiveState:
    """What the tail and the load generator share while a run is live. The log follower and
    the start-up lines cover the server's whole life; the window, the records and the point's
    events file belong to the measurement under way."""

    follower: LogFollower
    secrets: Secrets = field(default_factory=Secrets)  # hidden in everything written or shown
    window: LogFollower | None = None  # fed only once the measured window has begun
    window_first_line: int | None = None  # server.log line number of the window's first line
    records: list[RequestRecord] = field(default_factory=list)
    head_lines: list[str] = field(default_factory=list)
    point_events: AppendLog | None = None  # a sweep point's own events.jsonl
    window_open: bool = False  # lines go to the window: between "measure" and the point's end

    def begin_measurement(self, point_events: AppendLog | None) -> None:
        self.restart_window()
        self.point_events = point_events

    def end_measurement(self) -> None:
        """Stop feeding the window: the next point's lines are not this one's."""
        self.point_events = None
        self.window_open = False

    def restart_window(self) -> None:
        """Forget the interrupted attempt's records and measured window; the next "measure"
        phase event starts a new window (the server log and its parse go on unbroken)."""
        self.records.clear()
        self.window = None
        self.window_first_line = None
        self.window_open = False
