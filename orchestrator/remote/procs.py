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
import re
import signal
import time
from typing import Any, Dict, List, Optional, Tuple

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


def _fields_this_boot(record: Dict[str, Any], pid: int) -> Optional[List[str]]:
    """``pid``'s /proc stat fields when ``record`` (an engine's) is of this boot and the engine
    pid is recorded; None otherwise (a pid of another boot means nothing now)."""
    if not isinstance(record.get("pid"), int):
        return None
    if record.get("boot_id") and record["boot_id"] != boot_id():
        return None
    return _alive_fields(pid)


def same_process(record: Dict[str, Any]) -> bool:
    """True when the recorded pid is alive and still the process that was launched."""
    pid = record.get("pid")
    fields = _fields_this_boot(record, pid) if isinstance(pid, int) else None
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


def wait_stopped(record: Dict[str, Any], grace: float, linger: float, listeners: List[str]) -> bool:
    """After a SIGTERM: wait up to ``grace`` for the group to exit, but once the engine's
    ``listeners`` (held when the SIGTERM went) have closed, at most ``linger`` more. An engine
    whose HTTP server has closed has nothing left to do but exit; one hung on an open stream
    (vLLM can) would otherwise hold the GPUs for the whole grace."""
    port = record.get("port")
    deadline = time.monotonic() + grace
    if not isinstance(port, int):
        listeners, port = [], 0
    watching = bool(listeners)
    while group_members(record):
        now = time.monotonic()
        if now >= deadline:
            return False
        if watching and not still_listening(listeners, port):
            deadline, watching = min(deadline, now + linger), False
        time.sleep(0.1)
    return True


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


# Flags and NAME=value words whose value is a secret (vLLM/SGLang's --api-key, --hf-token,
# a token or password of anything else): hidden in every command line the agent reports, so a
# refusal naming the process that holds a port never prints someone's key.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pass", "credential", "credentials"}
)
MASK = "***"


def _secret_name(name: str) -> bool:
    parts = [p for p in re.split(r"[-_.]+", name.lower()) if p]
    return any(p in _SECRET_WORDS for p in parts)


def mask_argv(argv: List[str]) -> List[str]:
    """``argv`` with the values of secret-looking flags (``--api-key X``, ``--hf-token=X``) and
    of secret-looking ``NAME=value`` words (``VLLM_API_KEY=X``) replaced by ``***``."""
    out = list(argv)
    i = 0
    while i < len(out):
        item = out[i]
        if item.startswith("-") and len(item) > 1:
            name, eq, _value = item.lstrip("-").partition("=")
            if _secret_name(name):
                if eq:
                    out[i] = item.split("=", 1)[0] + "=" + MASK
                else:
                    j = i + 1
                    while j < len(out) and not out[j].startswith("-"):
                        out[j] = MASK  # vLLM's --api-key takes several values
                        j += 1
                    i = j
                    continue
        else:
            name, eq, _value = item.partition("=")
            if eq and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name) and _secret_name(name):
                out[i] = name + "=" + MASK
        i += 1
    return out


def cmdline(pid: int) -> str:
    """The process's command line, secret values masked, at most 160 characters."""
    text = read_text("/proc/%d/cmdline" % pid) or ""
    parts = mask_argv([part for part in text.split("\0") if part])
    return " ".join(" ".join(part.split()) for part in parts)[:160] or "?"


# Local addresses (as /proc/net/tcp{,6} print them, either byte order) that accept a
# connection to 127.0.0.1: the loopback address itself, and the wildcards.
_ANSWERS_LOOPBACK = frozenset(
    {
        "0100007F",  # 127.0.0.1, little-endian hosts
        "7F000001",  # 127.0.0.1, big-endian hosts
        "00000000",  # 0.0.0.0
        "00000000000000000000000000000000",  # :: (dual-stack)
        "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1, little-endian
        "00000000000000000000FFFF7F000001",  # ::ffff:127.0.0.1, big-endian
    }
)
LISTEN = "0A"


def listening_inodes(tables: List[str], port: int, *, loopback_only: bool = False) -> List[str]:
    """Socket inodes listening on ``port`` in the texts of /proc/net/tcp and tcp6.

    ``loopback_only``: only sockets that answer a connection to 127.0.0.1 (bound to it or to a
    wildcard), which is where orch's engines listen and the agent connects.
    """
    inodes = []
    for text in tables:
        for line in text.splitlines()[1:]:
            parts = line.split()
            if len(parts) <= 9 or parts[3] != LISTEN or ":" not in parts[1]:
                continue
            address, _, hex_port = parts[1].rpartition(":")
            try:
                if int(hex_port, 16) != port:
                    continue
            except ValueError:
                continue
            if loopback_only and address.upper() not in _ANSWERS_LOOPBACK:
                continue
            inodes.append(parts[9])
    return inodes


def _tcp_tables() -> Optional[List[str]]:
    texts = [read_text(t) for t in ("/proc/net/tcp", "/proc/net/tcp6")]
    found = [t for t in texts if t is not None]
    return found or None


def _listening_inodes(port: int) -> List[str]:
    return listening_inodes(_tcp_tables() or [], port)


def socket_owners(inodes: List[str]) -> List[int]:
    """Pids holding one of the socket ``inodes`` (among the processes this user may read)."""
    wanted = {"socket:[%s]" % inode for inode in inodes}
    owners = []
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
                owners.append(int(name))
                break
    return sorted(owners)


def port_holders(port: int) -> List[Dict[str, Any]]:
    """Processes listening on ``port`` (those whose fds this user may read)."""
    return [{"pid": pid, "cmdline": cmdline(pid)} for pid in socket_owners(_listening_inodes(port))]


def parent_pid(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 3 else None


def session_id(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    return int(fields[3]) if fields and len(fields) > 3 else None


def descends_from(pid: int, ancestors: List[int], *, depth: int = 64) -> bool:
    """True when ``pid`` is one of ``ancestors`` or a descendant of one (through /proc ppids)."""
    wanted = set(ancestors)
    current: Optional[int] = pid
    for _ in range(depth):
        if current is None or current <= 1:
            return False
        if current in wanted:
            return True
        current = parent_pid(current)
    return False


def launched_by(pid: int, record: Dict[str, Any]) -> bool:
    """Whether ``pid`` belongs to the engine ``record`` describes: its session or process group
    (the engine leads both: its workers and API server children stay in them), or a descendant
    of the engine or its supervisor; and started no earlier than the engine (no reused pid)."""
    engine = record.get("pid")
    fields = _fields_this_boot(record, pid)
    if fields is None or not isinstance(engine, int):
        return False
    since = record.get("start_ticks") or 0
    if int(fields[19]) < since:
        return False
    pgid = record.get("pgid")
    if int(fields[3]) == engine or (isinstance(pgid, int) and int(fields[2]) == pgid):
        return True
    lineage = [engine]
    supervisor = record.get("supervisor_pid")
    if isinstance(supervisor, int):
        lineage.append(supervisor)
    return descends_from(pid, lineage)


def port_owner(port: int, record: Dict[str, Any]) -> Tuple[str, List[Dict[str, Any]]]:
    """Who answers 127.0.0.1:``port``: ``("launched" | "foreign" | "none" | "unknown",
    holders)``, each holder ``{"pid", "cmdline", "launched"}``.

    ``none``: nothing listens (yet); ``foreign``: some listener is not the launched engine's
    (one this user cannot see counts: the engine's own sockets are always visible to it);
    ``unknown``: this system has no /proc/net/tcp to tell.
    """
    tables = _tcp_tables()
    if tables is None:
        return "unknown", []
    inodes = listening_inodes(tables, port, loopback_only=True)
    if not inodes:
        return "none", []
    pids = socket_owners(inodes)
    holders: List[Dict[str, Any]] = [
        {"pid": pid, "cmdline": cmdline(pid), "launched": launched_by(pid, record)} for pid in pids
    ]
    ours = [h["pid"] for h in holders if h["launched"]]
    # every listening socket must be the engine's: one we cannot see, or a second listener
    # sharing the port (SO_REUSEPORT), means someone else may answer
    if ours and len(ours) == len(holders) and set(inodes) <= set(socket_inodes_of(ours)):
        return "launched", holders
    return "foreign", holders


def engine_listeners(record: Dict[str, Any]) -> List[str]:
    """Socket inodes listening on the engine's port that its process group holds: what closes
    when its HTTP server shuts down, so a stop can tell "closed, lingering" from "still serving"."""
    port, tables = record.get("port"), _tcp_tables()
    if not isinstance(port, int) or tables is None:
        return []
    listening = set(listening_inodes(tables, port))
    if not listening:
        return []
    return sorted(listening & set(socket_inodes_of(group_members(record))))


def still_listening(inodes: List[str], port: int) -> bool:
    """Whether any of ``inodes`` still listens on ``port`` (one read of /proc/net/tcp{,6})."""
    return bool(set(inodes) & set(listening_inodes(_tcp_tables() or [], port)))


def socket_inodes_of(pids: List[int]) -> List[str]:
    """Socket inodes held by ``pids``."""
    found = []
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                found.append(target[len("socket:[") : -1])
    return found
