"""A sweep on one server, on the in-memory FakeAgent: the server starts once and measures every
point in turn, warm-up only before the first; a failed point is recorded and the sweep goes on
while the server serves; once the engine is gone the points left are recorded as not run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from orchestrator.agent.fake import FakeAgent, FakeLog, Stream, http_answer, status_of
from orchestrator.remote.wire import LoadgenResult, LoadgenSpec, PhaseEvent, RequestRecord
from orchestrator.results.report import load_results
from orchestrator.runner.execute import execute_run
from orchestrator.runner.progress import PointDone, PointStarted, RecordingObserver, RunPhase
from orchestrator.runner.server import ServerRegistry
from orchestrator.runner.state import RunJob
from tests.unit.test_runner_fake_agent import LOG, MODEL, job_for, make_run, measured, started_agent


def point(n: int, *, failed: bool = False) -> Stream:
    """One measurement's stream: ``n`` requests (all failed with ``failed``), then the result."""
    records: list[RequestRecord] = [
        RequestRecord(index=i, warmup=False, start=0.0, start_wall=1.7e9, end=0.2, status=500)
        if failed
        else measured(i)
        for i in range(n)
    ]
    done = LoadgenResult(
        requests=n,
        completed=0 if failed else n,
        failed=n if failed else 0,
        duration_s=1.0,
        started_at=1.7e9,
    )
    return Stream([PhaseEvent(phase="measure"), *records, done])


def sweep_agent(*loadgens: Stream) -> FakeAgent:
    models = json.dumps({"data": [{"id": MODEL}]})
    return (
        started_agent()
        .always("status", status_of("r1-id", alive=True))
        .always("http", http_answer(200, models))
        .always("tail", FakeLog(LOG, exited=False))
        .on("loadgen", *loadgens)
    )


def sweep_job(tmp_path: Path, **workload: Any) -> RunJob:
    base = {"prompts": "builtin:math", "num_prompts": 2, "warmup": 2}
    return job_for(tmp_path, make_run(workload={**base, **workload}))


def execute(job: RunJob, agent: FakeAgent, observer: RecordingObserver) -> list[Any]:
    async def scenario() -> Any:
        async with ServerRegistry() as registry:
            return await execute_run(
                job, agent=agent, reconnect=agent.reconnect, registry=registry, observer=observer
            )

    return list(asyncio.run(scenario()))


def loadgen_specs(agent: FakeAgent) -> list[LoadgenSpec]:
    specs = agent.specs("loadgen")
    assert all(isinstance(s, LoadgenSpec) for s in specs)
    return [s for s in specs if isinstance(s, LoadgenSpec)]


def test_one_server_measures_every_point_and_repeat_in_turn(tmp_path: Path) -> None:
    agent = sweep_agent(*(point(2) for _ in range(6)))
    observer = RecordingObserver()
    job = sweep_job(tmp_path, concurrency=[1, 4, 8], repeat=2)
    results = execute(job, agent, observer)

    verbs = [c.verb for c in agent.calls]
    assert verbs.count("launch") == 1 and verbs.count("stop") == 1
    specs = loadgen_specs(agent)
    assert [s.concurrency for s in specs] == [1, 1, 4, 4, 8, 8]
    assert [s.warmup for s in specs] == [2, 0, 0, 0, 0, 0]  # warmed once
    assert [(r.point.label, r.point.repeat) for r in results] == [
        ("c=1", 1),
        ("c=1", 2),
        ("c=4", 1),
        ("c=4", 2),
        ("c=8", 1),
        ("c=8", 2),
    ]
    assert all(r.error is None for r in results)
    folders = sorted(p.parent.name for p in job.run_dir.glob("points/*/summary.json"))
    assert folders == ["00-c1-r1", "00-c1-r2", "01-c4-r1", "01-c4-r2", "02-c8-r1", "02-c8-r2"]
    assert not (job.run_dir / "summary.json").exists()  # a sweep has no flat summary
    assert (job.run_dir / "server.log").exists()
    assert [r.run.folder for r in results][0] == "r1/points/00-c1-r1"
    assert [r.settings.workload.concurrency for r in results if r.settings.workload] == [
        1,
        1,
        4,
        4,
        8,
        8,
    ]
    started = [e for e in observer.events if isinstance(e, PointStarted)]
    assert [(e.label, e.done, e.total) for e in started][:3] == [
        ("c=1 #1", 0, 6),
        ("c=1 #2", 1, 6),
        ("c=4 #1", 2, 6),
    ]
    assert len([e for e in observer.events if isinstance(e, PointDone)]) == 6
    assert observer.phases(job.key)[-1] is RunPhase.DONE
    reread = load_results(tmp_path)
    assert [r.run.folder for r in reread] == [r.run.folder for r in results]


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    agent = sweep_agent(point(2), point(3, failed=True), point(2))
    observer = RecordingObserver()
    job = sweep_job(tmp_path, concurrency=[1, 64, 2])
    results = execute(job, agent, observer)

    assert [r.point.label for r in results] == ["c=1", "c=64", "c=2"]
    assert results[0].error is None and results[2].error is None
    assert results[1].error is not None and "failed" in results[1].error.message
    assert not results[1].not_run
    assert observer.phases(job.key)[-1] is RunPhase.FAILED  # the run says a point failed


def test_once_the_engine_died_the_points_left_are_not_run(tmp_path: Path) -> None:
    agent = sweep_agent(point(2), point(2))
    dead = {"now": False}

    def status(_spec: Any) -> Any:
        if len(agent.specs("loadgen")) >= 2:
            dead["now"] = True
        return status_of("r1-id", alive=not dead["now"], returncode=-9 if dead["now"] else None)

    agent.always("status", status)
    observer = RecordingObserver()
    job = sweep_job(tmp_path, concurrency=[1, 2, 4, 8])
    results = execute(job, agent, observer)

    assert [r.point.label for r in results] == ["c=1", "c=2", "c=4", "c=8"]
    assert results[0].error is None
    assert results[1].error is not None and results[1].error.type == "EngineError"
    assert [r.not_run for r in results] == [False, False, True, True]
    assert results[2].error is not None and "the server was lost at c=2" in results[2].error.message
    assert len(agent.specs("loadgen")) == 2  # nothing was sent to a dead server
    for folder in ("02-c4-r1", "03-c8-r1"):
        summary = json.loads((job.run_dir / "points" / folder / "summary.json").read_text())
        assert summary["error"]["type"] == "NotRun"


def test_a_run_that_never_starts_records_its_first_point_failed_and_the_rest_not_run(
    tmp_path: Path,
) -> None:
    from orchestrator.errors import HostUnreachable
    from orchestrator.runner.execute import failed_result

    job = sweep_job(tmp_path, request_rate=[0.5, 1.0, 2.0])
    results = failed_result(job, HostUnreachable("fake-gpu", "connection refused"))
    assert [r.point.label for r in results] == ["rate=0.5", "rate=1", "rate=2"]
    assert results[0].error is not None and results[0].error.type == "HostUnreachable"
    assert [r.not_run for r in results] == [False, True, True]


def test_an_slo_search_measures_where_the_bisection_points(tmp_path: Path) -> None:
    # the fake engine's TTFT grows with concurrency: 50 ms per request in flight
    def at(spec: Any) -> Stream:
        c = spec.concurrency
        records = [
            RequestRecord(
                index=i,
                warmup=False,
                start=0.0,
                start_wall=1.7e9,
                end=1.0,
                status=200,
                ttft=0.05 * c,
                e2el=1.0,
                chunks=(),
                output_tokens=10,
            )
            for i in range(2)
        ]
        records = [r.__class__(**{**r.__dict__, "chunks": measured(0).chunks}) for r in records]
        done = LoadgenResult(requests=2, completed=2, failed=0, duration_s=1.0, started_at=1.7e9)
        return Stream([PhaseEvent(phase="measure"), *records, done])

    agent = sweep_agent()
    agent.always("loadgen", at)
    observer = RecordingObserver()
    slo = {"targets": ["ttft_ms_p99 <= 500"], "search": "concurrency", "range": [1, 32]}
    job = sweep_job(tmp_path, concurrency=[1], slo=slo)
    results = execute(job, agent, observer)

    tried = [s.concurrency for s in loadgen_specs(agent)]
    assert tried[0] == 1 and 32 in tried and len(tried) == len(set(tried))
    met = {r.point.value: r.slo.met for r in results if r.slo}
    assert met[10] is True and met[11] is False  # 50 ms x 10 = 500 ms meets; 11 does not
    assert all(r.point.origin == "slo_search" for r in results[1:])
    found = json.loads((job.run_dir / "slo-search.json").read_text())
    assert found["best"] == 10 and found["kind"] == "concurrency"
    assert "c=11 missed ttft_ms_p99 <= 500" in found["explain"]


def test_every_measurement_but_the_last_is_written_before_the_next_begins(tmp_path: Path) -> None:
    """An interrupted sweep keeps what it measured: summaries do not wait for the run's end."""
    written: list[list[str]] = []
    job = sweep_job(tmp_path, concurrency=[1, 2, 4])

    def at(_spec: Any) -> Stream:
        written.append(sorted(p.parent.name for p in job.run_dir.glob("points/*/summary.json")))
        return point(2)

    agent = sweep_agent()
    agent.always("loadgen", at)
    execute(job, agent, RecordingObserver())
    assert written == [[], ["00-c1-r1"], ["00-c1-r1", "01-c2-r1"]]
