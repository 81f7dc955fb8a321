"""The results folder: one folder per playbook run, one sub-folder per run, files written atomically.

Nothing is ever overwritten: a playbook run gets a fresh folder (``<UTC time>-<playbook>``, with a
numeric suffix if two start in the same second). Finished files (manifest, summaries, plot) are
written to a temporary name in the same folder and then linked into place, which fails if the
name is already taken, so a reader never sees half of one. Logs that grow while a run goes on
(``AppendLog``) are created exclusively under their final name and flushed as lines arrive, so
``tail -f`` follows them live and a killed orch leaves every line it had received.
Every file is created with mode 0600: results hold engine logs and settings, for their owner only.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import OrchError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100
FILE_MODE = 0o600


def safe_name(name: str) -> str:
    """A name safe as a folder and as a host-side run id (letters, digits, ``.``, ``_``, ``-``):
    matrix run names carry ``[``, ``=`` and ``,``."""
    cleaned = _UNSAFE.sub("_", name).strip("._")[:MAX_NAME].rstrip("._")
    return cleaned or "run"


def utc_stamp(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def new_results_dir(root: Path, playbook: str, *, now: datetime | None = None) -> Path:
    """Create ``root/<stamp>-<playbook>`` exclusively (never reuse an existing folder)."""
    root.mkdir(parents=True, exist_ok=True)
    base = f"{utc_stamp(now)}-{safe_name(playbook)}"
    for n in range(1000):
        path = root / (base if n == 0 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise OrchError(f"could not create a new results folder under {root}")


def write_bytes(path: Path, data: bytes) -> Path:
    """Write atomically and refuse to replace an existing file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp's mode today; said here, not left to its docs
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError as exc:
            raise OrchError(
                f"refusing to overwrite {path}", hint="results are never overwritten"
            ) from exc
    finally:
        os.unlink(tmp)
    return path


def write_text(path: Path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


class AppendLog:
    """A file that grows while a run goes on (server.log, events.jsonl, requests.jsonl).

    Opened under its final name in ``x`` mode (an existing file is never clobbered) and flushed
    after every ``write_*`` call: one write per line or per batch is cheap next to a network
    stream, and it is what makes ``tail -f results/.../server.log`` work during a run and keeps
    every received line on disk if orch is killed (even ``kill -9``). Lines are written whole,
    so a reader never sees half a line unless the disk fills up.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError as exc:
            raise OrchError(
                f"refusing to overwrite {path}", hint="results are never overwritten"
            ) from exc
        self._fh: TextIO | None = os.fdopen(fd, "w", encoding="utf-8")

    def write_line(self, line: str) -> None:
        self.write_lines((line,))

    def write_json(self, obj: Any) -> None:
        self.write_line(json.dumps(obj, ensure_ascii=False, default=str))

    def write_lines(self, lines: Iterable[str]) -> None:
        """Write a batch of lines, then flush once."""
        assert self._fh is not None, f"{self.path} already closed"
        self._fh.write("".join(line.rstrip("\n") + "\n" for line in lines))
        self._fh.flush()

    def flush(self) -> None:
        if self._fh:
            self._fh.flush()

    @property
    def closed(self) -> bool:
        return self._fh is None

    def close(self) -> Path:
        if self._fh is None:
            return self.path
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        return self.path

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
