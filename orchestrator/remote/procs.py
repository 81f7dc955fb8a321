"""Processes as /proc (Linux) shows them: identity, process groups, port holders.

A pid alone can be reused once its process is gone, so a launched engine is recorded with the
kernel's start time of the process (``/proc/<pid>/stat`` field 22, in clock ticks since boot)
and the boot id; a pid counts as the engine only while both still match. Everything here reads
/proc directly rather than running ``ps``/``ss``: those may be missing on a slim image and their
output differs between distributions.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, Dict, List, Optional

from .protocol import AgentFailure
from .util import read_text, wait_until
from .wire import ErrorKind


def _stat_fields(pid: int) -> Optional[List[str]]:
    """Fields of /proc/<pid>/stat from field 3 (state) on; the name in parentheses may hold spaces."""
    text = read_text("/proc/%d/stat" % pid)
    if not text or ")" not in text:
        return None
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def boot_id() -> Optional[str]:
    text = read_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def _alive_fields(pid: int) -> Optional[List[str]]:
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return None
    return fields


def same_process(record: Dict[str, Any]) -> bool:
    """True when the recorded pid is alive and still the process that was launched."""
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    if record.get("boot_id") and record["boot_id"] != boot_id():
        return False
    fields = _alive_fields(pid)
    if fields is None:
        return False
    ticks = record.get("start_ticks")
    return ticks is None or int(fields[19]) == ticks


def group_members(record: Dict[str, Any]) -> List[int]:
    """Live pids in the engine's process group started no earlier than the engine (no reuse)."""
    pgid = record.get("pgid")
    if not isinstance(pgid, int) or (record.get("boot_id") and record["boot_id"] != boot_id()):
        return []
    since = record.get("start_ticks") or 0
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _alive_fields(int(name))
        if fields and int(fields[2]) == pgid and int(fields[19]) >= since:
            members.append(int(name))
    return sorted(members)


def signal_group(record: Dict[str, Any], sig: int) -> None:
    if not (same_process(record) or group_members(record)):
        return
    try:
        os.killpg(int(record["pgid"]), sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        raise AgentFailure(
            ErrorKind.STOP_FAILED, f"not allowed to signal process group {record['pgid']}: {exc}"
        ) from exc


def wait_group_gone(record: Dict[str, Any], timeout: float) -> bool:
    return wait_until(lambda: not group_members(record), timeout, interval=0.1)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def cmdline(pid: int) -> str:
    text = read_text("/proc/%d/cmdline" % pid) or ""
    return " ".join(" ".join(part.split()) for part in text.split("\0") if part)[:160] or "?"


def _listening_inodes(port: int) -> List[str]:
    inodes = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read_text(table) or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.append(parts[9])
    return inodes


def port_holders(port: int) -> List[Dict[str, Any]]:
    """Processes listening on ``port`` (those whose fds this user may read)."""
    wanted = {"socket:[%s]" % inode for inode in _listening_inodes(port)}
    holders = []
    for name in os.listdir("/proc") if wanted else []:
        if not name.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % name)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (name, fd))
            except OSError:
                continue
            if target in wanted:
                holders.append({"pid": int(name), "cmdline": cmdline(int(name))})
                break
    return holders
