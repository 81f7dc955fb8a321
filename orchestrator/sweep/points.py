"""The measurements of one run: its load points in the order written, each repeated, then the
points an SLO search asks for, all on the server the run started once.

A measurement's folder is the run's folder itself when the run measures once (the layout of a
single-point run, unchanged), else ``points/<index>-<label>-r<repeat>`` beneath it, so every
point's records, events and summary stay apart and sort in the order they were measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.config.playbook import RunSpec, WorkloadSpec
from orchestrator.results.model import LoadPoint
from orchestrator.results.store import safe_name

POINTS_DIR = "points"


@dataclass(frozen=True)
class Measurement:
    """One measurement of a run: the point, the run as it is measured there (its workload at
    that load), and the folder its files go to, relative to the run's folder ("" when flat)."""

    point: LoadPoint
    run: RunSpec
    folder: str

    @property
    def first(self) -> bool:
        return self.point.index == 0 and self.point.repeat == 1


def point_folder(point: LoadPoint) -> str:
    """``points/03-c8-r2``: sortable, readable, safe on every filesystem."""
    label = point.label.replace("=", "")  # c8, rate2.5
    return f"{POINTS_DIR}/{point.index:02d}-{safe_name(label)}-r{point.repeat}"


def measurement(
    run: RunSpec,
    value: float,
    *,
    index: int,
    repeat: int,
    origin: Literal["sweep", "slo_search"] = "sweep",
) -> Measurement:
    w = run.workload
    point = LoadPoint(
        kind=w.sweep_kind,
        value=value,
        repeat=repeat,
        repeats=w.repeat,
        index=index,
        origin=origin,
    )
    at = run.model_copy(update={"workload": w.at_load(value)})
    folder = point_folder(point) if w.is_sweep else ""
    return Measurement(point=point, run=at, folder=folder)


def planned(run: RunSpec) -> list[Measurement]:
    """The measurements known before the run starts: every written point × ``repeat``. An SLO
    search adds its own as it goes (``SweepState``)."""
    w = run.workload
    return [
        measurement(run, value, index=i, repeat=r)
        for i, value in enumerate(w.sweep_values)
        for r in range(1, w.repeat + 1)
    ]


def searched(run: RunSpec) -> bool:
    slo = run.workload.slo
    return slo is not None and slo.search is not None


def workload_points(w: WorkloadSpec) -> int:
    """Measurements written in the playbook (an SLO search may add up to max_points × repeat)."""
    return len(w.sweep_values) * w.repeat
