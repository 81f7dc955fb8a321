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

from orchestrator.metrics import catalogue
from orchestrator.results.model import RunResult
from orchestrator.results.store import set_aside_name, write_bytes

CsvValue = str | int | float | bool | None

# The columns in their historical places (scripts read the CSV by position): identity and
# settings, and the catalogued metrics that were there. Every other catalogued metric follows.
HISTORICAL_COLUMNS = [
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

CSV_COLUMNS = [
    *HISTORICAL_COLUMNS,
    *(n for n in catalogue.NAMES if n not in HISTORICAL_COLUMNS),
    "energy_problems",  # since issue 23: why the energy columns are flagged, empty when sound
]

# Decimals kept per float column (trailing zeros dropped). Fixed-point, never an exponent:
# a spreadsheet or `column -t` shows 12345.67 tok/s, not 1.235e+04. A metric's are the
# catalogue's; these are the settings' and the acceptance sources'.
CSV_DECIMALS = {
    **{m.name: m.decimals for m in catalogue.CATALOGUE},
    "acceptance_length_prometheus": 4,
    "acceptance_length_log": 4,
    "acceptance_length_client": 4,
    "request_rate": 4,
    "spec_decode_acceptance_rate": 2,
    "load_value": 4,
}
DEFAULT_DECIMALS = 4


@dataclass(frozen=True)
class Derived:
    """Figures made from a measurement's own, the way public dashboards compare serving
    configurations: throughput per GPU (the figure / the GPUs the server used) and
    interactivity (1000 / median TPOT: tokens per second one user sees). None where a part is
    unknown or zero. The catalogue (``orchestrator.metrics.catalogue``) computes each."""

    gpu_count: int | None
    total_tok_s: float | None  # (prompt + output tokens) / measured window
    output_tok_s_per_gpu: float | None
    total_tok_s_per_gpu: float | None
    interactivity: float | None  # tok/s/user


gpu_count = catalogue.gpu_count


def derived(result: RunResult) -> Derived:
    get = catalogue.BY_NAME
    return Derived(
        gpu_count=gpu_count(result),
        total_tok_s=get["total_tok_s"].value(result),
        output_tok_s_per_gpu=get["output_tok_s_per_gpu"].value(result),
        total_tok_s_per_gpu=get["total_tok_s_per_gpu"].value(result),
        interactivity=get["interactivity"].value(result),
    )


def energy_problems(result: RunResult) -> str | None:
    """What flags the measurement's energy figures, in one text; None when they are sound
    (or there are none): a table or a filter tells flagged J/token from sound ones by it."""
    problems = result.energy.problems if result.energy else ()
    return "; ".join(problems) if problems else None


def summary_row(result: RunResult) -> dict[str, CsvValue]:
    """One run's CSV row (times in ms, None where unknown): the catalogued metrics and, around
    them, what identifies the measurement and how it was made."""
    req, acc, settings = result.requests, result.acceptance, result.settings
    spec, workload = settings.speculative, settings.workload
    bench = result.vllm_bench()
    point, slo = result.point, result.slo
    row: dict[str, CsvValue] = {
        "run": result.run.name,
        "host": result.run.host,
        "engine": settings.engine,
        "method": spec.method,
        "num_draft_tokens": spec.num_draft_tokens,
        "completed": req.completed if req else 0,
        "failed": req.failed if req else 0,
        "acceptance_source": acc.source if acc else None,
        "acceptance_length_prometheus": acc.prometheus if acc else None,
        "acceptance_length_log": acc.log if acc else None,
        "acceptance_length_client": acc.client if acc else None,
        "acceptance_disagreement": acc.disagrees if acc else False,
        "collapse": result.collapse is not None,
        "energy_problems": energy_problems(result) or "",
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
        "gpu_count": gpu_count(result),
        "load_kind": point.kind if point else None,
        "load_value": point.value if point else None,
        "repeat": point.repeat if point else None,
        "slo_met": slo.met if slo else None,
        "prompts_sha256": workload.prompts_sha256 if workload else None,
    }
    row.update(catalogue.values(result))
    return row


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
