"""``probe``: what a host has (Python, OS, CPUs, memory, disk, GPUs, engines, free ports, whether
the modules a run imports are there, and which machine and workdir these are).

Each fact is a command or file plus a pure parser, so the parsers are tested on real output
lines while the I/O stays in ``run``; the GPU facts (nvidia-smi) live in ``gpus``, which
``launch`` and ``stop`` share. Nothing here imports the engines themselves: their
versions come from package metadata, because importing torch alone takes seconds.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import sys
from typing import Any, Dict, List, Optional

from .gpus import gpu_facts
from .holders import named_holders
from .protocol import AgentFailure, Emit, parse_spec
from .util import existing_parent, port_is_free, read_text
from .wire import (
    DiskInfo,
    ErrorKind,
    MemoryInfo,
    OsInfo,
    PortsInfo,
    ProbeResult,
    ProbeSpec,
    PythonInfo,
)


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


# ---------------------------------------------------------------------------------------------
# I/O: gather the facts.


def importable(names: List[str]) -> Dict[str, bool]:
    """Whether THIS interpreter finds each top-level module, without importing it (an engine's
    import pulls in torch: seconds)."""
    import importlib.util

    out: Dict[str, bool] = {}
    for name in names:
        try:
            out[name] = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            out[name] = False
    return out


MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def machine_id() -> Optional[str]:
    """The machine's systemd/D-Bus id: equal for two host entries that reach the same machine
    (another address, user or port); None when the host has none."""
    for path in MACHINE_ID_FILES:
        text = (read_text(path) or "").strip()
        if text:
            return text
    return None


def real_workdir(workdir: str) -> str:
    """The workdir as the kernel sees it (``~`` and symlinks resolved), even before it exists."""
    return os.path.realpath(os.path.expanduser(workdir))


def identity(workdir: str) -> Dict[str, Optional[str]]:
    """``machine_id`` and ``workdir`` fields: host entries with both equal share one workdir."""
    return {"machine_id": machine_id(), "workdir": real_workdir(workdir)}


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


def disk_facts(workdir: str) -> DiskInfo:
    path = existing_parent(workdir)
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return DiskInfo(path=path, free_gib=None, total_gib=None, error=str(exc))
    gib = 1024.0**3
    return DiskInfo(
        path=path,
        free_gib=round(usage.free / gib, 2),
        total_gib=round(usage.total / gib, 2),
        error=None,
    )


def os_facts() -> OsInfo:
    release = parse_os_release(read_text("/etc/os-release") or "")
    return OsInfo(
        system=platform.system(),
        kernel=platform.release(),
        machine=platform.machine(),
        platform=platform.platform(),
        distro=release.get("PRETTY_NAME") or release.get("NAME"),
        distro_id=release.get("ID"),
        distro_version=release.get("VERSION_ID"),
    )


def run(raw: Dict[str, Any], emit: Emit) -> ProbeResult:
    spec = parse_spec(ProbeSpec, raw)
    if not all(0 < p < 65536 for p in spec.ports):
        raise AgentFailure(
            ErrorKind.BAD_SPEC, "probe: 'ports' must be a list of port numbers (1-65535)"
        )
    gpu = gpu_facts()
    try:
        free = [port for port in spec.ports if port_is_free(port, spec.bind_host)]
    except OSError as exc:
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"probe: cannot check ports on {spec.bind_host!r}: {exc}"
        ) from exc
    memory = parse_meminfo(read_text("/proc/meminfo") or "")
    return ProbeResult(
        python=PythonInfo(
            version=platform.python_version(),
            executable=sys.executable,
            implementation=platform.python_implementation(),
        ),
        os=os_facts(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count(),
        memory=MemoryInfo(total_mib=memory["total_mib"], available_mib=memory["available_mib"]),
        disk=disk_facts(spec.workdir),
        gpus=gpu.gpus,
        driver_version=gpu.driver_version,
        nvidia_smi=gpu.status,
        packages=package_versions(spec.packages),
        ports=PortsInfo(
            checked=list(spec.ports),
            free=free,
            bind_host=spec.bind_host,
            holders=[
                h for p in spec.ports if p not in free for h in named_holders(p, spec.workdir)
            ],
        ),
        modules=importable(list(spec.modules)),
        **identity(spec.workdir),
    )
