"""``probe``: what a host has (Python, OS, CPUs, memory, disk, GPUs, engines, free ports).

Each fact is a command or file plus a pure parser, so the parsers are tested on real output
lines while the I/O stays in ``run``. Nothing here imports the engines themselves: their
versions come from package metadata, because importing torch alone takes seconds.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
from typing import Any, Dict, List, Optional, Tuple

from .protocol import AgentFailure, Emit
from .util import existing_parent, nvidia_smi, port_is_free, read_text

DEFAULT_PACKAGES = ("vllm", "sglang", "torch", "transformers")

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


def parse_gpu_csv(text: str) -> Tuple[List[Row], List[str]]:
    """``index, name, memory.total, memory.used, utilization.gpu`` lines -> rows, unparsed lines."""
    rows: List[Row] = []
    bad: List[str] = []
    for line in _lines(text):
        fields = split_fields(line, 5, 1)
        index = na_int(fields[0]) if fields else None
        if fields is None or index is None:
            bad.append(line)
            continue
        rows.append(
            {
                "index": index,
                "name": na(fields[1]),
                "memory_total_mib": na_int(fields[2]),
                "memory_used_mib": na_int(fields[3]),
                "utilization_pct": na_int(fields[4]),
            }
        )
    return rows, bad


def parse_gpu_id_csv(text: str) -> Tuple[List[Row], List[str]]:
    """``index, uuid, driver_version`` lines -> rows, unparsed lines."""
    rows: List[Row] = []
    bad: List[str] = []
    for line in _lines(text):
        fields = [f.strip() for f in line.split(",")]
        index = na_int(fields[0]) if len(fields) == 3 else None
        if index is None:
            bad.append(line)
            continue
        rows.append({"index": index, "uuid": na(fields[1]), "driver_version": na(fields[2])})
    return rows, bad


def parse_compute_apps_csv(text: str) -> Tuple[List[Row], List[str]]:
    """``gpu_uuid, pid, process_name, used_memory`` lines -> rows, unparsed lines."""
    rows: List[Row] = []
    bad: List[str] = []
    for line in _lines(text):
        fields = split_fields(line, 4, 2)
        if fields is None or na(fields[0]) is None or na_int(fields[1]) is None:
            bad.append(line)
            continue
        rows.append(
            {
                "gpu_uuid": na(fields[0]),
                "pid": na_int(fields[1]),
                "process_name": na(fields[2]),
                "used_memory_mib": na_int(fields[3]),
            }
        )
    return rows, bad


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


def parse_meminfo(text: str) -> Dict[str, Optional[int]]:
    """/proc/meminfo -> total and available memory in MiB (None when the line is absent)."""
    values: Dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])  # kB, as the kernel has always printed them
    total = values.get("MemTotal")
    available = values.get("MemAvailable")
    return {
        "total_mib": total // 1024 if total is not None else None,
        "available_mib": available // 1024 if available is not None else None,
    }


def parse_os_release(text: str) -> Dict[str, str]:
    """/etc/os-release (shell-style KEY=value, values maybe quoted) -> {key: value}."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
            value = (
                value.replace('\\"', '"')
                .replace("\\$", "$")
                .replace("\\`", "`")
                .replace("\\\\", "\\")
            )
        out[key.strip()] = value
    return out


def _lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# I/O: gather the facts.


def gpu_facts() -> Dict[str, Any]:
    """GPUs and the nvidia-smi status; a missing or broken nvidia-smi is reported, not raised."""
    result = nvidia_smi(GPU_QUERY)
    if not result.ok:
        return {
            "gpus": [],
            "driver_version": None,
            "nvidia_smi": {"available": False, "error": result.error},
        }
    gpus, bad = parse_gpu_csv(result.stdout)
    warnings = [f"unparsed nvidia-smi line: {line!r}" for line in bad]
    ids: List[Row] = []
    apps: List[Row] = []
    id_result = nvidia_smi(GPU_ID_QUERY)
    if id_result.ok:
        ids, bad = parse_gpu_id_csv(id_result.stdout)
        warnings += [f"unparsed nvidia-smi line: {line!r}" for line in bad]
    else:
        warnings.append(f"uuid/driver query failed: {id_result.error}")
    apps_result = nvidia_smi(APPS_QUERY)
    if apps_result.ok:
        apps, bad = parse_compute_apps_csv(apps_result.stdout)
        warnings += [f"unparsed nvidia-smi line: {line!r}" for line in bad]
    else:
        warnings.append(f"compute-apps query failed: {apps_result.error}")
    merged = merge_gpus(gpus, ids, apps)
    drivers = [g["driver_version"] for g in merged if g["driver_version"]]
    return {
        "gpus": merged,
        "driver_version": drivers[0] if drivers else None,
        "nvidia_smi": {"available": True, "error": None, "warnings": warnings},
    }


def package_versions(names: List[str]) -> Dict[str, Optional[str]]:
    """Installed distribution versions in THIS interpreter, without importing the packages."""
    from importlib import metadata

    out: Dict[str, Optional[str]] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def disk_facts(workdir: str) -> Dict[str, Any]:
    path = existing_parent(workdir)
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return {"path": path, "free_gib": None, "total_gib": None, "error": str(exc)}
    gib = 1024.0**3
    return {
        "path": path,
        "free_gib": round(usage.free / gib, 2),
        "total_gib": round(usage.total / gib, 2),
        "error": None,
    }


def os_facts() -> Dict[str, Any]:
    release = parse_os_release(read_text("/etc/os-release") or "")
    return {
        "system": platform.system(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "distro": release.get("PRETTY_NAME") or release.get("NAME"),
        "distro_id": release.get("ID"),
        "distro_version": release.get("VERSION_ID"),
    }


def _ports(spec: Dict[str, Any]) -> List[int]:
    ports = spec.get("ports", [])
    if not isinstance(ports, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
    ):
        raise AgentFailure("bad_spec", "probe: 'ports' must be a list of port numbers (1-65535)")
    return ports


def run(spec: Dict[str, Any], emit: Emit) -> Dict[str, Any]:
    workdir = spec.get("workdir", "~")
    packages = spec.get("packages", list(DEFAULT_PACKAGES))
    bind_host = spec.get("bind_host", "127.0.0.1")
    if not isinstance(workdir, str) or not isinstance(bind_host, str):
        raise AgentFailure("bad_spec", "probe: 'workdir' and 'bind_host' must be strings")
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise AgentFailure("bad_spec", "probe: 'packages' must be a list of names")
    ports = _ports(spec)
    gpu = gpu_facts()
    try:
        free = [port for port in ports if port_is_free(port, bind_host)]
    except OSError as exc:
        raise AgentFailure(
            "bad_spec", f"probe: cannot check ports on {bind_host!r}: {exc}"
        ) from exc
    return {
        "python": {
            "version": platform.python_version(),
            "executable": sys.executable,
            "implementation": platform.python_implementation(),
        },
        "os": os_facts(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "memory": parse_meminfo(read_text("/proc/meminfo") or ""),
        "disk": disk_facts(workdir),
        "gpus": gpu["gpus"],
        "driver_version": gpu["driver_version"],
        "nvidia_smi": gpu["nvidia_smi"],
        "packages": package_versions(packages),
        "ports": {"checked": ports, "free": free, "bind_host": bind_host},
    }
