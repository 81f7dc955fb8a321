"""A line of the nightly history: ``HistoryRow`` (one night x case x metric), as one flat JSON
object and back (``RowReader``).

A row is flat so that pandas reads the history file as it is: the case's key fields and the
night's attributes are columns of their own, beside the row's night, metric and figures. Reading
validates each distinct case and attribute set once (pydantic, by their dataclasses' types) and
the rest of a line by hand: a year of history holds few distinct ones and tens of thousands of
lines.

Each line carries the row format's version (``v``; a line without one is version 1). A newer
orch that changes what a row means (a field added to the case key, say) raises it, so this one
never reads such a line as something it is not: a line of a version above ``ROW_VERSION`` is
refused (``NewerRow``), and ``History`` keeps it apart, out of every baseline, with a message
naming the file and its lines. Version 2 added ``prompts_sha256`` to the case.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import cast, get_args

from pydantic import TypeAdapter, ValidationError

from orchestrator.config.nightly_terms import Direction, Status, Verdict
from orchestrator.nightly.cases import CaseKey, NightAttributes

CASE_FIELDS = tuple(f.name for f in dataclasses.fields(CaseKey))
# what a line written before a field was added to the key means by its absence
_CASE_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(CaseKey) if f.default is not dataclasses.MISSING
}
ATTRIBUTE_FIELDS = tuple(f.name for f in dataclasses.fields(NightAttributes))
ROW_VERSION = 2  # raise it whenever a row's fields change meaning, or the case key gains one


class NewerRow(ValueError):
    """A line written by a newer orch, in a row format this one cannot read."""

    def __init__(self, version: object) -> None:
        super().__init__(f"row version {version!r} is newer than this orch reads ({ROW_VERSION})")
        self.version = version


@dataclass(frozen=True)
class HistoryRow:
    """One night x case x metric. ``value`` is the mean of ``values`` (one per repeat measured),
    ``spread`` their sample standard deviation (None below two). ``verdict``, ``baseline``,
    ``p_value`` and ``accepted`` are None until the night is judged (``verdict.settle``)."""

    night: str  # the results folder's name: 20261202T030000Z-nightly
    night_time: datetime  # UTC
    playbook: str
    case: CaseKey
    metric: str
    direction: Direction
    value: float | None
    spread: float | None
    n: int
    values: tuple[float, ...]
    failed_repeats: int  # measurements of the case that failed (host down, engine died ...)
    status: Status
    collapse: bool  # speculation collapsed in one of the case's measurements
    note: str | None  # the first error of a failed measurement, or the collapse's message
    attributes: NightAttributes
    verdict: Verdict | None = None
    baseline: float | None = None
    p_value: float | None = None
    accepted: bool | None = None  # joins later baselines (a decision about the night wins)

    @property
    def case_id(self) -> str:
        return self.case.id

    def to_json(self) -> dict[str, object]:
        """The row as one flat JSON object: the night first (``History`` relies on it)."""
        out: dict[str, object] = {
            "night": self.night,
            "night_time": self.night_time.astimezone(timezone.utc).isoformat(),
            "playbook": self.playbook,
            "case_id": self.case.id,
        }
        out.update(dataclasses.asdict(self.case))
        for field in dataclasses.fields(self):
            if field.name not in ("night", "night_time", "playbook", "case", "attributes"):
                value = getattr(self, field.name)
                out[field.name] = list(value) if isinstance(value, tuple) else value
        for name, value in dataclasses.asdict(self.attributes).items():
            out[name] = list(value) if isinstance(value, tuple) else value
        out["v"] = ROW_VERSION
        return out

    @classmethod
    def from_json(cls, obj: object) -> HistoryRow:
        """A row from its JSON object; ValueError if it is not one, ``NewerRow`` if a newer
        orch wrote it (unknown keys of a version this orch reads are ignored)."""
        return RowReader().row(obj)


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a whole number")
    return value


def _text(value: object, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not text")
    return value


def _word(value: object, words: tuple[str, ...], optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if value not in words:
        raise ValueError(f"{value!r} is not one of {', '.join(words)}")
    return str(value)


def _frozen(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


class RowReader:
    """Reads rows, validating each distinct case and attribute set once (pydantic, by their
    dataclasses' types) and the rest of a line by hand: a year of history holds few distinct
    ones and tens of thousands of lines."""

    def __init__(self) -> None:
        self._cases: dict[tuple[object, ...], CaseKey] = {}
        self._attributes: dict[tuple[object, ...], NightAttributes] = {}
        self._times: dict[str, datetime] = {}

    def _case(self, obj: dict[str, object]) -> CaseKey:
        key = tuple(obj.get(k, _CASE_DEFAULTS.get(k)) for k in CASE_FIELDS)
        if key not in self._cases:
            self._cases[key] = _CASE.validate_python(dict(zip(CASE_FIELDS, key, strict=True)))
        return self._cases[key]

    def _attrs(self, obj: dict[str, object]) -> NightAttributes:
        key = tuple(_frozen(obj.get(k)) for k in ATTRIBUTE_FIELDS)
        if key not in self._attributes:
            given = {k: obj[k] for k in ATTRIBUTE_FIELDS if k in obj}
            self._attributes[key] = _ATTRIBUTES.validate_python(given)
        return self._attributes[key]

    def _time(self, value: object) -> datetime:
        text = _text(value) or ""
        if text not in self._times:
            when = datetime.fromisoformat(text)
            if when.tzinfo is None:
                raise ValueError(f"{text!r} has no time zone")
            self._times[text] = when
        return self._times[text]

    def row(self, obj: object) -> HistoryRow:
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        check_version(obj)
        try:
            values = obj["values"]
            if not isinstance(values, list):
                raise ValueError(f"values {values!r} is not a list")
            return HistoryRow(
                night=str(_text(obj["night"])),
                night_time=self._time(obj["night_time"]),
                playbook=str(_text(obj["playbook"])),
                case=self._case(obj),
                metric=str(_text(obj["metric"])),
                direction=cast(Direction, _word(obj["direction"], _DIRECTIONS)),
                value=_number(obj.get("value")),
                spread=_number(obj.get("spread")),
                n=_integer(obj["n"]),
                values=tuple(float(_number(v) or 0.0) for v in values),
                failed_repeats=_integer(obj.get("failed_repeats", 0)),
                status=cast(Status, _word(obj["status"], _STATUSES)),
                collapse=obj.get("collapse") is True,
                note=_text(obj.get("note"), optional=True),
                attributes=self._attrs(obj),
                verdict=cast(Verdict | None, _word(obj.get("verdict"), _VERDICTS, True)),
                baseline=_number(obj.get("baseline")),
                p_value=_number(obj.get("p_value")),
                accepted=obj.get("accepted") if isinstance(obj.get("accepted"), bool) else None,
            )
        except KeyError as exc:
            raise ValueError(f"no {exc.args[0]!r}") from exc
        except ValidationError as exc:
            raise ValueError(str(exc).splitlines()[0]) from exc


def check_version(obj: dict[str, object]) -> None:
    """``NewerRow`` for a line whose version this orch cannot read (none: version 1)."""
    version = obj.get("v", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"row version {version!r} is not a positive whole number")
    if version > ROW_VERSION:
        raise NewerRow(version)


_DIRECTIONS: tuple[str, ...] = get_args(Direction)
_STATUSES: tuple[str, ...] = get_args(Status)
_VERDICTS: tuple[str, ...] = get_args(Verdict)
_CASE = TypeAdapter(CaseKey)
_ATTRIBUTES = TypeAdapter(NightAttributes)


# a row with every column, for the frame's column order when the history is empty
_EMPTY = HistoryRow(
    night="",
    night_time=datetime(1970, 1, 1, tzinfo=timezone.utc),
    playbook="",
    case=CaseKey(
        *("", "", "none", None, None, None, None, None, "", 0, None, None, 0, False, "chat"),
        *(0.0, "concurrency", 0.0, ""),
    ),
    metric="",
    direction="higher",
    value=None,
    spread=None,
    n=0,
    values=(),
    failed_repeats=0,
    status="measured",
    collapse=False,
    note=None,
    attributes=NightAttributes(),
)
COLUMNS: tuple[str, ...] = tuple(_EMPTY.to_json())  # a line's keys, in order
