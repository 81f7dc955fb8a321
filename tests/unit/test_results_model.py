"""The run result model: summary.json of every schema version loads, round-trips, rejects what
it does not know, and carries `vllm bench serve`'s keys with values computed exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from orchestrator.loadgen.records import Chunk, RequestRecord
from orchestrator.metrics.summary import request_stats
from orchestrator.results.model import (
    VLLM_BENCH_KEYS,
    AcceptanceResult,
    LoadPoint,
    PrometheusDelta,
    ResultError,
    RunError,
    RunResult,
    RunSettings,
    RunTimes,
    RunWarning,
    WorkloadSettings,
)
from orchestrator.results.report import load_results, write_summary_csv
from tests.fixtures.run_results import make_result

V1 = Path(__file__).parents[1] / "fixtures" / "results" / "v1"
V1_FILES = sorted(V1.glob("**/summary.json")) + sorted((V1 / "synthetic").glob("*.json"))


def test_every_v1_fixture_is_there() -> None:
    assert [p.relative_to(V1).as_posix() for p in V1_FILES] == [
        "demo/sglang-mtp_sim-a6000-1/summary.json",
        "demo/vllm-dflash-broken_sim-a6000-2/summary.json",
        "demo/vllm-dflash_sim-a6000-2/summary.json",
        "synthetic/failed-agent.json",
        "synthetic/failed-engine.json",
        "synthetic/open-loop-warnings.json",
    ]


def test_v1_demo_loads_with_its_manifest() -> None:
    broken = RunResult.load(V1 / "demo" / "vllm-dflash-broken_sim-a6000-2" / "summary.json")
    assert broken.schema_version == 5 and broken.provenance.migrated_from == 1
    assert broken.point == LoadPoint(kind="concurrency", value=1)
    assert (broken.run.name, broken.run.key, broken.run.order) == (
        "vllm-dflash-broken",
        "vllm-dflash-broken@sim-a6000-2",
        2,
    )
    assert broken.settings.speculative.draft_model == "orch-demo/Qwen3.6-27B-DFlash-broken"
    assert broken.settings.tensor_parallel == 2
    assert broken.settings.workload == WorkloadSettings(
        prompts="builtin:mixed",
        num_prompts=4,
        concurrency=1,
        max_tokens=160,
        ignore_eos=True,
        warmup=2,
    )
    assert (broken.provenance.orch_version, broken.provenance.engine_version) == ("0.1.0", "0.33.0")
    assert broken.provenance.log_lines == (35, 54)  # was acceptance.log_lines
    assert broken.verdict == "collapse" and broken.collapse is not None
    assert [c.cause for c in broken.collapse.likely_causes][:1] == ["mask_token"]
    assert [f.check for f in broken.doctor] == ["target_layer_ids", "mask_token_id"]
    assert broken.requests is not None and broken.requests.ttft_ms.median == 55.595
    assert broken.requests.ttft_ms.std is None  # version 1 did not record it
    assert broken.times.measure_s == 34.017


def test_v1_without_manifest_loads_without_workload() -> None:
    failed = RunResult.load(V1 / "synthetic" / "failed-engine.json")
    assert failed.verdict == "failed" and failed.settings.workload is None
    assert failed.error == RunError(
        type="EngineError",
        message="gpu-a: the server exited with code 1 before it was ready",
        hint="lower max_model_len",
        cause="oom",
        exit_code=1,
        log_tail=["INFO loading", "torch.OutOfMemoryError: CUDA out of memory"],
    )
    agent = RunResult.load(V1 / "synthetic" / "failed-agent.json")
    assert agent.error is not None and agent.error.kind == "port_in_use"
    assert agent.to_json().get("completed") is None  # never measured: no vllm bench keys
    saturated = RunResult.load(V1 / "synthetic" / "open-loop-warnings.json")
    # version 1 wrote warnings as sentences: each has the kind its sentence names now, and the
    # verdict it was written with (a later policy does not judge an old result again)
    assert [w.kind for w in saturated.warnings] == ["client_saturated"] * 3
    assert saturated.warnings[0].message.startswith("client saturated: ")
    assert saturated.error is None and saturated.loadgen is not None
    assert saturated.loadgen.achieved_request_rate == pytest.approx(1.0)


def test_v1_csv_columns_are_unchanged(tmp_path: Path) -> None:
    """The CSV of version-1 results, written by this version, is the one version 1 wrote,
    column for column and digit for digit; new columns only come after."""
    shutil.copytree(V1 / "demo", tmp_path / "demo")
    path = write_summary_csv(tmp_path / "again.csv", load_results(tmp_path / "demo"))
    old = (V1 / "demo" / "summary.csv").read_text().splitlines()
    new = path.read_text().splitlines()
    width = len(old[0].split(","))
    assert [",".join(line.split(",")[:width]) for line in new] == old


@pytest.mark.parametrize("path", V1_FILES, ids=lambda p: p.parent.name + "/" + p.name)
def test_results_round_trip(path: Path) -> None:
    result = RunResult.load(path)
    text = json.dumps(result.to_json())
    again = RunResult.from_json(json.loads(text))
    assert again == result
    assert json.dumps(again.to_json()) == text


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    good = make_result("a", accept=3.0).to_json()
    RunResult.from_json(good)
    for where in ("top", "requests", "ttft", "v1"):
        obj = json.loads(json.dumps(good))
        if where == "top":
            obj["median_tpot"] = 1.0  # a misspelt vllm bench key is not dropped
        elif where == "requests":
            obj["requests"]["output_tok_s"] = 1.0
        elif where == "ttft":
            obj["requests"]["ttft_ms"]["p95"] = 1.0
        else:
            obj = json.loads((V1 / "synthetic" / "failed-engine.json").read_text())
            obj["extra"] = 1
        with pytest.raises(ValueError, match="Extra inputs are not permitted"):
            RunResult.from_json(obj)
    (tmp_path / "summary.json").write_text(json.dumps({**good, "schema_version": 6}))
    with pytest.raises(ResultError, match="schema_version 6 was written by a newer orch"):
        RunResult.load(tmp_path / "summary.json")


def record(
    index: int,
    start: float,
    chunks: list[tuple[float, int]],
    *,
    prompt: int = 0,
    warmup: bool = False,
    error: str | None = None,
) -> RequestRecord:
    done = error is None
    return RequestRecord(
        index=index,
        warmup=warmup,
        start=start,
        start_wall=1.0e9 + start,
        end=start + (chunks[-1][0] if chunks else 0.25),
        status=200 if done else 500,
        ttft=chunks[0][0] if chunks else None,
        e2el=chunks[-1][0] if chunks else None,
        chunks=tuple(Chunk(t, n) for t, n in chunks),
        output_tokens=sum(n for _, n in chunks) if done else None,
        prompt_tokens=prompt,
        token_count_method="usage",
        error=error,
    )


# The table: two completed requests, one failed, one warm-up (left out). Times in seconds.
RECORDS = [
    record(0, 0.0, [(0.5, 1), (0.75, 8)], prompt=99, warmup=True),
    record(1, 1.0, [(0.25, 1), (0.5, 2), (0.75, 2)], prompt=10),
    record(2, 1.5, [(0.125, 1), (0.25, 3), (0.375, 5), (0.5, 3)], prompt=20),
    record(3, 2.0, [], error="HTTP 500"),
]


def test_vllm_bench_keys_carry_exact_values() -> None:
    stats = request_stats(RECORDS)
    delta = PrometheusDelta(
        acceptance_length=4.0,
        per_position=[0.5, 0.25],
        drafts=100.0,
        draft_tokens=1500.0,
        accepted=300.0,
        generation_tokens=17.0,
        source="counter",
    )
    acc = AcceptanceResult(
        length=4.0,
        source="prometheus",
        prometheus=4.0,
        log=None,
        client=None,
        per_position=[0.5, 0.25],
        per_position_source="prometheus",
        prometheus_delta=delta,
    )
    result = make_result("dflash", requests=stats).model_copy(update={"acceptance": acc})
    out = result.to_json()
    ttft, e2el = [250.0, 125.0], [750.0, 500.0]
    tpot = [500.0 / 4, 375.0 / 11]
    itl = [250.0, 250.0, 125.0, 125.0, 125.0]  # every gap between chunks, pooled
    assert {
        k: out[k]
        for k in (
            "completed",
            "failed",
            "total_input_tokens",
            "total_output_tokens",
            "max_concurrency",
            "request_rate",
            "num_prompts",
            "model_id",
        )
    } == {
        "completed": 2,
        "failed": 1,
        "total_input_tokens": 30,
        "total_output_tokens": 17,
        "max_concurrency": 1,
        "request_rate": "inf",
        "num_prompts": 3,
        "model_id": "Qwen/Qwen3.6-27B",
    }
    assert out["duration"] == 1.25  # first measured request sent (1.0) -> last ended (2.25)
    assert out["request_throughput"] == 2 / 1.25
    assert out["output_throughput"] == 17 / 1.25
    assert out["total_token_throughput"] == 47 / 1.25
    assert (out["mean_ttft_ms"], out["median_ttft_ms"], out["std_ttft_ms"]) == (187.5, 187.5, 62.5)
    assert (out["mean_itl_ms"], out["median_itl_ms"]) == (175.0, 125.0)
    assert out["std_itl_ms"] == pytest.approx(3750**0.5, rel=1e-15)
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        expected = (np.mean(values), np.median(values), np.std(values), np.percentile(values, 99))
        got = tuple(out[f"{stat}_{name}_ms"] for stat in ("mean", "median", "std", "p99"))
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12), name
    assert out["spec_decode_acceptance_length"] == 4.0
    # percent, as vLLM writes it: 100 (4 - 1) / 15 = vLLM's 100 accepted / draft_tokens
    assert out["spec_decode_acceptance_rate"] == 20.0 == 100 * 300 / 1500
    assert (
        out["spec_decode_num_drafts"],
        out["spec_decode_draft_tokens"],
        out["spec_decode_accepted_tokens"],
    ) == (100, 1500, 300)
    assert out["spec_decode_per_position_acceptance_rates"] == [0.5, 0.25]
    assert RunResult.from_json(out) == result


def test_vllm_bench_key_names_are_vllms() -> None:
    """Spelled as vllm/benchmarks/serve.py writes them into its result JSON."""
    vllm_keys = {
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "model_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "spec_decode_acceptance_rate",
        "spec_decode_acceptance_length",
        "spec_decode_num_drafts",
        "spec_decode_draft_tokens",
        "spec_decode_accepted_tokens",
        "spec_decode_per_position_acceptance_rates",
        *(
            f"{s}_{m}_ms"
            for s in ("mean", "median", "std", "p99")
            for m in ("ttft", "tpot", "itl", "e2el")
        ),
    }
    assert set(VLLM_BENCH_KEYS) == vllm_keys
    tree = set(RunResult.model_fields)
    assert not tree & vllm_keys  # the view never shadows a key of the tree


def test_plain_run_has_no_spec_decode_figures() -> None:
    out = make_result("plain", method="none").to_json()
    assert out["spec_decode_acceptance_length"] is None
    assert out["spec_decode_acceptance_rate"] is None
    assert out["completed"] == 10


def test_masked_hides_secrets_everywhere() -> None:
    result = make_result("a", error="login failed with sk-secret-0123456789").model_copy(
        update={
            "error": RunError(
                type="EngineError",
                message="login failed with sk-secret-0123456789",
                log_tail=["args: {'api_key': ['whatever']}"],
            ),
            "warnings": [RunWarning(kind="note", message="token sk-secret-0123456789 seen")],
        }
    )
    masked = result.masked({"sk-secret-0123456789"})
    text = json.dumps(masked.to_json())
    assert "sk-secret-0123456789" not in text and "whatever" not in text
    assert masked.error is not None and masked.error.message == "login failed with ***"
    assert masked.warnings == [RunWarning(kind="note", message="token *** seen")]


def test_times_keep_milliseconds_and_exact_spans() -> None:
    times = RunTimes.from_epoch(
        started_at=1796219070.0004, ended_at=1796219071.0006, ready_at=1796219070.75
    )
    assert times.model_dump(mode="json") == {
        "started_at": "2026-12-02T13:44:30.000+00:00",
        "ready_at": "2026-12-02T13:44:30.750+00:00",
        "measure_started_at": None,
        "measure_ended_at": None,
        "ended_at": "2026-12-02T13:44:31.000+00:00",
        "duration_s": 1.0,
        "server_start_s": 0.75,
        "measure_s": None,
    }
    assert RunTimes.model_validate(times.model_dump(mode="json")) == times


def test_a_secret_equal_to_a_closed_value_does_not_break_the_result() -> None:
    # `--api-key chat` would otherwise turn the workload's api "chat" into "***", which the
    # model refuses: the result must still be written, the closed value kept, secrets hidden.
    warning = RunWarning(kind="note", message="key chat in use")
    result = make_result("a").model_copy(update={"warnings": [warning]})
    assert result.settings.workload is not None and result.settings.workload.api == "chat"
    masked = result.masked({"chat"})
    assert masked.settings.workload is not None and masked.settings.workload.api == "chat"
    assert masked.settings.engine == "vllm"


def test_a_notebook_may_pass_plain_strings() -> None:
    folder = V1 / "demo"
    path = folder / "vllm-dflash-broken_sim-a6000-2" / "summary.json"
    assert RunResult.load(str(path)) == RunResult.load(path)
    assert [r.run.name for r in load_results(str(folder))] == [
        r.run.name for r in load_results(folder)
    ]


def test_the_engine_is_one_orch_knows_or_unknown() -> None:
    """`orch loadgen` against a server whose /metrics names no engine writes "unknown"; any
    other name is not a result this orch wrote."""
    assert RunSettings(engine="unknown", model="m").engine == "unknown"
    with pytest.raises(ValueError, match="engine"):
        RunSettings(engine="trtllm", model="m")  # type: ignore[arg-type]
