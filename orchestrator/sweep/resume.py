"""What ``orch run --resume RESULTS_DIR`` keeps, measures again and sets aside.

A playbook run writes ``plan.json`` (which playbook and its SHA-256, which hosts file and
filter, which folder each run got) into its results folder when it starts. Resuming reads it
back and runs the same playbook, refused if the file changed since (its runs would not be the
ones measured), so the same runs land in the same folders. No copy of the playbook is kept: it
may hold literal secrets (an ``--api-key`` in extra_args), which never go into results.

The content of every prompt file and each hosts entry the runs use is pinned beside it
(``inputs``, see ``sweep/pins.py``): a resume that would measure on other prompts or another
host's setup is refused, the change named. A plan.json written before ``inputs`` existed
resumes with a warning that they could not be checked.

Per run folder: a measurement whose ``summary.json`` holds a result without an error is kept
(collapses included: they are measurements). Anything else that is in the way of measuring
again (a measurement cut short, with no summary; one that failed; one not run) is renamed
``<folder>.interrupted-1`` (``.failed-1``, ``.not-run-1``; a run measured once in its own
folder is set aside whole as ``.interrupted-1``), never deleted or overwritten. A run
folder left with nothing to keep is set aside whole and its run starts afresh; one that keeps
measurements gets a new server session (``server-2.log``, ``manifest-2.json``) beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.results.manifest import Manifest, load_manifest
from orchestrator.results.model import ResultError, RunResult
from orchestrator.results.store import set_aside_name, write_json
from orchestrator.sweep.points import POINTS_DIR

PLAN_FILE = "plan.json"
PLAN_VERSION = 1


class Status(str, Enum):
    """What a measurement's folder holds."""

    OK = "ok"  # a result without an error: kept
    FAILED = "failed"
    NOT_RUN = "not-run"
    INTERRUPTED = "interrupted"  # started, never summarised
    ABSENT = "absent"

    @property
    def kept(self) -> bool:
        return self is Status.OK


@dataclass(frozen=True)
class RunRecord:
    key: str  # run@host
    folder: str  # under the results folder


@dataclass(frozen=True)
class PlanRecord:
    """``plan.json``: what a resume needs to rebuild the same runs in the same folders."""

    playbook: str  # the playbook's path when the run started (prompt files are relative to it)
    playbook_sha256: str
    hosts_file: str
    only: list[str]
    force: bool
    runs: list[RunRecord]
    version: int = PLAN_VERSION
    # the content of the prompt files and hosts entries (``pins.pin_inputs``); None in a plan
    # written by an orch before they were pinned
    inputs: dict[str, Any] | None = None

    def folder_of(self, key: str) -> str | None:
        return next((r.folder for r in self.runs if r.key == key), None)

    @classmethod
    def read(cls, results_dir: Path) -> PlanRecord:
        path = results_dir / PLAN_FILE
        hint = "resume a folder that `orch run` made (it writes plan.json when it starts)"
        if not path.is_file():
            raise OrchError(f"{results_dir} has no {PLAN_FILE}: nothing to resume", hint=hint)
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            runs = [RunRecord(**r) for r in obj.pop("runs")]
            record = cls(runs=runs, **obj)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise OrchError(f"{path} is not a plan orch can read: {exc}", hint=hint) from exc
        if record.version != PLAN_VERSION:
            raise OrchError(f"{path}: plan version {record.version} is not {PLAN_VERSION}")
        return record

    def write(self, results_dir: Path) -> None:
        write_json(results_dir / PLAN_FILE, asdict(self))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Decision:
    """For one run: what to keep, what to set aside (renames, relative to the run's folder;
    ``("", …)`` is the run folder itself), and the session the new server starts."""

    keep: list[str]
    aside: list[tuple[str, Status]] = field(default_factory=list)
    session: int = 1
    fresh: bool = True  # the run folder is made anew
    complete: bool = False  # every planned measurement kept: nothing to run


def decide(statuses: Mapping[str, Status], planned: Sequence[str], *, sessions: int) -> Decision:
    """Pure: the statuses of the measurement folders found (``""``: the run folder itself, for
    a run that measures once), the folders the run plans (an SLO search's are found, not
    planned), and how many server sessions the folder has had."""
    keep = [f for f, s in statuses.items() if s.kept]
    if planned == [""]:  # measured once, in the run folder itself
        if statuses.get("", Status.ABSENT).kept:
            return Decision(keep=[""], session=sessions, fresh=False, complete=True)
        present = statuses.get("", Status.ABSENT) is not Status.ABSENT or sessions > 0
        return Decision(keep=[], aside=[("", Status.INTERRUPTED)] if present else [])
    if not keep:
        present = sessions > 0 or any(s is not Status.ABSENT for s in statuses.values())
        return Decision(keep=[], aside=[("", Status.INTERRUPTED)] if present else [])
    aside: list[tuple[str, Status]] = [
        (f, s) for f, s in sorted(statuses.items()) if s not in (Status.OK, Status.ABSENT)
    ]
    complete = all(f in keep for f in planned)
    return Decision(keep=keep, aside=aside, session=sessions + 1, fresh=False, complete=complete)


def status_of(folder: Path) -> tuple[Status, RunResult | None]:
    summary = folder / "summary.json"
    if not folder.is_dir():
        return Status.ABSENT, None
    if not summary.is_file():
        return Status.INTERRUPTED, None
    try:
        result = RunResult.load(summary)
    except (ResultError, OSError, ValueError):
        return Status.INTERRUPTED, None
    if result.not_run:
        return Status.NOT_RUN, result
    return (Status.FAILED if result.error is not None else Status.OK), result


@dataclass(frozen=True)
class Found:
    """A run folder as a previous session left it."""

    statuses: dict[str, Status]
    results: dict[str, RunResult]
    sessions: int  # manifests written: one per server session
    run_ids: list[str]  # the server run ids those sessions launched


def survey(run_dir: Path, planned: Sequence[str]) -> Found:
    """Read a run folder: every planned measurement's status and every measurement an SLO
    search left under ``points/``."""
    statuses: dict[str, Status] = {}
    results: dict[str, RunResult] = {}
    folders = list(planned)
    points = run_dir / POINTS_DIR
    if points.is_dir():
        for child in sorted(points.iterdir()):
            rel = f"{POINTS_DIR}/{child.name}"
            if child.is_dir() and not set_aside_name(child.name) and rel not in folders:
                folders.append(rel)
    for rel in folders:
        status, result = status_of(run_dir / rel if rel else run_dir)
        statuses[rel] = status
        if result is not None and status.kept:
            results[rel] = result
    manifests = sorted(run_dir.glob("manifest*.json")) if run_dir.is_dir() else []
    run_ids = []
    for path in manifests:
        record = load_manifest(path)  # ManifestError naming the file if it is no manifest
        if isinstance(record, Manifest) and record.run_id is not None:
            run_ids.append(record.run_id)
    return Found(statuses, results, len(manifests), run_ids)


def set_aside(run_dir: Path, rel: str, status: Status) -> Path:
    """Rename ``run_dir/rel`` (the run folder itself when ``rel`` is "") to the first free
    ``<name>.<status>-<n>``: kept, out of the way, never over another folder."""
    source = run_dir / rel if rel else run_dir
    n = 1
    while True:
        target = source.with_name(f"{source.name}.{status.value}-{n}")
        if not target.exists():
            try:
                os.rename(source, target)
            except OSError as exc:
                raise OrchError(f"could not set {source} aside as {target.name}: {exc}") from exc
            return target
        n += 1
