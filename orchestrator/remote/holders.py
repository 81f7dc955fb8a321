"""Who holds a port: each listening process with its owner and, when it is one of orch's
servers, its run id.

A refusal that says only "port 8000 is in use" sends a person hunting with ``ss``; naming the
process, its user and (for orch's own servers) the `orch stop` that frees it turns the hunt
into one command. The doctor's probe and ``launch`` both describe holders through here, so
the two refusals read alike. Run records are read straight from ``<workdir>/runs/*/server.json``
(not through ``lifecycle``, which imports ``probe``, which imports this).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from .procs import launched_by, port_holders
from .util import read_text
from .wire import PortHolder


def owner(pid: int) -> Optional[str]:
    """The user name owning ``pid`` (its uid when the name is unknown), None when it is gone."""
    try:
        uid = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        return None
    try:
        import pwd  # Unix only; the agent's hosts are Linux

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def server_records(workdir: str) -> List[Dict[str, Any]]:
    """Every ``server.json`` under ``<workdir>/runs`` that reads as an object."""
    root = os.path.join(os.path.expanduser(workdir), "runs")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    records = []
    for name in names:
        text = read_text(os.path.join(root, name, "server.json"))
        try:
            value = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def run_of(pid: int, records: List[Dict[str, Any]]) -> Optional[str]:
    """The run id of the orch server ``pid`` belongs to (its engine, a worker, its API
    server child), or None when it is nobody's of these records."""
    for record in records:
        run_id = record.get("run_id")
        if isinstance(run_id, str) and launched_by(pid, record):
            return run_id
    return None


def named_holders(port: int, workdir: str) -> List[PortHolder]:
    """The processes listening on ``port`` that this user may see, each named."""
    found = port_holders(port)
    records = server_records(workdir) if found else []
    return [
        PortHolder(
            pid=h["pid"],
            cmdline=h["cmdline"],
            launched=False,
            port=port,
            user=owner(h["pid"]),
            run_id=run_of(h["pid"], records),
        )
        for h in found
    ]


def describe(holder: PortHolder) -> str:
    """``orch's server of run r1 (pid 3322, user bench: vllm serve ...)`` or
    ``pid 3322 (user bench: python3 -m http.server)``: numbers whole, the command last."""
    who = "pid %d (%s%s)" % (
        holder.pid,
        "user %s: " % holder.user if holder.user else "",
        holder.cmdline,
    )
    return "orch's server of run %s, %s" % (holder.run_id, who) if holder.run_id else who


def describe_all(holders: List[PortHolder]) -> str:
    """Every holder described, or what to say when none is visible to this user."""
    return "; ".join(describe(h) for h in holders) or "a process this user cannot see"
