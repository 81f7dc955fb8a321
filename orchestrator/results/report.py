"""Top-level results of a playbook run: `summary.csv` (one row per run) and `comparison.png`.

Both are built from the per-run ``summary.json`` dicts, so a report can be rebuilt from a results
folder alone (``orch report DIR``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.results.store import write_bytes

CSV_COLUMNS = [
    "run", "host", "engine", "method", "num_draft_tokens", "completed", "failed", "duration_s",
    "request_throughput", "output_tok_s", "decode_tok_s_mean", "decode_tok_s_median",
    "decode_tok_s_p10", "decode_tok_s_p90", "ttft_ms_median", "ttft_ms_p90", "tpot_ms_median",
    "tpot_ms_p90", "itl_chunk_ms_median", "itl_token_ms_median", "acceptance_length",
    "acceptance_source", "acceptance_length_prometheus", "acceptance_length_log",
    "acceptance_length_client", "acceptance_disagreement", "engine_gen_tok_s", "client_lag_ms_p99",
    "loop_delay_ms_p99", "collapse", "error",
]

# Decimals kept per float column (trailing zeros dropped). Fixed-point, never an exponent:
# a spreadsheet or `column -t` shows 12345.67 tok/s, not 1.235e+04.
CSV_DECIMALS = {
    "duration_s": 3, "request_throughput": 4, "output_tok_s": 2, "decode_tok_s_mean": 2,
    "decode_tok_s_median": 2, "decode_tok_s_p10": 2, "decode_tok_s_p90": 2, "ttft_ms_median": 3,
    "ttft_ms_p90": 3, "tpot_ms_median": 3, "tpot_ms_p90": 3, "itl_chunk_ms_median": 3,
    "itl_token_ms_median": 3, "acceptance_length": 4, "acceptance_length_prometheus": 4,
    "acceptance_length_log": 4, "acceptance_length_client": 4, "engine_gen_tok_s": 2,
    "client_lag_ms_p99": 3, "loop_delay_ms_p99": 3,
}
DEFAULT_DECIMALS = 4


def _get(d: dict[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def summary_row(s: dict[str, Any]) -> dict[str, Any]:
    """Flatten one run's summary.json into a CSV row (times in ms, None where unknown)."""
    req = s.get("requests") or {}
    acc = s.get("acceptance") or {}
    collapse = s.get("collapse")
    error = s.get("error")
    return {
        "run": s.get("run"),
        "host": s.get("host"),
        "engine": s.get("engine"),
        "method": s.get("method"),
        "num_draft_tokens": s.get("num_draft_tokens"),
        "completed": req.get("completed", 0),
        "failed": req.get("failed", 0),
        "duration_s": req.get("duration_s"),
        "request_throughput": req.get("request_throughput"),
        "output_tok_s": req.get("output_throughput"),
        "decode_tok_s_mean": _get(req, "decode_tok_s", "mean"),
        "decode_tok_s_median": _get(req, "decode_tok_s", "median"),
        "decode_tok_s_p10": _get(req, "decode_tok_s", "p10"),
        "decode_tok_s_p90": _get(req, "decode_tok_s", "p90"),
        "ttft_ms_median": _get(req, "ttft_ms", "median"),
        "ttft_ms_p90": _get(req, "ttft_ms", "p90"),
        "tpot_ms_median": _get(req, "tpot_ms", "median"),
        "tpot_ms_p90": _get(req, "tpot_ms", "p90"),
        "itl_chunk_ms_median": _get(req, "itl_chunk_ms", "median"),
        "itl_token_ms_median": _get(req, "itl_token_ms", "median"),
        "acceptance_length": acc.get("length"),
        "acceptance_source": acc.get("source"),
        "acceptance_length_prometheus": acc.get("prometheus"),
        "acceptance_length_log": acc.get("log"),
        "acceptance_length_client": acc.get("client"),
        "acceptance_disagreement": bool(acc.get("disagreement")),
        "engine_gen_tok_s": _get(s, "engine_metrics", "generation_throughput_mean"),
        "client_lag_ms_p99": _get(req, "client_lag", "send_lag_ms", "p99"),
        "loop_delay_ms_p99": _get(req, "client_lag", "loop_delay_ms", "p99"),
        "collapse": bool(collapse),
        "error": (error.get("message") if isinstance(error, dict) else error) or "",
    }


def csv_value(column: str, value: Any) -> str:
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


def write_summary_csv(path: Path, summaries: Sequence[dict[str, Any]]) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in summaries:
        row = summary_row(s)
        writer.writerow([csv_value(c, row[c]) for c in CSV_COLUMNS])
    return write_bytes(path, buf.getvalue().encode("utf-8"))


def load_summaries(results_dir: Path) -> list[dict[str, Any]]:
    """Every run's summary.json under a playbook results folder, in run order (manifest time)."""
    found = []
    for p in sorted(results_dir.glob("*/summary.json")):
        found.append(json.loads(p.read_text(encoding="utf-8")))
    found.sort(key=lambda s: (s.get("order", 0), s.get("run") or ""))
    return found
