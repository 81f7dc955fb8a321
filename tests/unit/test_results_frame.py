"""The results DataFrame (``orchestrator.results.load``): its columns, the derived figures with
exact values, the folders it accepts, and the new summary.csv columns."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import orchestrator.results
from orchestrator.errors import OrchError
from orchestrator.results.frame import COLUMNS, frame_of, load, newest_results_folder
from orchestrator.results.report import CSV_COLUMNS, HISTORICAL_COLUMNS, summary_row
from tests.fixtures.run_results import T0, make_result, write_results
from tests.fixtures.sweep_results import measurement, write_sweep

# the columns of the design, in its order: a renamed column breaks notebooks
DESIGN_COLUMNS = [
    *("results_dir", "folder", "run", "host", "key", "config", "engine", "method"),
    *("draft_model", "num_draft_tokens", "model", "tensor_parallel", "gpu_name", "gpu_count"),
    *("engine_version", "orch_version", "load_kind", "load_value", "concurrency"),
    *("request_rate", "repeat", "repeats", "point_index", "origin", "verdict", "not_run"),
    *("error", "started_at", "noisy_ci"),
    *("completed", "failed", "duration_s", "request_throughput", "output_tok_s", "total_tok_s"),
    *("output_tok_s_per_gpu", "total_tok_s_per_gpu", "interactivity"),
    # issue 23: the decode against the GPUs' memory bandwidth
    *("roofline_pct", "decode_gb_s"),
    *("decode_tok_s_mean", "decode_tok_s_median", "decode_tok_s_p10", "decode_tok_s_p90"),
    *("ttft_ms_mean", "ttft_ms_median", "ttft_ms_p90", "ttft_ms_p99"),
    *("tpot_ms_mean", "tpot_ms_median", "tpot_ms_p90", "tpot_ms_p99"),
    *("itl_token_ms_mean", "itl_token_ms_median", "itl_token_ms_p90", "itl_token_ms_p99"),
    "itl_chunk_ms_median",
    *("e2el_ms_mean", "e2el_ms_median", "e2el_ms_p90", "e2el_ms_p99"),
    *("acceptance_length", "goodput_req_s", "goodput_fraction", "failure_rate"),
    # issue 23: energy and clocks, from the GPU samples around the window
    *("j_per_output_token", "j_per_token", "output_tok_s_per_w", "gpu_power_w", "sm_clock_mhz"),
    "gpu_throttled_pct",
    # the metric catalogue's diagnostics, then what is not a figure of merit
    *("engine_gen_tok_s", "client_lag_ms_p99", "loop_delay_ms_p99"),
    *("acceptance_source", "acceptance_per_position", "slo_met", "energy_problems"),
    # issue 20: the workload, so that rows of different workloads can be told apart
    *("prompts", "prompts_sha256", "num_prompts", "workload_duration_s", "input_len"),
    *("max_tokens", "api", "temperature", "ignore_eos", "burstiness", "seed"),
]


def test_the_columns_are_the_designs() -> None:
    assert COLUMNS == DESIGN_COLUMNS


@pytest.mark.parametrize(
    ("kwargs", "per_gpu", "total", "total_per_gpu", "interactivity"),
    [
        # 300 tok/s on 2 GPUs; (1000 + 3000) tokens / 10 s = 400 tok/s; 1000 / 20 ms = 50
        (
            {"out": 300.0, "tpot": 20.0, "prompt_tokens": 1000, "output_tokens": 3000},
            150.0,
            400.0,
            200.0,
            50.0,
        ),
        # no gpu_count recorded (schema 2): the tensor-parallel size is the GPU count
        (
            {"out": 300.0, "tpot": 8.0, "gpu_count": None, "tensor_parallel": 4},
            75.0,
            0.0,
            0.0,
            125.0,
        ),
        # recorded gpu_count wins over tensor_parallel
        ({"out": 90.0, "tpot": 40.0, "gpu_count": 3, "tensor_parallel": 1}, 30.0, 0.0, 0.0, 25.0),
        # an unknown TPOT (0 = no multi-token request) gives no interactivity
        ({"out": 90.0, "tpot": 0.0}, 45.0, 0.0, 0.0, math.nan),
    ],
)
def test_derived_figures_are_exact(
    kwargs: dict[str, object],
    per_gpu: float,
    total: float,
    total_per_gpu: float,
    interactivity: float,
) -> None:
    row = frame_of([("r", measurement(**kwargs))]).iloc[0]  # type: ignore[arg-type]
    assert row["output_tok_s_per_gpu"] == per_gpu
    assert row["total_tok_s"] == total
    assert row["total_tok_s_per_gpu"] == total_per_gpu
    if math.isnan(interactivity):
        assert math.isnan(row["interactivity"])
    else:
        assert row["interactivity"] == interactivity


def test_a_row_holds_the_settings_and_the_point() -> None:
    result = measurement(value=8, index=3, repeat=2, out=120.0, slo_met=False, goodput=1.5)
    row = frame_of([("results/a", result)]).iloc[0]
    assert row["results_dir"] == "results/a"
    assert row["folder"] == "vllm-dflash_h1/points/03-c8-r2"
    assert (row["run"], row["host"], row["key"]) == ("vllm-dflash", "h1", "vllm-dflash@h1")
    assert (row["config"], row["engine"], row["method"]) == ("vllm dflash", "vllm", "dflash")
    assert (row["draft_model"], row["num_draft_tokens"]) == ("z-lab/drafter", 15)
    assert (row["model"], row["gpu_name"], row["gpu_count"]) == (
        "Qwen/Qwen3.6-27B",
        "NVIDIA RTX A6000",
        2,
    )
    assert (row["load_kind"], row["load_value"], row["concurrency"]) == ("concurrency", 8.0, 8)
    assert (row["repeat"], row["repeats"], row["point_index"]) == (2, 2, 3)
    assert (row["verdict"], row["not_run"], row["origin"]) == ("ok", False, "sweep")
    assert (row["output_tok_s"], row["acceptance_length"]) == (120.0, 3.0)
    assert (row["ttft_ms_median"], row["ttft_ms_p99"], row["tpot_ms_median"]) == (50.0, 100.0, 20.0)
    assert (row["goodput_req_s"], row["slo_met"]) == (1.5, False)
    assert row["started_at"] == pd.Timestamp(T0, unit="s", tz="UTC")


def test_a_measurement_never_made_has_no_figures() -> None:
    frame = frame_of([("r", measurement(not_run=True, error="sim-a6000-1 went away"))])
    row = frame.iloc[0]
    assert (row["verdict"], row["not_run"], row["error"]) == (
        "failed",
        True,
        "sim-a6000-1 went away",
    )
    figures = ["output_tok_s", "output_tok_s_per_gpu", "interactivity", "acceptance_length"]
    assert all(math.isnan(row[c]) for c in figures)
    assert pd.isna(row["completed"]) and pd.isna(row["slo_met"])


def test_dtypes_do_not_depend_on_what_is_known() -> None:
    known = frame_of([("r", measurement(slo_met=True))])
    unknown = frame_of([("r", measurement(not_run=True))])
    assert known.dtypes.to_dict() == unknown.dtypes.to_dict()
    assert str(known["output_tok_s"].dtype) == "float64"
    assert str(known["completed"].dtype) == "Int64"
    assert known["config"].dtype == object and unknown["error"].dtype == object
    assert unknown["acceptance_source"].tolist() == [None]  # None, not NaN, for unknown text


def _sweep(folder: Path, out: float = 100.0) -> Path:
    return write_sweep(
        folder,
        [
            measurement(value=v, index=i, repeat=k, out=out * v + k)
            for i, v in enumerate((1, 4))
            for k in (1, 2)
        ],
    )


def test_load_takes_a_folder_a_list_or_a_parent(tmp_path: Path) -> None:
    a = _sweep(tmp_path / "results" / "20261201T100000Z-demo")
    b = _sweep(tmp_path / "results" / "20261202T100000Z-demo", out=200.0)
    (tmp_path / "results" / "report-20261203T000000Z").mkdir()  # no results: not a folder of them
    one = load(a)
    assert len(one) == 4 and set(one["results_dir"]) == {str(a)}
    assert list(one["output_tok_s"]) == [101.0, 102.0, 401.0, 402.0]  # point, then repeat
    both = load([a, str(b)])
    assert list(dict.fromkeys(both["results_dir"])) == [str(a), str(b)]
    parent = load(tmp_path / "results")
    assert list(dict.fromkeys(parent["results_dir"])) == [str(a), str(b)]
    assert orchestrator.results.load(a).equals(one)  # the package's own name for it
    assert newest_results_folder(tmp_path / "results") == b


def test_load_reads_a_flat_results_folder(tmp_path: Path) -> None:
    write_results(tmp_path, [make_result("a"), make_result("b", order=1, error="died")])
    frame = load(tmp_path)
    assert list(frame["run"]) == ["a", "b"]
    assert list(frame["verdict"]) == ["ok", "failed"]
    assert frame["load_kind"].isna().all()  # written without a load point


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "no such results folder"),
        (lambda p: p, "holds no run results"),
    ],
)
def test_load_of_a_bad_folder_is_one_clear_error(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(OrchError, match=message):
        load(make(tmp_path))


def test_no_results_folder_yet(tmp_path: Path) -> None:
    with pytest.raises(OrchError, match="no results folder under"):
        newest_results_folder(tmp_path / "results")


def test_summary_csv_appends_the_dashboard_columns() -> None:
    assert HISTORICAL_COLUMNS[-12:] == [
        *("model", "gpu_name", "gpu_count", "load_kind", "load_value", "repeat"),
        *("output_tok_s_per_gpu", "total_tok_s_per_gpu", "interactivity", "goodput_req_s"),
        "slo_met",
        "prompts_sha256",  # issue 20
    ]
    assert CSV_COLUMNS[:3] == ["run", "host", "engine"]  # the old columns keep their places
    assert CSV_COLUMNS[: len(HISTORICAL_COLUMNS)] == HISTORICAL_COLUMNS
    row = summary_row(
        measurement(
            value=4, repeat=2, out=300.0, tpot=25.0, prompt_tokens=500, output_tokens=1500,
            slo_met=True, goodput=2.5,
        )
    )  # fmt: skip
    assert (row["load_kind"], row["load_value"], row["repeat"]) == ("concurrency", 4.0, 2)
    assert (row["output_tok_s_per_gpu"], row["total_tok_s_per_gpu"]) == (150.0, 100.0)
    assert (row["interactivity"], row["goodput_req_s"], row["slo_met"]) == (40.0, 2.5, True)
