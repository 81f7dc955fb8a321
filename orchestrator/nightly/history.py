"""The nightly history: one append-only JSON Lines file per playbook under the results root.

``results/history/<playbook>.jsonl`` holds one line per night x case x metric (``HistoryRow``):
the night (its results folder's name and UTC time), the case (its id and key fields),
the metric and which way is better, the mean over the night's repeats, their sample standard
deviation, how many there were and each value (the t-test needs them), the night's status, its
attributes (engine version, driver, hosts ...), and once judged the verdict, the baseline it was
judged against and whether the night joins later baselines (``accepted``). Every line is flat
JSON, so ``pandas.read_json(path, lines=True)`` reads the file as it is; ``History.frame()``
adds the case's label, the people's decisions and the dtypes.

Lines are only ever appended (one ``write`` per line, under an exclusive lock, then fsync), so
a reader never sees a half-written older line and a trend never needs a per-request file.
A line torn by a crash is skipped when read (``History.problems`` says where), and the next
append starts on a fresh line. People's decisions (``orch baseline accept|reject NIGHT``) go
to ``<playbook>.decisions.jsonl`` beside it, also appended: the last decision about a night
wins, so changing one's mind never rewrites anything.

A row and its JSON are ``orchestrator.nightly.rows``; ``record_night``
(``orchestrator.nightly.record``) builds a night's rows from its results.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from pydantic import TypeAdapter, ValidationError

from orchestrator.config.nightly_terms import (
    VERDICT_ORDER,
    Decision,
    Verdict,
    VerdictCounts,
    worst,
)
from orchestrator.errors import OrchError
from orchestrator.nightly.rows import (
    COLUMNS,
    ROW_VERSION,
    HistoryRow,
    NewerRow,
    RowReader,
    check_version,
)
from orchestrator.results.store import FILE_MODE, safe_name, write_error

__all__ = ["DecisionRecord", "History", "HistoryRow", "NightSummary", "RowReader", "history_path"]

HISTORY_DIR = "history"


@dataclass(frozen=True)
class DecisionRecord:
    """A person's decision about a night: ``accept`` it (an intended change: the baseline starts
    again from it) or ``reject`` it (a broken night: never part of a baseline)."""

    night: str
    decision: Decision
    at: datetime
    note: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "night": self.night,
            "decision": self.decision,
            "at": self.at.astimezone(timezone.utc).isoformat(),
            "note": self.note,
        }


_DECISION = TypeAdapter(DecisionRecord)


@dataclass(frozen=True)
class NightSummary:
    """A night as ``orch history`` lists it: its worst verdict and the count of each."""

    night: str
    night_time: datetime
    cases: int
    verdict: Verdict | None  # None: recorded but never judged
    counts: VerdictCounts
    decision: Decision | None


def history_path(results_root: Path | str, playbook: str) -> Path:
    """``<results root>/history/<playbook>.jsonl`` (the playbook's name made file-safe)."""
    return Path(results_root) / HISTORY_DIR / f"{safe_name(playbook)}.jsonl"


# every row orch writes starts so (``HistoryRow.to_json`` puts the night first, the JSON is
# compact): such a line's night is read from its start; any other line is parsed whole
_NIGHT_KEY = '{"night":"'
_DECODER = json.JSONDecoder()


def _night_prefix(night: str) -> str:
    return _NIGHT_KEY[:-1] + json.dumps(night, ensure_ascii=False) + ","


@contextlib.contextmanager
def _appending(path: Path) -> Iterator[int]:
    """An fd open for appending to ``path`` under an exclusive lock, its last line ended."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")  # a torn last line stays alone on its line, skipped when read
        yield fd
        os.fsync(fd)
    except OSError as exc:
        raise write_error(path, exc) from exc
    finally:
        os.close(fd)  # releases the lock


def _write_lines(fd: int, objects: Sequence[dict[str, object]]) -> None:
    for obj in objects:  # one write() per line: appended whole, never interleaved
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        os.write(fd, (line + "\n").encode("utf-8"))


class History:
    """A playbook's nightly history (see the module docstring)."""

    def __init__(self, results_root: Path | str, playbook: str) -> None:
        self.playbook = playbook
        self.path = history_path(results_root, playbook)
        self.decisions_path = self.path.with_name(f"{self.path.stem}.decisions.jsonl")
        self.problems: list[str] = []  # lines skipped when read: path:line: why

    @classmethod
    def of_file(cls, path: Path | str) -> History:
        """The history in ``path`` wherever it lies (``<playbook>.jsonl``, its decisions in
        ``<playbook>.decisions.jsonl`` beside it): a copy, or one another tool wrote."""
        path = Path(path)
        history = cls(path.parent, path.stem)
        history.path = path
        history.decisions_path = path.with_name(f"{path.stem}.decisions.jsonl")
        return history

    def _lines(self, path: Path) -> Iterator[tuple[int, str]]:
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:  # a torn line: skipped
                yield from ((i, line) for i, line in enumerate(fh, 1) if line.strip())
        except FileNotFoundError:
            return
        except OSError as exc:
            raise OrchError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def _objects(
        self, path: Path, nights: Collection[str] | None = None
    ) -> Iterator[tuple[int, object]]:
        """Each line's number and JSON value (of ``nights`` only, if given: told by the start
        of a line as orch writes it, else by its value)."""
        prefixes = tuple(_night_prefix(n) for n in nights) if nights is not None else None
        for number, line in self._lines(path):
            if (
                prefixes is not None
                and line.startswith(_NIGHT_KEY)
                and not line.startswith(prefixes)
            ):
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                self.problems.append(f"{path}:{number}: skipped, not JSON ({exc})")
                continue
            if nights is None or (isinstance(obj, dict) and obj.get("night") in nights):
                yield number, obj

    def rows(self, *, nights: Collection[str] | None = None) -> list[HistoryRow]:
        """Every row (of ``nights`` only, if given), in file order."""
        return [r for r, _ in self._rows(nights)]

    def _rows(
        self, nights: Collection[str] | None = None
    ) -> Iterator[tuple[HistoryRow, dict[str, object]]]:
        """Each valid row with its JSON object; the others are skipped and said."""
        reader = RowReader()
        newer: list[tuple[int, object]] = []
        for number, obj in self._objects(self.path, nights):
            try:
                yield reader.row(obj), obj  # type: ignore[misc]
            except NewerRow as exc:
                newer.append((number, exc.version))
            except ValueError as exc:
                self.problems.append(f"{self.path}:{number}: skipped, {exc}")
        self._say_newer(newer)

    def _say_newer(self, newer: Sequence[tuple[int, object]]) -> None:
        """One message for the lines a newer orch wrote: kept apart, never a baseline."""
        if not newer:
            return
        lines = ", ".join(str(n) for n, _ in newer[:5]) + (", ..." if len(newer) > 5 else "")
        versions = ", ".join(sorted({str(v) for _, v in newer}))
        self.problems.append(
            f"{self.path}: {len(newer)} row(s) (line {lines}) written by a newer orch (row "
            f"version {versions}; this orch reads up to {ROW_VERSION}) are kept apart: not "
            "read, judged or used as a baseline; upgrade orch to read them"
        )

    def nights_recorded(self) -> set[str]:
        """The nights in the history (read from each line's start: no full parse)."""
        found = set()
        for _, line in self._lines(self.path):
            with contextlib.suppress(ValueError):
                if line.startswith(_NIGHT_KEY):
                    night, _end = _DECODER.raw_decode(line, len(_NIGHT_KEY) - 1)
                else:  # written by something else than orch: read the whole line
                    obj = json.loads(line)
                    night = obj.get("night") if isinstance(obj, dict) else None
                if isinstance(night, str):
                    found.add(night)
        return found

    def decisions(self) -> dict[str, DecisionRecord]:
        """The last decision about each night."""
        latest: dict[str, DecisionRecord] = {}
        for number, obj in self._objects(self.decisions_path):
            try:
                record = _DECISION.validate_python(obj)
            except ValidationError as exc:
                self.problems.append(f"{self.decisions_path}:{number}: skipped, {exc}")
                continue
            latest[record.night] = record
        return latest

    def append(self, rows: Sequence[HistoryRow]) -> int:
        """Append a night's rows (or several nights'); OrchError for a night already recorded
        (each night is recorded once: judge it again from its rows instead)."""
        with _appending(self.path) as fd:
            present = self.nights_recorded()
            again = sorted({r.night for r in rows} & present)
            if again:
                raise OrchError(
                    f"night {again[0]} is already in {self.path}",
                    hint="each night is recorded once; `orch history` lists the nights",
                )
            _write_lines(fd, [r.to_json() for r in rows])
        return len(rows)

    def decide(
        self,
        night: str,
        decision: Decision,
        *,
        note: str | None = None,
        now: datetime | None = None,
    ) -> DecisionRecord:
        """Record a person's decision about a recorded night (the last one wins)."""
        if night not in self.nights_recorded():
            raise OrchError(
                f"no night {night} in {self.path}",
                hint="`orch history PLAYBOOK` lists the recorded nights",
            )
        record = DecisionRecord(night, decision, now or datetime.now(timezone.utc), note)
        with _appending(self.decisions_path) as fd:
            _write_lines(fd, [record.to_json()])
        return record

    def nights(self) -> list[NightSummary]:
        """Each night once, oldest first, with its verdicts and the decision about it."""
        decisions = self.decisions()
        by_night: dict[str, list[HistoryRow]] = {}
        for row in self.rows():
            by_night.setdefault(row.night, []).append(row)
        out = []
        for night, rows in by_night.items():
            verdicts = [r.verdict for r in rows if r.verdict is not None]
            counts = tuple((v, verdicts.count(v)) for v in VERDICT_ORDER if v in verdicts)
            decision = decisions.get(night)
            out.append(
                NightSummary(
                    night=night,
                    night_time=rows[0].night_time,
                    cases=len({r.case_id for r in rows}),
                    verdict=worst(verdicts) if verdicts else None,
                    counts=counts,
                    decision=decision.decision if decision else None,
                )
            )
        return sorted(out, key=lambda s: (s.night_time, s.night))

    def frame(self) -> pd.DataFrame:
        """The history as a DataFrame: a column per key of a line (``HistoryRow.to_json``) and
        ``case_label`` (``CaseKey.label``), ``night_time`` as UTC datetimes, ``decision`` (the last one about the night) and
        ``accepted`` as it counts now (a decision wins over the judgement's own)."""
        labels: dict[str, str] = {}
        objects = []
        reader = RowReader()
        newer: list[tuple[int, object]] = []
        for number, obj in self._objects(self.path):
            # a frame is for looking: a line is checked in full once per case, else only for
            # the keys every row has (a year of history is tens of thousands of lines)
            try:
                if not isinstance(obj, dict) or not obj.keys() >= _ROW_KEYS:
                    raise ValueError(f"not a row (no {', '.join(sorted(_ROW_KEYS))})")
                check_version(obj)
                if obj["case_id"] not in labels:
                    labels[str(obj["case_id"])] = reader.row(obj).case.label
            except NewerRow as exc:
                newer.append((number, exc.version))
                continue
            except ValueError as exc:
                self.problems.append(f"{self.path}:{number}: skipped, {exc}")
                continue
            objects.append(obj)
        self._say_newer(newer)
        frame = pd.DataFrame(objects, columns=list(COLUMNS))
        frame["v"] = frame["v"].fillna(1).astype("int64")  # a line without one is version 1
        frame.insert(4, "case_label", frame["case_id"].map(labels).astype(object))
        decisions = {n: d.decision for n, d in self.decisions().items()}
        frame["decision"] = frame["night"].map(decisions).astype(object)
        frame["decision"] = frame["decision"].where(frame["decision"].notna(), None)
        overridden = frame["decision"].map({"accept": True, "reject": False})
        frame["accepted"] = overridden.where(overridden.notna(), frame["accepted"]).astype(object)
        frame["night_time"] = pd.to_datetime(frame["night_time"], utc=True)
        for column in ("value", "spread", "baseline", "p_value", "load_value"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
        return frame


_ROW_KEYS = frozenset({"night", "night_time", "case_id", "metric", "value", "values"})
