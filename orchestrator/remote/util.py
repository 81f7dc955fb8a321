"""Helpers shared by the agent's verbs (standard library only, Python 3.9+).

Kept here so every verb handles the same edge cases the same way: writes that never leave a
half-written file behind, ports checked the way a server would bind them, and external commands
(nvidia-smi) that may be missing, hang, or fail without taking the agent down with them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

NVIDIA_SMI = "nvidia-smi"
NVIDIA_SMI_TIMEOUT_S = 20.0


def atomic_write_bytes(path: str, data: bytes, *, mode: int = 0o600) -> None:
    """Write to a temporary file beside ``path`` and rename it over: readers never see half."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, obj: Any, *, mode: int = 0o600) -> None:
    data = json.dumps(obj, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"), mode=mode)


def read_text(path: str) -> Optional[str]:
    """The file's text, or None when it is missing or unreadable (facts are best effort)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could bind ``host:port`` now.

    SO_REUSEADDR mirrors what uvicorn/aiohttp do, so a port lingering in TIME_WAIT counts as
    free (the engine will get it) while a port someone listens on does not.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        sock.close()
    return True


def existing_parent(path: str) -> str:
    """The nearest existing directory at or above ``path`` (disk usage of a dir not made yet)."""
    current = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


@dataclass
class CommandResult:
    """Outcome of an external command; ``error`` is set when it could not run or failed."""

    argv: List[str]
    returncode: Optional[int]
    stdout: str
    stderr: str
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def run_command(argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
    """Run ``argv`` (never through a shell); report failures in the result instead of raising."""
    args = [str(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        return CommandResult(args, None, "", "", error=f"{args[0]} not found on PATH")
    except PermissionError as exc:
        return CommandResult(args, None, "", "", error=f"{args[0]} is not executable: {exc}")
    except subprocess.TimeoutExpired:
        return CommandResult(
            args, None, "", "", error=f"{args[0]} did not answer within {timeout:g} s"
        )
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    error = None
    if proc.returncode != 0:
        said = first_line(stdout + "\n" + stderr)
        error = f"{args[0]} exited with status {proc.returncode}" + (f": {said}" if said else "")
    return CommandResult(args, proc.returncode, stdout, stderr, error=error)


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def nvidia_smi(args: Sequence[str], *, timeout: float = NVIDIA_SMI_TIMEOUT_S) -> CommandResult:
    """Run nvidia-smi with ``args``; a missing binary is an error in the result, not an exception."""
    path = shutil.which(NVIDIA_SMI)
    if path is None:
        return CommandResult(
            [NVIDIA_SMI, *args], None, "", "", error=f"{NVIDIA_SMI} not found on PATH"
        )
    return run_command([path, *args], timeout=timeout)


def wait_until(ready: Callable[[], bool], timeout: float, *, interval: float) -> bool:
    """Poll ``ready`` every ``interval`` s; False when it is still not true after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
