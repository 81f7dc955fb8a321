"""One verdict policy (issue 20, item 5): ``assess`` on each finding, the evidence read from
a measurement's records, the result's ``error`` it gives, old warnings migrated to typed ones,
and a failed measurement kept out of a sweep point's interval and out of the nightly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.errors import ResultsWriteError
from orchestrator.loadgen.records import Chunk, ClientLag, LagStats, LoadgenResult, RequestRecord
from orchestrator.nightly.record import record_night
from orchestrator.remote.wire import GpuSample, RequestFailure, TelemetryResult
from orchestrator.results.frame import frame_of
from orchestrator.results.migrate import migrate
from orchestrator.results.model import RunResult, RunWarning
from orchestrator.results.stats import aggregate
from orchestrator.results.validity import FAILING_KINDS, Evidence, assess
from orchestrator.runner.assemble import Measured, assemble, evidence, measurement_error
from tests.fixtures.sweep_results import measurement, write_sweep

SATURATED = RunWarning(kind="client_saturated", message="client saturated: loop late")


def test_nothing_found_is_ok() -> None:
    verdict = assess(Evidence(requests=10, completed=10))
    assert verdict.verdict == "ok" and verdict.findings == () and verdict.reasons == ()
    assert measurement_error(verdict) is None


def test_any_failed_request_fails_it_by_default() -> None:
    seen = Evidence(
        requests=10,
        completed=9,
        failed=1,
        failures={"timeout": 1},
        errors={"timed out after 600 s": 1},
    )
    verdict = assess(seen)
    assert verdict.verdict == "failed"
    (finding,) = verdict.reasons
    assert finding.kind == "requests_failed"
    assert finding.message == (
        "1 of 10 measured requests failed (10.0%, more than max_failed_fraction 0 allows): "
        "1 x timed out after 600 s"
    )
    assert finding.details == {
        "requests": 10,
        "completed": 9,
        "failed": 1,
        "by_kind": {"timeout": 1},
        "max_failed_fraction": 0.0,
    }
    error = measurement_error(verdict)
    assert error is not None
    assert (error.type, error.kind, error.cause) == ("MeasurementFailed", "requests_failed", None)
    assert error.message == finding.message


@pytest.mark.parametrize(("limit", "verdict"), [(0.1, "ok"), (0.09, "failed"), (0.5, "ok")])
def test_the_failure_rate_threshold(limit: float, verdict: str) -> None:
    """Past max_failed_fraction fails; at or under it the measurement stands, and still warns
    how many failed (its figures cover only the completed ones)."""
    judged = assess(Evidence(requests=10, completed=9, failed=1), max_failed_fraction=limit)
    assert judged.verdict == verdict
    (finding,) = judged.findings
    assert finding.kind == "requests_failed" and finding.details["failed"] == 1
    if verdict == "ok":
        assert f"within max_failed_fraction {limit:g}); the figures cover only the 9" in (
            finding.message
        )


def test_no_completed_request_fails_whatever_the_threshold() -> None:
    judged = assess(
        Evidence(requests=4, completed=0, failed=4, errors={"HTTP 500: x": 4}),
        max_failed_fraction=0.99,
    )
    assert judged.failed and judged.none_completed
    assert judged.message() == "every measured request failed (4 of 4): 4 x HTTP 500: x"
    error = measurement_error(judged)
    assert error is not None and error.cause == "all_requests_failed"
    nothing = assess(Evidence(requests=0, completed=0), max_failed_fraction=0.5)
    assert nothing.message() == "no measured request was sent (0 of 0)"


@pytest.mark.parametrize(
    ("seen", "kind"),
    [
        (Evidence(requests=4, completed=4, saturation=[SATURATED]), "client_saturated"),
        (Evidence(requests=4, completed=4, truncated=["2 records lost"]), "window_truncated"),
        (Evidence(requests=4, completed=3, failed=1, token_count_mismatches=1), None),
        (Evidence(requests=4, completed=4, engine_died="engine exited 1"), "engine_died"),
    ],
)
def test_each_finding_fails_the_measurement(seen: Evidence, kind: str | None) -> None:
    """Even under a lenient failure-rate threshold: these are not a share of requests."""
    judged = assess(seen, max_failed_fraction=0.5)
    assert judged.verdict == "failed"
    if kind is None:  # a token count mismatch: its request failed (within the threshold) too
        assert [f.kind for f in judged.findings] == ["requests_failed", "token_count_mismatch"]
        kind = "token_count_mismatch"
    assert [r.kind for r in judged.reasons] == [kind]
    assert measurement_error(judged) is not None


def test_every_reason_is_in_the_error_in_order() -> None:
    judged = assess(
        Evidence(requests=2, completed=1, failed=1, saturation=[SATURATED], truncated=["cut"])
    )
    assert [r.kind for r in judged.reasons] == [
        "requests_failed",
        "client_saturated",
        "window_truncated",
    ]
    assert judged.message().split(" | ")[1:] == ["client saturated: loop late", "cut"]
    assert {r.kind for r in judged.reasons} <= FAILING_KINDS


def record(index: int, *, failure: RequestFailure | None = None, warmup: bool = False) -> RequestRecord:  # fmt: skip
    chunks = () if failure else (Chunk(0.1, 1), Chunk(0.2, 1))
    return RequestRecord(
        index=index, warmup=warmup, start=float(index), start_wall=1e9 + index, end=index + 0.3,
        due=float(index), status=200 if failure is None else 500, ttft=0.1, e2el=0.2,
        chunks=chunks, output_tokens=len(chunks), failure=failure,
        error=None if failure is None else f"{failure}: x",
    )  # fmt: skip


def loadgen_of(records: list[RequestRecord], *, loop_p99: float = 1.0, **fields: int) -> LoadgenResult:  # fmt: skip
    measured = [r for r in records if not r.warmup]
    ok = sum(r.ok for r in measured)
    lag = ClientLag(
        send_lag_ms=LagStats(n=len(measured), mean=0.0, p50=0.0, p99=0.0, max=0.0),
        loop_delay_ms=LagStats(n=50, mean=1.0, p50=1.0, p99=loop_p99, max=loop_p99),
        loop_tick_ms=20.0,
    )
    counts = {"requests": len(measured), "completed": ok, "failed": len(measured) - ok}
    return LoadgenResult(
        duration_s=3.0, started_at=1e9, ended_at=1e9 + 3, concurrency=2, client_lag=lag,
        output_tokens=2 * ok, **{**counts, **fields},
    )  # fmt: skip


def test_evidence_counts_failures_by_kind_and_missing_records() -> None:
    records = [
        record(0, warmup=True, failure=RequestFailure.TIMEOUT),  # warm-up: not measured
        record(1),
        record(2, failure=RequestFailure.ABORTED),
        record(3, failure=RequestFailure.ABORTED),
        record(4, failure=RequestFailure.TOKEN_COUNT_MISMATCH),
    ]
    seen = evidence(
        loadgen_of(records, token_count_mismatches=1, requests=6),
        records,
        lost=ResultsWriteError("requests.jsonl", "no space left on device"),
    )
    assert (seen.requests, seen.completed, seen.failed) == (6, 1, 3)
    assert dict(seen.failures) == {"aborted": 2, "token_count_mismatch": 1}
    assert seen.token_count_mismatches == 1
    assert list(seen.truncated) == [
        "cannot write requests.jsonl: no space left on device",
        "2 of the 6 measured requests' records never arrived: the figures would miss them",
    ]
    # a record written before failure kinds existed gets the kind its status implies
    old = RequestRecord(index=9, warmup=False, start=0, start_wall=0, end=1, status=503,
                        error="HTTP 503: busy")  # fmt: skip
    assert dict(evidence(loadgen_of([old]), [old]).failures) == {"http_status": 1}


def test_a_v3_summary_gets_typed_warnings(tmp_path: Path) -> None:
    """Results folders written before warnings had kinds still load, with the kinds their
    sentences name, and keep the verdict they were written with."""
    current = measurement().to_json()
    old = {**current, "schema_version": 3, "provenance": {"orch_version": "0.1.0"}}
    old["warnings"] = [
        "client saturated: send lag p99 119.0 ms > 100 ms: requests left later than due",
        "1 of 8 measured requests failed: the figures cover only the ones that completed "
        "(requests.jsonl holds each error)",
        "prefix cache not reset before this point: failed: 404",
        "something else entirely",
    ]
    (tmp_path / "summary.json").write_text(json.dumps(old))
    result = RunResult.load(tmp_path / "summary.json")
    assert result.schema_version == 5 and result.provenance.migrated_from == 3
    assert [w.kind for w in result.warnings] == [
        "client_saturated",
        "requests_failed",
        "cache_not_reset",
        "note",
    ]
    assert [w.message for w in result.warnings] == old["warnings"]
    assert result.error is None  # not judged again
    assert migrate(result.to_json())["warnings"] == result.to_json()["warnings"]


def saturated_repeat(repeat: int, tmp_root: Path | None = None) -> RunResult:
    """A repeat whose client's event loop was 45 ms late: assembled by the one assembler."""
    base = measurement(value=8, repeat=repeat, repeats=2, out=100.0)
    records = [record(i) for i in range(4)]
    return assemble(
        Measured(
            run=base.run,
            settings=base.settings,
            times=base.times,
            point=base.point,
            records=records,
            loadgen=loadgen_of(records, loop_p99=45.0),
        )
    ).result


def test_a_saturated_repeat_is_failed_and_left_out_of_the_points_interval(
    tmp_path: Path,
) -> None:
    bad = saturated_repeat(2)
    assert bad.verdict == "failed" and bad.error is not None
    assert bad.error.kind == "client_saturated"
    good = measurement(value=8, repeat=1, repeats=2, out=100.0)
    folder = write_sweep(tmp_path / "r", [good, bad])
    frame = frame_of((str(folder), RunResult.load(p)) for p in sorted(folder.rglob("summary.json")))
    (point,) = aggregate(frame, ["output_tok_s"]).to_dict("records")
    assert (point["repeats"], point["failed_repeats"], point["output_tok_s_n"]) == (2, 1, 1)
    assert point["output_tok_s_mean"] == pytest.approx(100.0)


def test_a_night_whose_measurements_the_policy_failed_is_not_measured(tmp_path: Path) -> None:
    """The nightly judges no figure of a failed measurement: the case could not be measured."""
    folder = write_sweep(
        tmp_path / "20261202T030000Z-nightly", [saturated_repeat(1), saturated_repeat(2)]
    )
    rows = record_night(folder, playbook="nightly")
    assert rows and {r.status for r in rows} == {"failed"}
    assert all(r.n == 0 and r.value is None and r.failed_repeats == 2 for r in rows)
    assert rows[0].note is not None and rows[0].note.startswith("client saturated: ")


def test_failed_requests_allowed_by_the_threshold_flag_the_energy_per_token() -> None:
    """1 of 4 failed, within a 30% threshold: the GPUs' energy includes its work, the tokens
    per joule only the completed requests': J/token is flagged as high, the measurement stands."""
    base = measurement(value=8, repeat=1, repeats=1, out=100.0)
    workload = base.settings.workload
    assert workload is not None
    settings = base.settings.model_copy(
        update={"workload": workload.model_copy(update={"max_failed_fraction": 0.3})}
    )
    records = [record(0), record(1), record(2), record(3, failure=RequestFailure.ABORTED)]
    samples = [
        GpuSample(1e9 - 1 + i / 10, 0, 10**6 + 20_000 * i, 200.0, 1740, 8001, 1, 97, 60, 0)
        for i in range(51)
    ]
    telemetry = TelemetryResult(source="nvml", interval_s=0.1, samples=samples)
    loadgen = dataclasses.replace(loadgen_of(records), telemetry=telemetry)
    result = assemble(
        Measured(base.run, settings, base.times, base.point, records=records, loadgen=loadgen)
    ).result
    assert result.error is None and result.energy is not None
    assert result.energy.energy_j == pytest.approx(600.0, rel=1e-3)  # 200 W x 3 s
    assert result.energy.problems == (
        "1 of 4 requests failed: the energy includes their work, the tokens per joule only "
        "the completed requests' tokens (J/token is high)",
    )
    assert "telemetry_unsound" in [w.kind for w in result.warnings]
    # and the DataFrame and summary.csv say so beside the figures
    assert frame_of([("r", result)])["energy_problems"].tolist() == [result.energy.problems[0]]


def test_another_process_on_the_engines_gpus_flags_the_energy() -> None:
    base = measurement(value=8, repeat=1, repeats=1, out=100.0)
    records = [record(i) for i in range(4)]
    samples = [
        GpuSample(1e9 - 1 + i / 10, 0, 10**6 + 20_000 * i, 200.0, 1740, 8001, 1, 97, 60, 0)
        for i in range(51)
    ]
    telemetry = TelemetryResult(
        source="nvml", interval_s=0.1, samples=samples, foreign_pids={"0": [4242, 4343]}
    )
    loadgen = dataclasses.replace(loadgen_of(records), telemetry=telemetry)
    result = assemble(
        Measured(base.run, base.settings, base.times, base.point, records=records, loadgen=loadgen)
    ).result
    assert result.error is None and result.energy is not None
    assert result.energy.problems == (
        "GPU 0: another process than the engine's (pid 4242, 4343) computed on it around the "
        "window: its energy is counted too",
    )
