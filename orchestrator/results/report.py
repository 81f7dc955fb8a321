"""``summary.csv``: one row per run, made from the runs' results (``RunResult``) only.

A report can be rebuilt from a results folder alone (``orch report DIR``): ``load_results``
reads every run's summary.json back into the model, whatever schema version wrote it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

from orchestrator.results.model import RunResult
from orchestrator.results.store import write_bytes

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
}
DEFAULT_DECIMALS = 4


def summary_row(result: RunResult) -> dict[str, CsvValue]:
    """One run's CSV row (times in ms, None where unknown)."""
    req, acc, settings = result.requests, result.acceptance, result.settings
    spec, workload = settings.speculative, settings.workload
    lag = req.client_lag if req else None
    bench = result.vllm_bench()
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
    """Every run's result under a playbook results folder, in run order."""
    results_dir = Path(results_dir)
    found = [RunResult.load(p) for p in sorted(results_dir.glob("*/summary.json"))]
    found.sort(key=lambda r: (r.run.order, r.run.name))
    return found
