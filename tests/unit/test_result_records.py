"""One record per fact: the run result's records are the domain and wire records themselves,
not copies of them declared a second time (issue: nine mirror pairs, 79 fields twice)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import orchestrator.config.playbook as playbook
import orchestrator.doctor.collapse as collapse
import orchestrator.doctor.findings as findings
import orchestrator.metrics.acceptance as acceptance
import orchestrator.metrics.prom as prom
import orchestrator.metrics.summary as summary
import orchestrator.remote.wire as wire
import orchestrator.results.model as model
from orchestrator.doctor.collapse import Cause, Collapse
from orchestrator.doctor.findings import Finding
from orchestrator.metrics.acceptance import Acceptance
from orchestrator.metrics.energy import window_energy
from orchestrator.metrics.prom import SpecDelta
from orchestrator.metrics.roofline import DecodeShape, RooflineInputs, roofline_point
from orchestrator.remote.wire import (
    ClientLag,
    GpuSample,
    LagStats,
    LoadgenResult,
    TelemetryResult,
)
from orchestrator.results.model import LoadgenInfo, RunResult
from orchestrator.results.store import write_json
from orchestrator.runner.summarize import (
    acceptance_result,
    collapse_verdict,
    finding_record,
    loadgen_info,
)
from tests.fixtures.run_results import make_result

# summary.json as orch wrote it before the mirrors went (main at d3ae23d, through
# runner/summarize.py's acceptance_result, collapse_verdict, finding_record, loadgen_info):
# every record the mirrors copied, filled
RESULTS = Path(__file__).parents[1] / "fixtures" / "results"
EVERY_RECORD = RESULTS / "v5" / "every-record.json"
EVERY_RECORD_V4 = RESULTS / "v4" / "every-record.json"  # before GPU telemetry

# Persisted records that still share most field names with a domain record, and why that is
# no mirror. Any other such pair is a copy to remove (reuse the record), not to list here.
ALLOWED_OVERLAPS = {
    ("model.WorkloadSettings", "wire.LoadgenSpec"): "what ran vs what the agent was asked",
    ("model.RunSettings", "playbook.RunDefaults"): "one load point of the spec",
    ("summary.Stats", "wire.LagStats"): "a distribution's figures: same names, other facts",
    # the controller's lag statistics: the per-request send lag it computes has no ``n``
    ("summary.LagStats", "wire.LagStats"): "n optional: computed send lag, older agents",
    # older agents sent a partial client lag; summary.json keeps what they sent
    ("model.LoadgenClientLag", "wire.ClientLag"): "every figure optional: older agents",
    # a run's settings at one load point: a projection of the spec (a sweep's list -> a value)
    ("model.WorkloadSettings", "playbook.WorkloadSpec"): "one load point of the spec",
    ("model.SpeculativeSettings", "playbook.SpeculativeSpec"): "three of the spec's fields",
    ("model.RunSettings", "playbook.RunSpec"): "one load point of the spec",
}


def _records(module: Any, prefix: str) -> dict[str, set[str]]:
    out = {}
    for name, obj in vars(module).items():
        if not inspect.isclass(obj) or obj.__module__ != module.__name__:
            continue
        if issubclass(obj, BaseModel):
            out[f"{prefix}.{name}"] = set(obj.model_fields)
        elif dataclasses.is_dataclass(obj):
            out[f"{prefix}.{name}"] = {f.name for f in dataclasses.fields(obj)}
    return out


def test_no_persisted_record_mirrors_a_domain_record() -> None:
    persisted = {**_records(model, "model"), **_records(summary, "summary")}
    domain = {
        **_records(wire, "wire"),
        **_records(acceptance, "acceptance"),
        **_records(prom, "prom"),
        **_records(collapse, "collapse"),
        **_records(findings, "findings"),
        **_records(playbook, "playbook"),
    }
    mirrors = {
        (p, d): sorted(pf & df)
        for p, pf in persisted.items()
        for d, df in domain.items()
        if len(pf & df) >= 3 and len(pf & df) >= 0.6 * min(len(pf), len(df)) and not _subclass(p, d)
    }
    assert set(mirrors) == set(ALLOWED_OVERLAPS), mirrors
    assert "model.LoadgenInfo" not in {p for p, _ in mirrors}


def _subclass(persisted: str, domain: str) -> bool:
    mod = {"model": model, "summary": summary}[persisted.split(".")[0]]
    dom = {"wire": wire}.get(domain.split(".")[0])
    p = getattr(mod, persisted.split(".")[1])
    return dom is not None and issubclass(p, getattr(dom, domain.split(".")[1]))


def test_the_result_tree_holds_the_domain_records_themselves() -> None:
    assert model.AcceptanceResult is Acceptance
    assert model.PrometheusDelta is SpecDelta
    assert model.CollapseVerdict is Collapse
    assert model.RankedCause is Cause
    assert model.FindingRecord is Finding
    assert issubclass(LoadgenInfo, LoadgenResult)


def _lag() -> ClientLag:
    return ClientLag(
        send_lag_ms=LagStats(n=4, mean=0.05, p50=0.05, p99=0.06, max=0.07),
        loop_delay_ms=LagStats(n=10, mean=1.0, p50=0.5, p99=5.0, max=9.0),
        loop_tick_ms=20.0,
    )


def test_the_wire_record_is_kept_whole_but_its_metrics_text() -> None:
    wire_result = LoadgenResult(
        requests=10,
        completed=9,
        failed=1,
        duration_s=2.5,
        client_lag=_lag(),
        metrics_before="vllm:x 1\n",
        metrics_after="vllm:x 2\n",
        cap_waits=3,
    )
    info = loadgen_info(wire_result, achieved=3.5, scheduled=4.0)
    result = make_result("a").model_copy(update={"loadgen": info})
    dumped = result.to_json()["loadgen"]
    assert isinstance(dumped, dict)
    wire_names = {f.name for f in dataclasses.fields(LoadgenResult)}
    assert set(dumped) == wire_names - {"metrics_before", "metrics_after"} | {
        "achieved_request_rate",
        "scheduled_request_rate",
    }
    assert dumped["cap_waits"] == 3 and dumped["achieved_request_rate"] == 3.5
    assert dumped["client_lag"] == dataclasses.asdict(_lag())
    again = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    assert again.loadgen is not None and again.loadgen.metrics_before is None


def test_domain_records_round_trip_and_reject_unknown_keys() -> None:
    delta = SpecDelta(2.5, [0.8, 0.7], 10.0, 30.0, 15.0, 40.0, "counter")
    acc = Acceptance(2.5, "prometheus", 2.5, 2.4, 2.6, [0.8], "prometheus", prometheus_delta=delta)
    cause = Cause(1, "mask_token", "finding", ["bad mask"], "fix it", ["mask_token_id"])
    verdict = Collapse("dflash", 4, 1.1, 1.5, None, ["low"], "collapsed", [cause])
    finding = Finding("mask_token_id", "error", "bad mask", {"found": 3})
    result = make_result("a").model_copy(
        update={"acceptance": acc, "collapse": verdict, "doctor": [finding]}
    )
    obj = json.loads(json.dumps(result.to_json()))
    assert RunResult.from_json(obj) == result
    assert obj["collapse"]["likely_causes"][0]["checks"] == ["mask_token_id"]
    assert obj["acceptance"]["prometheus_delta"]["draft_tokens"] == 30.0
    obj["acceptance"]["prometheus_delta"]["extra"] = 1
    with pytest.raises(ValidationError, match="extra"):
        RunResult.from_json(obj)
    obj["acceptance"]["prometheus_delta"].pop("extra")
    obj["acceptance"]["source"] = "guess"
    with pytest.raises(ValidationError, match="source"):
        RunResult.from_json(obj)


def _every_record() -> RunResult:
    """The inputs EVERY_RECORD was written from, through today's functions."""
    delta = SpecDelta(1.1, [0.08, 0.02], 100.0, 400.0, 10.0, 220.0, "counter")
    acc = Acceptance(
        1.1,
        "prometheus",
        1.1,
        1.12,
        1.3,
        [0.08, 0.02],
        "prometheus",
        ["client 1.300 vs prometheus 1.100 differ by 15%"],
        ["log: a note"],
    )
    coll = Collapse(
        "dflash",
        4,
        1.1,
        1.5,
        [0.08, 0.02],
        ["mean acceptance length 1.10 is below 1.50"],
        "speculation collapsed",
    )
    cause = Cause(
        1,
        "mask_token",
        "finding",
        ["mask token id 5 differs"],
        "set the drafter's mask_token_id",
        ["mask_token_id"],
    )
    finding = Finding(
        "mask_token_id", "error", "mask token id 5 differs", {"found": 5, "path": Path("models/x")}
    )
    changed = Finding("engine_changed", "warning", "page size 16 -> 32", {"requested": 16})
    lg = LoadgenResult(
        requests=12,
        completed=10,
        failed=2,
        duration_s=4.25,
        started_at=1764900000.5,
        ended_at=1764900004.75,
        warmup=2,
        output_tokens=960,
        mode="open",
        concurrency=8,
        request_rate=3.0,
        burstiness=1.0,
        client_lag=ClientLag(
            LagStats(12, 0.1, 0.08, 0.3, 0.4), LagStats(200, 0.9, 0.5, 4.0, 6.5), 20.0
        ),
        token_count_method="usage",
        token_count_methods={"usage": 10},
        prompt_source="list",
        input_len_exact=None,
        request_seeds=True,
        metrics_before="vllm:a 1\n",
        metrics_after="vllm:a 2\n",
        cache_reset="ok",
        event_loop="asyncio, json",
        arrival_clock="kernel",
        reconciled=10,
        token_count_mismatches=0,
        cap_waits=1,
        telemetry=TelemetryResult(
            source="nvml",
            interval_s=0.5,
            samples=[
                GpuSample(
                    1764900000.0 + i / 2,
                    0,
                    5_000_000 + 125_000 * i,
                    250.0,
                    1740,
                    8001,
                    20480,
                    97,
                    61,
                    0x4 if i > 6 else 0,
                )
                for i in range(12)
            ],
            power_limit_w={"0": 300.0},
            cpu_s=0.0125,
        ),
    )
    return make_result("full").model_copy(
        update={
            "acceptance": acceptance_result(acc, delta),
            "collapse": collapse_verdict(coll, [cause]),
            "doctor": [finding_record(finding)],
            "engine_changes": [finding_record(changed)],
            "loadgen": loadgen_info(lg, achieved=2.9, scheduled=3.05),
            "energy": window_energy(
                lg.telemetry.samples if lg.telemetry else [],
                1764900000.5,
                1764900004.75,
                output_tokens=960,
                total_tokens=2960,
            ),
            "roofline": roofline_point(
                RooflineInputs(
                    DecodeShape(51_196_723_200, 65_536, state_bytes_per_sequence=150_994_944),
                    2,
                    768.0,
                    "table: RTX A6000",
                ),
                step_ms=40.42,
                completed=10,
                duration_s=4.25,
                decode_ms_mean=420.0,
                prompt_tokens=2000,
                output_tokens=960,
            ),
        }
    )


def test_a_summary_before_telemetry_reads_as_one_without_it() -> None:
    old = RunResult.load(EVERY_RECORD_V4)
    assert old.schema_version == 5 and old.provenance.migrated_from == 4
    assert old.energy is None and old.loadgen is not None and old.loadgen.telemetry is None
    assert (
        old.model_copy(
            update={"provenance": old.provenance.model_copy(update={"migrated_from": None})}
        ).acceptance
        == _every_record().acceptance
    )


def test_a_summary_written_before_reads_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    written = EVERY_RECORD.read_bytes()
    loaded = RunResult.load(EVERY_RECORD)
    assert loaded == _every_record()
    again = write_json(tmp_path / "summary.json", loaded.to_json())
    assert again.read_bytes() == written
    fresh = write_json(tmp_path / "fresh.json", _every_record().to_json())
    assert fresh.read_bytes() == written
