"""A night's history rows from a results folder (``record_night``), the case key of a
measurement (``case_of``) and the night's attributes from the runs' manifests; and one night
end to end (``judge_results``) with its nightly.md and nightly.json."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from orchestrator.errors import OrchError
from orchestrator.nightly.cases import CaseKey, NightAttributes, case_of, client_version
from orchestrator.nightly.history import History
from orchestrator.nightly.night import judge_results
from orchestrator.nightly.record import record_night
from orchestrator.nightly.report import JSON_FILE, MD_FILE, write_nightly
from orchestrator.results.model import Provenance, RunResult
from orchestrator.results.store import write_json
from tests.fixtures.manifest_records import run_manifest
from tests.fixtures.run_results import collapse_verdict
from tests.fixtures.sweep_results import measurement, write_sweep

NIGHT = "20261202T030000Z-nightly"
MANIFEST = run_manifest(
    engine_version="0.9.1",
    orch_version="0.1.0",
    facts={"driver_version": "550.54", "hostname": "gpu-box-1"},
    playbook={"name": "nightly", "git": {"commit": "abc123", "dirty": False}},
    run={"extra_args": ["--max-num-seqs", "64", "--revision", "r2"]},
).to_json()


def spec_repeat(repeat: int, out: float, *, failed: int = 0, host: str = "h1") -> RunResult:
    """A repeat of the speculative run at c=8, orch 0.1.0, with its acceptance per position."""
    base = measurement(value=8, repeat=repeat, repeats=3, out=out, host=host)
    assert base.requests is not None and base.acceptance is not None
    return base.model_copy(
        update={
            "provenance": Provenance(orch_version="0.1.0", engine_version="0.9.1"),
            "requests": base.requests.model_copy(update={"failed": failed}),
            "acceptance": dataclasses.replace(
                base.acceptance, per_position=[0.8, 0.5 + repeat / 10]
            ),
        }
    )


def night_folder(root: Path, name: str, results: list[RunResult], manifest: bool = True) -> Path:
    folder = write_sweep(root / name, results)
    if manifest:
        for run in {r.run.folder.split("/")[0] for r in results}:
            write_json(folder / run / "manifest.json", MANIFEST)
    return folder


def rows_by_metric(folder: Path) -> dict[tuple[str, str], object]:
    return {(r.case.method, r.metric): r for r in record_night(folder)}


def test_a_nights_rows_from_its_results(tmp_path: Path) -> None:
    results = [spec_repeat(1, 100.0), spec_repeat(2, 110.0), spec_repeat(3, 120.0, failed=1)]
    down = measurement("vllm", method="none", value=8, not_run=True, error="h1 went away")
    folder = night_folder(tmp_path, NIGHT, [*results, down])
    rows = record_night(folder)
    assert [(r.case.method, r.metric) for r in rows] == [
        *(("none", m) for m in ("output_tok_s", "decode_tok_s_median", "ttft_ms_median")),
        *(("none", m) for m in ("ttft_ms_p99", "tpot_ms_median", "tpot_ms_p99", "failure_rate")),
        *(("dflash", m) for m in ("output_tok_s", "decode_tok_s_median", "ttft_ms_median")),
        *(("dflash", m) for m in ("ttft_ms_p99", "tpot_ms_median", "tpot_ms_p99")),
        *(("dflash", m) for m in ("acceptance_length", "failure_rate")),
        ("dflash", "acceptance_pos_1"),
        ("dflash", "acceptance_pos_2"),
    ]  # in run order ("vllm" before "vllm-dflash"), then the metrics' order
    by = {(r.case.method, r.metric): r for r in rows}
    out = by[("dflash", "output_tok_s")]
    assert (out.night, out.playbook, out.status, out.n) == (NIGHT, "nightly", "measured", 3)
    assert out.night_time == datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)
    assert (out.value, out.spread, out.values) == (110.0, 10.0, (100.0, 110.0, 120.0))
    assert (out.direction, out.failed_repeats, out.collapse) == ("higher", 0, False)
    assert by[("dflash", "ttft_ms_p99")].values == (100.0, 100.0, 100.0)
    assert by[("dflash", "failure_rate")].values == (0.0, 0.0, 1 / 11)
    assert by[("dflash", "acceptance_pos_2")].values == pytest.approx((0.6, 0.7, 0.8))
    decode = by[("dflash", "decode_tok_s_median")]  # never measured: no figure, not a zero
    assert (decode.status, decode.n, decode.value, decode.values) == ("insufficient", 0, None, ())
    failed = by[("none", "output_tok_s")]
    assert (failed.status, failed.n, failed.value, failed.note) == (
        "failed",
        0,
        None,
        "h1 went away",
    )
    assert out.attributes == NightAttributes(
        engine_version="0.9.1",
        model_revision="r2",
        driver_version="550.54",
        hosts=("h1",),
        hostnames=("gpu-box-1",),
        orch_version="0.1.0",
        playbook_commit="abc123",
        playbook_dirty=False,
    )


def test_a_failed_repeat_among_good_ones_is_named(tmp_path: Path) -> None:
    """The figures come from the good repeats; the first failure's message says why the
    night cannot be judged (a saturated client is not a dead host)."""
    why = "client saturated: send lag median 80.0 ms > 50 ms"
    error = measurement(value=8, repeat=3, repeats=3, error=why).error
    failed = spec_repeat(3, 120.0).model_copy(update={"error": error})
    folder = night_folder(tmp_path, NIGHT, [spec_repeat(1, 100.0), spec_repeat(2, 110.0), failed])
    out = rows_by_metric(folder)[("dflash", "output_tok_s")]
    assert (out.status, out.n, out.failed_repeats, out.note) == ("measured", 2, 1, why)  # type: ignore[attr-defined]


def test_the_same_case_on_two_hosts_pools_its_repeats(tmp_path: Path) -> None:
    results = [spec_repeat(1, 100.0), spec_repeat(1, 104.0, host="h2")]
    folder = night_folder(tmp_path, NIGHT, results, manifest=False)
    out = rows_by_metric(folder)[("dflash", "output_tok_s")]
    assert (out.values, out.attributes.hosts, out.attributes.engine_version) == (  # type: ignore[attr-defined]
        (100.0, 104.0),
        ("h1", "h2"),
        "0.9.1",  # from the results' provenance when there is no manifest
    )


def test_a_collapse_marks_its_case(tmp_path: Path) -> None:
    collapsed = spec_repeat(2, 60.0).model_copy(update={"collapse": collapse_verdict(1.1)})
    folder = night_folder(tmp_path, NIGHT, [spec_repeat(1, 100.0), collapsed])
    rows = record_night(folder)
    assert {(r.collapse, r.note) for r in rows} == {(True, "speculation collapsed")}


def test_no_results_is_an_error_that_says_what_to_give(tmp_path: Path) -> None:
    (tmp_path / NIGHT).mkdir()
    with pytest.raises(OrchError, match="holds no run results") as caught:
        record_night(tmp_path / NIGHT)
    assert caught.value.hint and "results/<stamp>-nightly" in caught.value.hint


def test_the_case_key_and_its_id() -> None:
    case = case_of(spec_repeat(1, 100.0))
    assert case == CaseKey(
        engine="vllm",
        model="Qwen/Qwen3.6-27B",
        method="dflash",
        draft_model="z-lab/drafter",
        num_draft_tokens=15,
        tensor_parallel=2,
        gpu_name="NVIDIA RTX A6000",
        gpu_count=2,
        prompts="builtin:mixed",
        num_prompts=10,
        duration_s=None,
        input_len=None,
        max_tokens=160,
        ignore_eos=True,
        api="chat",
        temperature=0.0,
        load_kind="concurrency",
        load_value=8.0,
        client_version="0.1",
    )
    assert case.label == (
        "vllm dflash (z-lab/drafter, k=15) · Qwen/Qwen3.6-27B · TP2 · 2 × NVIDIA RTX A6000 · "
        "builtin:mixed out=160 ignore_eos · c=8"
    )
    # the id is a history's key across orch versions: this value must never change
    assert case.id == "806f27b8046e"
    # every field is part of it
    changed = {dataclasses.replace(case, **{f.name: "x"}).id for f in dataclasses.fields(case)}  # type: ignore[arg-type]
    assert len(changed | {case.id}) == len(dataclasses.fields(case)) + 1
    # what a night may change is not part of it: another host, another engine version
    other = spec_repeat(2, 90.0, host="h9").model_copy(
        update={"provenance": Provenance(orch_version="0.1.7", engine_version="0.10.0")}
    )
    assert case_of(other) == case


@pytest.mark.parametrize(
    ("version", "kept"), [("0.1.0", "0.1"), ("1.12.3.dev4+g1234", "1.12"), (None, "unknown")]
)
def test_the_client_version_is_major_minor(version: str | None, kept: str) -> None:
    assert client_version(version) == kept


def test_one_night_end_to_end(tmp_path: Path) -> None:
    root = tmp_path / "results"
    steady = [100.0, 101.0, 99.0]
    for i in range(6):  # 5 steady nights: the default alpha's t-test decides
        values = steady if i < 5 else [90.0, 91.0, 89.0]
        results = [spec_repeat(k + 1, v) for k, v in enumerate(values)]
        folder = night_folder(root, f"2026120{i + 1}T030000Z-nightly", results)
        verdict = judge_results(folder, find=lambda values: None)
    assert (verdict.verdict, verdict.exit_code) == ("suspicious", 2)
    [case] = verdict.cases
    out = next(m for m in case.metrics if m.metric == "output_tok_s")
    assert (out.verdict, out.baseline, out.since) == ("suspicious", 100.0, folder.name)
    store = History(root, "nightly")
    assert len(store.nights()) == 6 and store.path.parent == root / "history"
    md, js = write_nightly(verdict, folder)
    assert (md.name, js.name) == (MD_FILE, JSON_FILE)
    text = md.read_text()
    assert text.startswith("# Nightly: SUSPICIOUS (exit 2)\n")
    assert "- **output_tok_s** 100.0 tok/s → 90.0 tok/s (-10.0%; threshold 5%; p=" in text
    assert f"  - since `{folder.name}` (1 night), last good `20261205T030000Z-nightly`" in text
    obj = json.loads(js.read_text())
    assert (obj["verdict"], obj["exit_code"], obj["night"]) == ("suspicious", 2, folder.name)
    assert obj["cases"][0]["case_id"] == case.case_id
    with pytest.raises(OrchError, match="refusing to overwrite"):
        write_nightly(verdict, folder)
    # the same night again: judged again from the history, never appended twice
    again = judge_results(folder, append=False, find=lambda values: None)
    assert again.verdict == "suspicious"
    with pytest.raises(OrchError, match="is already in"):
        judge_results(folder, find=lambda values: None)
    assert not math.isnan(out.p_value or math.nan)


def test_workload_fields_added_to_the_key_keep_old_ids_and_split_new_cases() -> None:
    import dataclasses
    import hashlib
    import json

    from tests.fixtures.nightly_histories import CASE

    old = {
        k: v
        for k, v in dataclasses.asdict(CASE).items()
        if k not in ("burstiness", "cap", "seed", "prompts_sha256")
    }
    text = json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert CASE.id == hashlib.sha256(text.encode()).hexdigest()[:12]  # as recorded before
    others = {
        dataclasses.replace(CASE, seed=1).id,
        dataclasses.replace(CASE, burstiness=0.5).id,
        dataclasses.replace(CASE, cap=32).id,
        dataclasses.replace(CASE, prompts_sha256="ab" * 32).id,
    }
    assert len(others) == 4 and CASE.id not in others


def test_a_history_line_without_the_later_key_fields_reads_as_their_defaults() -> None:
    from orchestrator.nightly.rows import HistoryRow
    from tests.fixtures.nightly_histories import row

    line = row(0, "output_tok_s", [1.0, 2.0]).to_json()
    for later in ("burstiness", "cap", "seed", "prompts_sha256", "v"):
        del line[later]
    assert HistoryRow.from_json(line).case_id == row(0, "output_tok_s", [1.0]).case_id
