"""GPU facts from nvidia-smi: the queries, their pure parsers, and the checks built on them.

Shared by ``probe`` (what a host has) and ``lifecycle`` (``launch`` refuses GPUs already in use,
``stop`` waits until the engine's memory is released). Each fact is an nvidia-smi query plus a
pure parser, so the parsers are tested on real output lines while the I/O stays in the
functions at the bottom. A missing or broken nvidia-smi is reported, never raised: a host
without GPUs can still be probed and run the simulator.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .protocol import AgentFailure
from .util import nvidia_smi
from .wire import ErrorKind, GpuCheck, GpuInfo, NvidiaSmiStatus

GPU_QUERY = [
    "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
    "--format=csv,noheader,nounits",
]
GPU_ID_QUERY = ["--query-gpu=index,uuid,driver_version", "--format=csv,noheader,nounits"]
APPS_QUERY = [
    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
]

# What nvidia-smi prints when a field has no value on this GPU / driver.
_MISSING = {
    "",
    "n/a",
    "[n/a]",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "[insufficient permissions]",
}

Row = Dict[str, Any]
Parsed = Tuple[List[Row], List[str]]


def na(value: str) -> Optional[str]:
    """The field stripped, or None for nvidia-smi's placeholders ([N/A], [Not Supported] ...)."""
    value = value.strip()
    return None if value.lower() in _MISSING else value


def na_int(value: str) -> Optional[int]:
    text = na(value)
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def split_fields(line: str, count: int, text_at: int) -> Optional[List[str]]:
    """Split a CSV line into ``count`` fields where field ``text_at`` may itself hold commas.

    nvidia-smi does not quote its CSV, and process names (paths) may contain ", ". Every other
    field is a number or an id, so they are peeled off from the left and from the right.
    """
    parts = line.split(",")
    if len(parts) < count:
        return None
    right = count - text_at - 1
    left_parts = parts[:text_at]
    right_parts = parts[len(parts) - right :] if right else []
    middle = ",".join(parts[text_at : len(parts) - right])
    return [p.strip() for p in left_parts] + [middle.strip()] + [p.strip() for p in right_parts]


def _parse_rows(text: str, row_of: Callable[[str], Optional[Row]]) -> Parsed:
    """Rows of the non-blank lines ``row_of`` understands, and the lines it did not."""
    rows: List[Row] = []
    bad: List[str] = []
    for line in (line for line in text.splitlines() if line.strip()):
        row = row_of(line)
        if row is None:
            bad.append(line)
        else:
            rows.append(row)
    return rows, bad


def _gpu_row(line: str) -> Optional[Row]:
    fields = split_fields(line, 5, 1)
    index = na_int(fields[0]) if fields else None
    if fields is None or index is None:
        return None
    return {
        "index": index,
        "name": na(fields[1]),
        "memory_total_mib": na_int(fields[2]),
        "memory_used_mib": na_int(fields[3]),
        "utilization_pct": na_int(fields[4]),
    }


def _gpu_id_row(line: str) -> Optional[Row]:
    fields = [f.strip() for f in line.split(",")]
    index = na_int(fields[0]) if len(fields) == 3 else None
    if index is None:
        return None
    return {"index": index, "uuid": na(fields[1]), "driver_version": na(fields[2])}


def _compute_app_row(line: str) -> Optional[Row]:
    fields = split_fields(line, 4, 2)
    if fields is None or na(fields[0]) is None or na_int(fields[1]) is None:
        return None
    return {
        "gpu_uuid": na(fields[0]),
        "pid": na_int(fields[1]),
        "process_name": na(fields[2]),
        "used_memory_mib": na_int(fields[3]),
    }


def parse_gpu_csv(text: str) -> Parsed:
    """``index, name, memory.total, memory.used, utilization.gpu`` lines -> rows, unparsed lines."""
    return _parse_rows(text, _gpu_row)


def parse_gpu_id_csv(text: str) -> Parsed:
    """``index, uuid, driver_version`` lines -> rows, unparsed lines."""
    return _parse_rows(text, _gpu_id_row)


def parse_compute_apps_csv(text: str) -> Parsed:
    """``gpu_uuid, pid, process_name, used_memory`` lines -> rows, unparsed lines."""
    return _parse_rows(text, _compute_app_row)


def merge_gpus(gpus: List[Row], ids: List[Row], apps: List[Row]) -> List[Row]:
    """Join the three nvidia-smi queries: ids by index, processes by GPU uuid."""
    by_index = {row["index"]: row for row in ids}
    merged: List[Row] = []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        ident = by_index.get(gpu["index"], {})
        uuid = ident.get("uuid")
        processes = [
            {k: app[k] for k in ("pid", "process_name", "used_memory_mib")}
            for app in apps
            if uuid is not None and app["gpu_uuid"] == uuid
        ]
        merged.append(
            dict(gpu, uuid=uuid, driver_version=ident.get("driver_version"), processes=processes)
        )
    return merged


def needed_gpu_indices(count: int, env: Dict[str, str], gpus: List[Row]) -> List[Row]:
    """The GPUs an engine will use: CUDA_VISIBLE_DEVICES order when set, else the first ``count``."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    ordered = gpus
    if visible is not None and visible.strip():
        by_key: Dict[str, Row] = {}
        for gpu in gpus:
            by_key[str(gpu["index"])] = gpu
            if gpu.get("uuid"):
                by_key[gpu["uuid"]] = gpu
        ordered = [by_key[item.strip()] for item in visible.split(",") if item.strip() in by_key]
    return ordered[:count]


# ---------------------------------------------------------------------------------------------
# I/O: run nvidia-smi.


def _query(
    args: List[str], parse: Callable[[str], Parsed], what: str, warnings: List[str]
) -> List[Row]:
    """Rows of one secondary query; its failure or odd lines become warnings, not errors."""
    result = nvidia_smi(args)
    if not result.ok:
        warnings.append(f"{what} query failed: {result.error}")
        return []
    rows, bad = parse(result.stdout)
    warnings += [f"unparsed nvidia-smi line: {line!r}" for line in bad]
    return rows


class GpuFacts:
    """What nvidia-smi says: the GPUs (rows as ``merge_gpus`` makes them), driver, status."""

    def __init__(self, rows: List[Row], status: NvidiaSmiStatus) -> None:
        self.rows = rows
        self.status = status
        drivers = [g["driver_version"] for g in rows if g["driver_version"]]
        self.driver_version: Optional[str] = drivers[0] if drivers else None

    @property
    def gpus(self) -> List[GpuInfo]:
        return [GpuInfo.from_json(row) for row in self.rows]


def gpu_facts() -> GpuFacts:
    """GPUs and the nvidia-smi status; a missing or broken nvidia-smi is reported, not raised."""
    result = nvidia_smi(GPU_QUERY)
    if not result.ok:
        return GpuFacts([], NvidiaSmiStatus(available=False, error=result.error))
    gpus, bad = parse_gpu_csv(result.stdout)
    warnings = [f"unparsed nvidia-smi line: {line!r}" for line in bad]
    ids = _query(GPU_ID_QUERY, parse_gpu_id_csv, "uuid/driver", warnings)
    apps = _query(APPS_QUERY, parse_compute_apps_csv, "compute-apps", warnings)
    merged = merge_gpus(gpus, ids, apps)
    return GpuFacts(merged, NvidiaSmiStatus(available=True, error=None, warnings=warnings))


def check_gpus(count: int, env: Dict[str, str], *, threshold_mib: int) -> GpuCheck:
    """Refuse a launch whose GPUs are missing or hold more than ``threshold_mib`` already.

    Without nvidia-smi nothing can be checked, which is said in the result rather than raised.
    """
    if count <= 0:
        return GpuCheck(checked=False, reason="no GPUs requested")
    facts = gpu_facts()
    if not facts.status.available:
        return GpuCheck(checked=False, reason=facts.status.error)
    gpus = needed_gpu_indices(count, env, facts.rows)
    if len(gpus) < count:
        raise AgentFailure(
            ErrorKind.NOT_ENOUGH_GPUS,
            f"the run needs {count} GPU(s) but only {len(gpus)} are available"
            + (
                f" in CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
                if env.get("CUDA_VISIBLE_DEVICES")
                else ""
            ),
            {"needed": count, "available": len(gpus)},
        )
    busy = [g for g in gpus if (g.get("memory_used_mib") or 0) > threshold_mib]
    if busy:
        raise AgentFailure(
            ErrorKind.GPU_BUSY,
            "; ".join(_busy_text(gpu) for gpu in busy) + f" (more than {threshold_mib} MiB)",
            {"gpus": busy, "threshold_mib": threshold_mib},
        )
    return GpuCheck(checked=True, gpus=[g["index"] for g in gpus])


def _busy_text(gpu: Row) -> str:
    apps = ", ".join(
        f"pid {p['pid']} {p.get('process_name') or '?'} ({p.get('used_memory_mib')} MiB)"
        for p in gpu["processes"]
    )
    return f"GPU {gpu['index']} has {gpu['memory_used_mib']} MiB in use" + (
        f" by {apps}" if apps else ""
    )


def wait_gpu_released(pids: List[int], timeout: float) -> Optional[bool]:
    """Poll nvidia-smi until none of ``pids`` holds GPU memory; None when nvidia-smi is absent.

    Pids are compared as this host's pid namespace sees them, which is what nvidia-smi prints
    outside containers.
    """
    deadline = time.monotonic() + timeout
    wanted = set(pids)
    while True:
        result = nvidia_smi(APPS_QUERY)
        if not result.ok:
            return None
        apps, _ = parse_compute_apps_csv(result.stdout)
        if not wanted & {app["pid"] for app in apps}:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
