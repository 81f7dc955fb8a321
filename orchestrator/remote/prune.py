"""``prune``: remove finished runs' folders from the workdir, and spec files nobody read.

Each run leaves ``<workdir>/runs/<run_id>/`` behind (its argv, with the API key, and the
engine's log, which may print it): without retention the workdir grows forever and keeps those
secrets. A run is *live* while its server (or anything of its process group) runs, or while it
is starting (a folder without ``server.json`` yet, younger than ``STARTING_GRACE_S``): live runs
are never touched. Which finished runs go is the pure ``select`` (tested with tables); the I/O
is in ``run``.

Spec files (``specs/*.json``) are deleted by the agent as soon as it reads them, and by the
controller when the agent never ran; one left older than ``stale_spec_s`` (a controller killed
in between) is removed here.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .lifecycle import EXIT_JSON, RUN_ID, SERVER_JSON, SERVER_LOG, read_exit, server_state
from .probe import identity
from .protocol import AgentFailure, Emit, parse_spec
from .wire import ErrorKind, PrunedRun, PruneResult, PruneSpec

STARTING_GRACE_S = 600.0  # a run folder without server.json this young may be launching now


@dataclass(frozen=True)
class RunEntry:
    """One run folder as the selection sees it."""

    run_id: str
    live: bool
    ended_at: Optional[float]  # None: unknown (sorted as the oldest)


def select(
    runs: List[RunEntry], *, now: float, older_than_s: Optional[float], keep: Optional[int]
) -> Tuple[List[RunEntry], List[RunEntry]]:
    """(to remove, finished runs kept): live runs are in neither.

    The ``keep`` most recently ended finished runs are kept; of the rest, those that ended at
    least ``older_than_s`` ago (all of them when None) are removed. A run whose end is unknown
    counts as the oldest: it has ended longest ago as far as anyone can tell.
    """
    finished = [r for r in runs if not r.live]
    newest_first = sorted(
        finished,
        key=lambda r: (r.ended_at if r.ended_at is not None else float("-inf"), r.run_id),
        reverse=True,
    )
    spared = newest_first[: keep or 0]
    remove: List[RunEntry] = []
    kept = list(spared)
    for entry in newest_first[len(spared) :]:
        old_enough = (
            older_than_s is None or entry.ended_at is None or entry.ended_at <= now - older_than_s
        )
        (remove if old_enough else kept).append(entry)
    return remove, kept


def _mtime(path: str) -> Optional[float]:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def run_entry(directory: str, *, now: float) -> RunEntry:
    """A run folder's liveness and end time, from its records (``exit.json``'s end time, else
    the last change of its log or records, else of the folder itself)."""
    run_id = os.path.basename(directory)
    state = server_state(directory)
    if state is None:  # no server.json: never launched, or launching right now
        changed = _mtime(directory)
        starting = changed is not None and now - changed < STARTING_GRACE_S
        return RunEntry(run_id, live=starting, ended_at=changed)
    if state.alive or state.group_pids:
        return RunEntry(run_id, live=True, ended_at=None)
    return finished_entry(directory)


def run_folders(workdir: str, under: str = "runs") -> List[str]:
    """Every folder under ``runs/`` (``under``) named like a run id (symlinks and stray files
    left alone)."""
    root = os.path.join(os.path.expanduser(workdir), under)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise AgentFailure(
            ErrorKind.INTERNAL, f"cannot list {root}: {exc.strerror or exc}", {"path": root}
        ) from exc
    out = []
    for name in names:
        path = os.path.join(root, name)
        if RUN_ID.match(name) and os.path.isdir(path) and not os.path.islink(path):
            out.append(path)
    return out


JOBS_DIR = "jobs"  # a Slurm cluster's job folders in its workdir (slurm/node.py: JOBS_DIR)


def job_folders(workdir: str) -> List[str]:
    """Every job folder under ``jobs/`` named like a run id (as `run_folders` does runs)."""
    return run_folders(workdir, JOBS_DIR)


def job_entry(directory: str, *, now: float, live: List[str]) -> RunEntry:
    """A job folder's liveness, from ``live`` (the controller asked Slurm) or a young folder
    with no server record yet (submitted meanwhile), and its end, from the records of the
    runs inside it (its agent workdir): their processes ran on a node, not here."""
    run_id = os.path.basename(directory)
    if run_id in live:
        return RunEntry(run_id, live=True, ended_at=None)
    inner = run_folders(directory)
    if not any(os.path.exists(os.path.join(d, SERVER_JSON)) for d in inner):
        changed = _mtime(directory)
        starting = changed is not None and now - changed < STARTING_GRACE_S
        return RunEntry(run_id, live=starting, ended_at=changed)
    ends = [e.ended_at for e in (finished_entry(d) for d in inner) if e.ended_at is not None]
    return RunEntry(run_id, live=False, ended_at=max(ends) if ends else _mtime(directory))


def finished_entry(directory: str) -> RunEntry:
    """A run folder known to be finished: its end from ``exit.json``, else its files' times."""
    run_id = os.path.basename(directory)
    record = read_exit(directory)
    if record is not None:
        return RunEntry(run_id, live=False, ended_at=record.ended_at)
    times = [
        t
        for t in (_mtime(os.path.join(directory, n)) for n in (SERVER_LOG, EXIT_JSON, SERVER_JSON))
        if t is not None
    ]
    return RunEntry(run_id, live=False, ended_at=max(times) if times else None)


def folder_bytes(directory: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    return total


def stale_specs(workdir: str, *, now: float, older_than_s: float) -> List[str]:
    root = os.path.join(os.path.expanduser(workdir), "specs")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(root, name)
        changed = _mtime(path)
        if os.path.isfile(path) and changed is not None and now - changed >= older_than_s:
            out.append(path)
    return out


def run(raw: Dict[str, Any], emit: Emit) -> PruneResult:
    spec = parse_spec(PruneSpec, raw)
    if spec.keep is not None and spec.keep < 0:
        raise AgentFailure(ErrorKind.BAD_SPEC, "prune: 'keep' must be 0 or more")
    if spec.older_than_s is not None and spec.older_than_s < 0:
        raise AgentFailure(ErrorKind.BAD_SPEC, "prune: 'older_than_s' must be 0 or more")
    now = time.time()
    if spec.jobs:
        folders = {os.path.basename(d): d for d in job_folders(spec.workdir)}
        entries = [job_entry(d, now=now, live=spec.live) for d in folders.values()]
    else:
        folders = {os.path.basename(d): d for d in run_folders(spec.workdir)}
        entries = [run_entry(d, now=now) for d in folders.values()]
        entries = [RunEntry(e.run_id, True, None) if e.run_id in spec.live else e for e in entries]
    remove, kept = select(entries, now=now, older_than_s=spec.older_than_s, keep=spec.keep)
    pruned = []
    for entry in remove:
        directory = folders[entry.run_id]
        size = folder_bytes(directory)
        error: Optional[str] = None
        if not spec.dry_run:
            try:
                shutil.rmtree(directory)
            except OSError as exc:
                error = f"{exc.filename or directory}: {exc.strerror or exc}"
        pruned.append(
            PrunedRun(
                run_id=entry.run_id,
                ended_at=entry.ended_at,
                bytes=size,
                removed=not spec.dry_run and error is None,
                error=error,
            )
        )
    specs = stale_specs(spec.workdir, now=now, older_than_s=spec.stale_spec_s)
    removed_specs = []
    for path in specs:
        if spec.dry_run:
            removed_specs.append(path)
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        removed_specs.append(path)
    return PruneResult(
        pruned=pruned,
        kept=sorted(e.run_id for e in kept),
        live=sorted(e.run_id for e in entries if e.live),
        specs_removed=removed_specs,
        dry_run=spec.dry_run,
        **identity(spec.workdir),
    )
