"""What `orch run --dry-run` shows besides argv and env: per host, each server with its load
points, repeats and SLO search, where it runs (GPUs, the runs beside it), and how long it all
should take.

The estimate is rough and says where each figure comes from:

- ``history``: earlier results of the same run on the same host under the results folder
  (``--results``): the median server start, and per load point the median time a measurement
  took (its whole span, warm-up included, less the server start it included), when the
  workload's shape (requests, output tokens, duration) is the same.
- ``guess``: otherwise, from the workload and plain constants: a server starts in
  ``SERVER_START_S``; a stream decodes ``DECODE_TOK_S`` tokens per second whatever the load (a
  real server slows down as it batches more, and prefill is not counted); a closed loop sends
  ``num_prompts`` in waves of ``concurrency``, an open loop at ``request_rate``; ``duration_s``
  ends a measurement early; ``MEASUREMENT_OVERHEAD_S`` covers the cache reset and scrapes.
  The server's first measurement adds its warm-up requests.

An SLO search adds at most ``max_points × repeat`` measurements, guessed at the geometric
middle of its range, and is counted as an upper bound. A host runs its servers one after
another (or on GPU slots with ``share_gpus``: ``runner/slots.py``, whose ``simulate`` places
them with these durations); hosts run in parallel, so the playbook takes as long as its
longest host.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator.config.places import place_kind
from orchestrator.config.playbook import WorkloadSpec
from orchestrator.engines.plan import PlannedLaunch
from orchestrator.errors import OrchError
from orchestrator.results.model import RunResult
from orchestrator.results.store import set_aside_name
from orchestrator.runner.slots import SlotNeed, host_gpu_count, overlapping, runs_alone, simulate
from orchestrator.sweep.points import planned

DECODE_TOK_S = 25.0  # tokens/s per stream: a 27B model on two A6000s; a rough guess
SERVER_START_S = 120.0  # model load, compilation, CUDA graphs; a rough guess
MEASUREMENT_OVERHEAD_S = 2.0  # prefix cache reset, metrics scrapes, the summary

Source = Literal["history", "guess"]
MeasureKey = tuple[str, str, str, float, int, int, float | None]


@dataclass(frozen=True)
class Past:
    """Earlier results, for the estimate: per (run, host), server start times; per
    (run, host, load kind, load value, num_prompts, max_tokens, duration_s), the seconds each
    measurement took."""

    starts: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    measurements: dict[MeasureKey, list[float]] = field(default_factory=dict)

    def start_s(self, run: str, host: str) -> float | None:
        found = self.starts.get((run, host))
        return statistics.median(found) if found else None

    def measurement_s(
        self, run: str, host: str, kind: str, value: float, w: WorkloadSpec
    ) -> float | None:
        found = self.measurements.get(
            (run, host, kind, value, w.num_prompts, w.max_tokens, w.duration_s)
        )
        return statistics.median(found) if found else None


def past_from(results: Iterable[RunResult]) -> Past:
    """The times of the measurements that went well (no error, a load point, a workload)."""
    past = Past()
    for r in results:
        w, t = r.settings.workload, r.times
        if r.error is not None or w is None or r.point is None or t.duration_s is None:
            continue
        name, host = r.run.name, r.run.host
        if t.server_start_s is not None:
            past.starts.setdefault((name, host), []).append(t.server_start_s)
        key = (name, host, r.point.kind, r.point.value, w.num_prompts, w.max_tokens, w.duration_s)
        past.measurements.setdefault(key, []).append(t.duration_s - (t.server_start_s or 0.0))
    return past


def read_past(root: Path) -> Past:
    """Every readable result under a results folder's playbook runs; a file that cannot be
    read (another orch's, half written) is passed over: it only sharpens a guess."""
    paths = [*root.glob("*/*/summary.json"), *root.glob("*/*/points/*/summary.json")]
    results = []
    for path in sorted(paths):
        if any(set_aside_name(part) for part in path.relative_to(root).parts):
            continue
        try:
            results.append(RunResult.load(path))
        except OrchError:
            continue
    return past_from(results)


def guess_measurement_s(w: WorkloadSpec, *, warmup: bool) -> float:
    """A measurement of ``w`` at one load point (``at_load``), as the module docstring says."""
    per_request = w.max_tokens / DECODE_TOK_S
    rate = w.point_rate

    def sending(count: int) -> float:
        if count == 0:
            return 0.0
        if rate is None:
            return math.ceil(count / w.point_concurrency) * per_request
        return count / rate + per_request

    measured = sending(w.num_prompts)
    if w.duration_s is not None:
        measured = min(measured, w.duration_s)
    return (sending(w.warmup) if warmup else 0.0) + measured + MEASUREMENT_OVERHEAD_S


@dataclass(frozen=True)
class SearchPlan:
    """An SLO search: ``kind`` between ``low`` and ``high``, at most ``measurements``."""

    kind: str
    low: float
    high: float
    measurements: int  # max_points x repeat
    seconds: float  # at most


@dataclass(frozen=True)
class ServerPlan:
    """One server of the dry run, its measurements and its estimate (seconds)."""

    key: str
    run: str
    host: str
    engine: str
    method: str
    port: int
    gpus: int
    load_kind: str
    load_values: list[float]
    repeat: int
    measurements: int
    search: SearchPlan | None
    start_s: float
    start_source: Source
    measure_s: float  # the planned measurements
    measure_source: Source | Literal["history and guess"]
    alone: bool = False  # its env sets CUDA_VISIBLE_DEVICES: never shares the host
    # where the schedule puts it (set by ``estimate``)
    begins_s: float = 0.0
    gpu_ids: list[int] | None = None
    beside: list[str] = field(default_factory=list)  # runs of the host running at once
    waits_for: list[str] = field(default_factory=list)  # runs it waits for before it starts

    @property
    def total_s(self) -> float:
        return self.start_s + self.measure_s + (self.search.seconds if self.search else 0.0)

    @property
    def ends_s(self) -> float:
        return self.begins_s + self.total_s


@dataclass(frozen=True)
class HostPlan:
    host: str
    gpu_count: int | None  # as hosts.yaml declares it (no host is touched by a dry run)
    shared: bool  # share_gpus, with a known GPU count
    servers: list[ServerPlan]
    noun: str = "host"  # what the place is called: its backend's noun ("cluster")
    # how its backend places runs, when not as a host does ("Slurm, {gpus} per node, each run
    # in an allocation of its own ..."; {gpus}: the GPU count as hosts.yaml says it)
    placement: str = ""

    @property
    def total_s(self) -> float:
        return max((s.ends_s for s in self.servers), default=0.0)


@dataclass(frozen=True)
class PlaybookPlan:
    share_gpus: bool
    hosts: list[HostPlan]

    @property
    def total_s(self) -> float:
        return max((h.total_s for h in self.hosts), default=0.0)

    @property
    def measurements(self) -> int:
        return sum(s.measurements for h in self.hosts for s in h.servers)


def server_plan(plan: PlannedLaunch, past: Past) -> ServerPlan:
    """``plan``'s measurements and their estimate, unplaced."""
    run, host = plan.run, plan.host.name
    w = run.workload
    times: list[float] = []
    sources: set[Source] = set()
    for m in planned(run):
        seen = past.measurement_s(run.name, host, m.point.kind, m.point.value, m.run.workload)
        sources.add("guess" if seen is None else "history")
        times.append(
            seen if seen is not None else guess_measurement_s(m.run.workload, warmup=m.first)
        )
    start = past.start_s(run.name, host)
    return ServerPlan(
        key=f"{run.name}@{host}",
        run=run.name,
        host=host,
        engine=str(run.engine),
        method=str(run.speculative.method),
        port=plan.port,
        gpus=plan.gpus,
        load_kind=w.sweep_kind,
        load_values=list(w.sweep_values),
        repeat=w.repeat,
        measurements=len(times),
        search=_search(w),
        start_s=SERVER_START_S if start is None else start,
        start_source="guess" if start is None else "history",
        measure_s=sum(times),
        measure_source=sources.pop() if len(sources) == 1 else "history and guess",
        alone=runs_alone(plan.env),
    )


def _search(w: WorkloadSpec) -> SearchPlan | None:
    slo = w.slo
    if slo is None or slo.search is None or slo.range is None:
        return None
    low, high = slo.range
    middle = math.sqrt(low * high)
    value = float(max(1, round(middle))) if slo.search == "concurrency" else middle
    count = slo.max_points * w.repeat
    each = guess_measurement_s(w.at_load(value), warmup=False)
    return SearchPlan(slo.search, low, high, count, count * each)


def estimate(
    plans: Sequence[PlannedLaunch], *, share_gpus: bool, past: Past | None = None
) -> PlaybookPlan:
    """The dry run's plan: hosts in the order their first run appears, each host's servers in
    playbook order, placed as the run would place them."""
    past = past or Past()
    hosts: list[HostPlan] = []
    for name in dict.fromkeys(p.host.name for p in plans):
        mine = [p for p in plans if p.host.name == name]
        servers = [server_plan(p, past) for p in mine]
        count = host_gpu_count(mine[0].host) if share_gpus else None
        needs = [SlotNeed(s.key, s.gpus, s.port, alone=s.alone) for s in servers]
        placed = simulate(needs, count, [s.total_s for s in servers])
        beside = overlapping(placed)
        servers = [
            _placed(s, begins=p.start, ids=p.gpu_ids, beside=beside[s.key], waits=p.waited_for)
            for s, p in zip(servers, placed, strict=True)
        ]
        kind = place_kind(mine[0].host)
        gpus = host_gpu_count(mine[0].host)
        hosts.append(HostPlan(name, gpus, bool(count), servers, kind.noun, kind.placement))
    return PlaybookPlan(share_gpus, hosts)


def _placed(
    s: ServerPlan,
    *,
    begins: float,
    ids: tuple[int, ...] | None,
    beside: list[str],
    waits: tuple[str, ...],
) -> ServerPlan:
    return replace(
        s,
        begins_s=begins,
        gpu_ids=None if ids is None else list(ids),
        beside=[k.rsplit("@", 1)[0] for k in beside],
        waits_for=[k.rsplit("@", 1)[0] for k in waits],
    )


def duration_text(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``: rounded to what an estimate can say."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min"


def plan_json(plan: PlaybookPlan) -> dict[str, Any]:
    """``--dry-run --json``'s schedule: per host its servers, placement and estimate."""
    return {
        "share_gpus": plan.share_gpus,
        "measurements": plan.measurements,
        "estimated_s": round(plan.total_s, 1),
        "hosts": [
            {
                "host": h.host,
                "gpu_count": h.gpu_count,
                "shared": h.shared,
                "estimated_s": round(h.total_s, 1),
                "servers": [_server_json(s) for s in h.servers],
            }
            for h in plan.hosts
        ],
        "constants": {
            "decode_tok_s": DECODE_TOK_S,
            "server_start_s": SERVER_START_S,
            "measurement_overhead_s": MEASUREMENT_OVERHEAD_S,
        },
    }


def _server_json(s: ServerPlan) -> dict[str, Any]:
    search = s.search
    return {
        "run": s.run,
        "engine": s.engine,
        "method": s.method,
        "port": s.port,
        "gpus": s.gpus,
        "gpu_ids": s.gpu_ids,
        "beside": s.beside,
        "waits_for": s.waits_for,
        "load": {"kind": s.load_kind, "values": s.load_values},
        "repeat": s.repeat,
        "measurements": s.measurements,
        "slo_search": None
        if search is None
        else {
            "kind": search.kind,
            "range": [search.low, search.high],
            "max_measurements": search.measurements,
            "max_s": round(search.seconds, 1),
        },
        "server_start_s": round(s.start_s, 1),
        "server_start_source": s.start_source,
        "measure_s": round(s.measure_s, 1),
        "measure_source": s.measure_source,
        "begins_s": round(s.begins_s, 1),
        "estimated_s": round(s.total_s, 1),
    }
