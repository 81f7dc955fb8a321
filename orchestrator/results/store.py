"""The results folder: one folder per playbook run, one sub-folder per run, files written atomically.

Nothing is ever overwritten: a playbook run gets a fresh folder (``<UTC time>-<playbook>``, with a
numeric suffix if two start in the same second). Finished files (manifest, summaries, plot) are
written to a temporary name in the same folder and then linked into place, which fails if the
name is already taken, so a reader never sees half of one. Logs that grow while a run goes on
(``AppendLog``) are created exclusively under their final name and flushed as lines arrive, so
``tail -f`` follows them live and a killed orch leaves every line it had received.
Every file is created with mode 0600: results hold engine logs and settings, for their owner only.

A write that fails (the disk is full, a read-only mount, a quota) is a ``ResultsWriteError``
naming the path and the reason ("no space left on device"), never a bare OSError: the playbook
stops cleanly on it (see ``commands/run.py``) instead of ending in a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import OrchError, ResultsWriteError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100
FILE_MODE = 0o600

# The OS's words for the errors a results disk meets, lower-cased like the rest of orch's messages.
_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
}
_HINTS = {
    errno.ENOSPC: "free space on the disk that holds the results folder, or pass --results DIR "
    "on another disk",
    errno.EDQUOT: "free space within your quota, or pass --results DIR elsewhere",
    errno.EROFS: "pass --results DIR on a writable disk",
    errno.EACCES: "pass --results DIR in a folder you can write to",
    errno.EPERM: "pass --results DIR in a folder you can write to",
}


def write_error(path: Path | str, exc: OSError) -> ResultsWriteError:
    """``exc`` (from writing ``path``) as the one error type results writers raise."""
    code = exc.errno
    reason = _REASONS.get(code) if code is not None else None
    if reason is None:
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
    hint = _HINTS.get(code) if code is not None else None
    return ResultsWriteError(str(path), reason, errno=code, hint=hint)


@contextlib.contextmanager
def _writing(path: Path | str) -> Iterator[None]:
    """Translate an OSError raised while writing ``path`` into a ``ResultsWriteError``."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc) from exc


_ASIDE = re.compile(r"\.(interrupted|failed|not-run)-[0-9]+$")


def set_aside_name(name: str) -> bool:
    """Whether ``name`` is a folder ``orch run --resume`` set aside (``03-c8-r2.interrupted-1``):
    kept for the record, never read as a result."""
    return _ASIDE.search(name) is not None


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
    with _writing(root):
        root.mkdir(parents=True, exist_ok=True)
    base = f"{utc_stamp(now)}-{safe_name(playbook)}"
    for n in range(1000):
        path = root / (base if n == 0 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(path, exc) from exc
        return path
    raise OrchError(f"could not create a new results folder under {root}")


def make_dir(path: Path) -> Path:
    """Create the folder ``path`` (its parent must exist); it must not exist yet."""
    with _writing(path):
        path.mkdir()
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """Write atomically and refuse to replace an existing file."""
    with _writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with _writing(path):
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
        except OSError as exc:
            raise write_error(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):  # a full disk still lets a file go
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

    A write that fails raises ``ResultsWriteError`` and is kept in ``error`` (every later write
    raises it again): whoever owns the log checks ``error`` once it is closed, so a log that
    lost lines in a task nobody awaited (the log tail) still fails the run. ``close`` never
    raises: it only records.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: ResultsWriteError | None = None
        with _writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError as exc:
            raise OrchError(
                f"refusing to overwrite {path}", hint="results are never overwritten"
            ) from exc
        except OSError as exc:
            raise write_error(path, exc) from exc
        self._fh: TextIO | None = os.fdopen(fd, "w", encoding="utf-8")

    def write_line(self, line: str) -> None:
        self.write_lines((line,))

    def write_json(self, obj: Any) -> None:
        self.write_line(json.dumps(obj, ensure_ascii=False, default=str))

    def write_lines(self, lines: Iterable[str]) -> None:
        """Write a batch of lines, then flush once."""
        if self.error is not None:
            raise self.error
        assert self._fh is not None, f"{self.path} already closed"
        try:
            self._fh.write("".join(line.rstrip("\n") + "\n" for line in lines))
            self._fh.flush()
        except OSError as exc:
            self.error = write_error(self.path, exc)
            raise self.error from exc

    def flush(self) -> None:
        if self._fh and self.error is None:
            try:
                self._fh.flush()
            except OSError as exc:
                self.error = write_error(self.path, exc)
                raise self.error from exc

    @property
    def closed(self) -> bool:
        return self._fh is None

    def close(self) -> Path:
        """Flush, sync and close; a failure is recorded in ``error``, not raised."""
        fh, self._fh = self._fh, None
        if fh is None:
            return self.path
        try:
            if self.error is None:
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            self.error = write_error(self.path, exc)
        finally:
            try:
                fh.close()  # flushes what a failed write left buffered: fails again, closes anyway
            except OSError as exc:
                self.error = self.error or write_error(self.path, exc)
        return self.path

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
