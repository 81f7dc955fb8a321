"""``summary.csv``: one row per measurement (a run, or a sweep's load point and repeat), made
from the results (``RunResult``) only, and the figures derived from them (``derived``: throughput
per GPU, interactivity) that the CSV, the results DataFrame and the report share.

A report can be rebuilt from a results folder alone (``orch report DIR``): ``load_results``
reads every measurement's summary.json back into the model, whatever schema version wrote it.
Columns are only ever appended, so scripts reading the CSV by position keep working.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.results.model import RunResult
from orchestrator.results.store import set_aside_name, write_bytes

CsvValue = str | int | float | bool | None

CSV_COLUMNS = [
    "run",
    "host",
    "engine",
    "method",
    "num_draft_tokens",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "output_tok_s",
    "decode_tok_s_mean",
    "decode_tok_s_median",
    "decode_tok_s_p10",
    "decode_tok_s_p90",
    "ttft_ms_median",
    "ttft_ms_p90",
    "tpot_ms_median",
    "tpot_ms_p90",
    "itl_chunk_ms_median",
    "itl_token_ms_median",
    "acceptance_length",
    "acceptance_source",
    "acceptance_length_prometheus",
    "acceptance_length_log",
    "acceptance_length_client",
    "acceptance_disagreement",
    "engine_gen_tok_s",
    "client_lag_ms_p99",
    "loop_delay_ms_p99",
    "collapse",
    "error",
    # since schema version 2 (appended, so that the columns above keep their places)
    "draft_model",
    "tensor_parallel",
    "prompts",
    "concurrency",
    "request_rate",
    "max_tokens",
    "spec_decode_acceptance_rate",
    # since issue 10 (sweeps): the columns public dashboards compare configurations by
    "model",
    "gpu_name",
    "gpu_count",
    "load_kind",
    "load_value",
    "repeat",
    "output_tok_s_per_gpu",
    "total_tok_s_per_gpu",
    "interactivity",
    "goodput_req_s",
    "slo_met",
    # since issue 20: the prompts' content, so rows on a rewritten prompt file are told apart
    "prompts_sha256",
]

# Decimals kept per float column (trailing zeros dropped). Fixed-point, never an exponent:
# a spreadsheet or `column -t` shows 12345.67 tok/s, not 1.235e+04.
CSV_DECIMALS = {
    "duration_s": 3,
    "request_throughput": 4,
    "output_tok_s": 2,
    "decode_tok_s_mean": 2,
    "decode_tok_s_median": 2,
    "decode_tok_s_p10": 2,
    "decode_tok_s_p90": 2,
    "ttft_ms_median": 3,
    "ttft_ms_p90": 3,
    "tpot_ms_median": 3,
    "tpot_ms_p90": 3,
    "itl_chunk_ms_median": 3,
    "itl_token_ms_median": 3,
    "acceptance_length": 4,
    "acceptance_length_prometheus": 4,
    "acceptance_length_log": 4,
    "acceptance_length_client": 4,
    "engine_gen_tok_s": 2,
    "client_lag_ms_p99": 3,
    "loop_delay_ms_p99": 3,
    "request_rate": 4,
    "spec_decode_acceptance_rate": 2,
    "load_value": 4,
    "output_tok_s_per_gpu": 2,
    "total_tok_s_per_gpu": 2,
    "interactivity": 3,
    "goodput_req_s": 4,
}
DEFAULT_DECIMALS = 4


@dataclass(frozen=True)
class Derived:
    """Figures made from a measurement's own, the way public dashboards compare serving
    configurations: throughput per GPU (the figure / the GPUs the server used) and
    interactivity (1000 / median TPOT: tokens per second one user sees). None where a part is
    unknown or zero."""

    gpu_count: int | None
    total_tok_s: float | None  # (prompt + output tokens) / measured window
    output_tok_s_per_gpu: float | None
    total_tok_s_per_gpu: float | None
    interactivity: float | None  # tok/s/user


def gpu_count(result: RunResult) -> int | None:
    """GPUs the server used: recorded since schema 3, else its tensor-parallel size (orch gives
    a server exactly that many)."""
    settings = result.settings
    count = settings.gpu_count if settings.gpu_count is not None else settings.tensor_parallel
    return count if count is not None and count > 0 else None


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0 or not math.isfinite(num):
        return None
    return num / den


def derived(result: RunResult) -> Derived:
    req = result.requests
    gpus = gpu_count(result)
    total = None
    if req is not None:
        total = _ratio(float(req.total_prompt_tokens + req.total_output_tokens), req.duration_s)
    tpot = req.tpot_ms.median if req else None
    return Derived(
        gpu_count=gpus,
        total_tok_s=total,
        output_tok_s_per_gpu=_ratio(req.output_throughput if req else None, gpus),
        total_tok_s_per_gpu=_ratio(total, gpus),
        interactivity=_ratio(1000.0, tpot),
    )


def summary_row(result: RunResult) -> dict[str, CsvValue]:
    """One run's CSV row (times in ms, None where unknown)."""
    req, acc, settings = result.requests, result.acceptance, result.settings
    spec, workload = settings.speculative, settings.workload
    lag = req.client_lag if req else None
    bench = result.vllm_bench()
    more, point, slo = derived(result), result.point, result.slo
    return {
        "run": result.run.name,
        "host": result.run.host,
        "engine": settings.engine,
        "method": spec.method,
        "num_draft_tokens": spec.num_draft_tokens,
        "completed": req.completed if req else 0,
        "failed": req.failed if req else 0,
        "duration_s": req.duration_s if req else None,
        "request_throughput": req.request_throughput if req else None,
        "output_tok_s": req.output_throughput if req else None,
        "decode_tok_s_mean": req.decode_tok_s.mean if req else None,
        "decode_tok_s_median": req.decode_tok_s.median if req else None,
        "decode_tok_s_p10": req.decode_tok_s.p10 if req else None,
        "decode_tok_s_p90": req.decode_tok_s.p90 if req else None,
        "ttft_ms_median": req.ttft_ms.median if req else None,
        "ttft_ms_p90": req.ttft_ms.p90 if req else None,
        "tpot_ms_median": req.tpot_ms.median if req else None,
        "tpot_ms_p90": req.tpot_ms.p90 if req else None,
        "itl_chunk_ms_median": req.itl_chunk_ms.median if req else None,
        "itl_token_ms_median": req.itl_token_ms.median if req else None,
        "acceptance_length": acc.length if acc else None,
        "acceptance_source": acc.source if acc else None,
        "acceptance_length_prometheus": acc.prometheus if acc else None,
        "acceptance_length_log": acc.log if acc else None,
        "acceptance_length_client": acc.client if acc else None,
        "acceptance_disagreement": acc.disagrees if acc else False,
        "engine_gen_tok_s": result.engine_metrics.generation_throughput_mean,
        "client_lag_ms_p99": lag.send_lag_ms.p99 if lag else None,
        "loop_delay_ms_p99": lag.loop_delay_ms.p99 if lag and lag.loop_delay_ms else None,
        "collapse": result.collapse is not None,
        "error": result.error.message if result.error else "",
        "draft_model": spec.draft_model,
        "tensor_parallel": settings.tensor_parallel,
        "prompts": workload.prompts if workload else None,
        "concurrency": workload.concurrency if workload else None,
        "request_rate": workload.request_rate if workload else None,
        "max_tokens": workload.max_tokens if workload else None,
        "spec_decode_acceptance_rate": bench.spec_decode_acceptance_rate if bench else None,
        "model": settings.model,
        "gpu_name": settings.gpu_name,
        "gpu_count": more.gpu_count,
        "load_kind": point.kind if point else None,
        "load_value": point.value if point else None,
        "repeat": point.repeat if point else None,
        "output_tok_s_per_gpu": more.output_tok_s_per_gpu,
        "total_tok_s_per_gpu": more.total_tok_s_per_gpu,
        "interactivity": more.interactivity,
        "goodput_req_s": slo.goodput if slo else None,
        "slo_met": slo.met if slo else None,
        "prompts_sha256": workload.prompts_sha256 if workload else None,
    }


def csv_value(column: str, value: CsvValue) -> str:
    """One CSV cell: floats in fixed point with the column's decimals, "" for unknown."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    text = f"{value:.{CSV_DECIMALS.get(column, DEFAULT_DECIMALS)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def write_summary_csv(path: Path, results: Sequence[RunResult]) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        row = summary_row(result)
        writer.writerow([csv_value(c, row[c]) for c in CSV_COLUMNS])
    return write_bytes(path, buf.getvalue().encode("utf-8"))


def load_results(results_dir: Path | str) -> list[RunResult]:
    """Every measurement's result under a playbook results folder, in run order, then in the
    order of each run's sweep (load point, repeat). Folders a resume set aside are not read."""
    results_dir = Path(results_dir)
    paths = [*results_dir.glob("*/summary.json"), *results_dir.glob("*/points/*/summary.json")]
    found = [
        RunResult.load(p)
        for p in sorted(paths)
        if not any(set_aside_name(part) for part in p.relative_to(results_dir).parts)
    ]
    found.sort(key=_order)
    return found


def _order(r: RunResult) -> tuple[int, str, int, int]:
    point = (r.point.index, r.point.repeat) if r.point else (0, 0)
    return (r.run.order, r.run.name, *point)
