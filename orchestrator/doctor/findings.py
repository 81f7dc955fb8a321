"""The doctor's output record: one finding per check, passed checks included.

Passed checks are reported as ``ok`` findings on purpose: a report that lists only problems
cannot tell "checked and fine" from "never checked", and that difference is exactly what a
person debugging a silent acceptance collapse needs to see.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict

Severity = Literal["error", "warning", "ok"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "ok")
_RANK = {"error": 0, "warning": 1, "ok": 2}


@dataclass(frozen=True)
class Finding:
    """One check's verdict. ``check`` names are an interface (JSON output, cause ranking).
    Persisted as it stands (``RunResult.doctor``, ``engine_changes``), its details as JSON."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    check: str
    severity: Severity
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "message": self.message,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Finding:
        return cls(
            check=str(obj["check"]),
            severity=obj["severity"],
            message=str(obj.get("message", "")),
            details=dict(obj.get("details") or {}),
        )


def error(check: str, message: str, **details: Any) -> Finding:
    return Finding(check, "error", message, details)


def warning(check: str, message: str, **details: Any) -> Finding:
    return Finding(check, "warning", message, details)


def ok(check: str, message: str, **details: Any) -> Finding:
    return Finding(check, "ok", message, details)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def problems(findings: Iterable[Finding]) -> list[Finding]:
    """The non-ok findings, in their original order."""
    return [f for f in findings if f.severity != "ok"]


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then passes; stable within each group."""
    return sorted(findings, key=lambda f: _RANK[f.severity])


def to_json(findings: Iterable[Finding]) -> dict[str, Any]:
    """The ``--json`` document: ``{"findings": [...]}``."""
    return {"findings": [f.to_json() for f in findings]}
