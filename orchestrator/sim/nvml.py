"""The simulated GPUs' NVML: ``nvml.c`` built into a sandbox's ``lib/libnvidia-ml.so.1``.

A real GPU host answers the agent's telemetry through NVML (with an energy counter) and only
falls back to ``nvidia-smi`` (without one). A simulated host gets both, so the path every real
host takes is the one the demos and tests take. The library is built once per machine with the
system's C compiler and kept under the user's cache (keyed by its source and figures); without
a compiler the host has only its ``nvidia-smi``, as a host whose NVML cannot be loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from orchestrator.sim.gpus import (
    BUSY_MEM_MHZ,
    BUSY_POWER_W,
    BUSY_SM_MHZ,
    IDLE_MEM_MHZ,
    IDLE_POWER_W,
    IDLE_SM_MHZ,
    IDLE_USED_MIB,
    POWER_LIMIT_W,
    POWER_PER_REQUEST_W,
    THROTTLED_SM_MHZ,
)

SOURCE = Path(__file__).resolve().parent / "nvml.c"
LIBRARY = "libnvidia-ml.so.1"  # the name the agent (and every NVML user) loads
BUILD_TIMEOUT_S = 60.0


def definitions() -> list[str]:
    """gpus.py's figures as the C compiler's -D flags: one declaration of the simulated GPUs."""
    figures = {
        "IDLE_POWER_MW": round(IDLE_POWER_W * 1000),
        "BUSY_POWER_MW": round(BUSY_POWER_W * 1000),
        "PER_REQUEST_MW": round(POWER_PER_REQUEST_W * 1000),
        "POWER_LIMIT_MW": round(POWER_LIMIT_W * 1000),
        "IDLE_SM_MHZ": IDLE_SM_MHZ,
        "BUSY_SM_MHZ": BUSY_SM_MHZ,
        "THROTTLED_SM_MHZ": THROTTLED_SM_MHZ,
        "IDLE_MEM_MHZ": IDLE_MEM_MHZ,
        "BUSY_MEM_MHZ": BUSY_MEM_MHZ,
        "IDLE_USED_MIB": IDLE_USED_MIB,
    }
    return [f"-D{name}={value}" for name, value in figures.items()]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orch" / "sim-nvml"


def built_library() -> Path | None:
    """The library for this source and these figures, built on first use; None without a C
    compiler (or when it fails: the simulated host then has nvidia-smi only)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    flags = ["-shared", "-fPIC", "-O1", *definitions()]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join([cc, *flags]).encode()).hexdigest()[:16]
    out = _cache_dir() / f"libnvidia-ml-{key}.so"
    if out.is_file():
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so.tmp")
        os.close(fd)
        done = subprocess.run(
            [cc, *flags, "-o", tmp, str(SOURCE)],
            capture_output=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            os.unlink(tmp)
            return None
        os.replace(tmp, out)  # another process building it at once: either copy is whole
    except (OSError, subprocess.SubprocessError):
        return None
    return out


def install(lib_dir: Path) -> bool:
    """Put the library into ``lib_dir`` (a sandbox's); False when it cannot be built."""
    built = built_library()
    target = lib_dir / LIBRARY
    if built is None:
        remove(lib_dir)
        return False
    lib_dir.mkdir(parents=True, exist_ok=True)
    if target.is_file() and target.read_bytes() == built.read_bytes():
        return True
    tmp = lib_dir / f".{LIBRARY}.tmp"
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)
    return True


def remove(lib_dir: Path) -> None:
    """No NVML on this host (a CPU host, or a real engine's, which sees this machine's own)."""
    with contextlib.suppress(FileNotFoundError):
        (lib_dir / LIBRARY).unlink()
