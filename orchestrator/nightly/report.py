"""A night's verdict as a typed result (``NightlyVerdict``), ``nightly.md`` and ``nightly.json``.

``nightly.md`` says the verdict first and then only what a person must act on, in an order fit
to paste into a chat or a CI step summary: failures (acceptance collapses), regressions (before
and after, the change, since which night, what changed, where Otava puts the shift),
suspicious nights, what could not be measured, then improvements; every figure follows in a
table at the end. ``nightly.json`` holds the same result for scripts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.config.nightly_terms import EXIT_CODES, VERDICT_ORDER, Verdict, worst
from orchestrator.nightly.verdict import CaseVerdict, MetricVerdict
from orchestrator.results.mdtext import md_block, md_code, md_text
from orchestrator.results.store import write_json, write_text

SCHEMA_VERSION = 1
MD_FILE = "nightly.md"
JSON_FILE = "nightly.json"
SECTIONS: tuple[Verdict, ...] = tuple(v for v in VERDICT_ORDER if v != "ok")  # worst first
HEADINGS: dict[Verdict, str] = {
    "failure": "Failures (acceptance collapse)",
    "regression": "Regressions",
    "drift": "Drift (a slow trend past the threshold)",
    "suspicious": "Suspicious (one violating night)",
    "could_not_measure": "Could not measure",
    "insufficient_data": "Insufficient data",
    "inconclusive": "Inconclusive (past the threshold, not significant)",
    "recovered": "Recovered (back within the threshold two nights running)",
    "improvement": "Improvements",
    "ok": "OK",
}


@dataclass(frozen=True)
class NightlyVerdict:
    """One night of a playbook, judged: the worst verdict and its exit status, every case's
    verdicts, and notes (why nothing was measured, a change point that could not be looked for).

    ``recorded`` False: judged but not appended to the history (a write error). A regression or
    a suspicious night keeps its exit status; anything else exits 3, since later nights will be
    judged without this one and someone has to know.
    """

    playbook: str
    night: str
    cases: tuple[CaseVerdict, ...]
    night_time: datetime | None = None
    results_dir: str | None = None
    notes: tuple[str, ...] = ()
    recorded: bool = True
    verdict: Verdict = field(init=False)
    exit_code: int = field(init=False)

    def __post_init__(self) -> None:
        verdict = worst([c.verdict for c in self.cases])
        code = EXIT_CODES[verdict]
        if not self.recorded and code not in (1, 2):
            code = EXIT_CODES["could_not_measure"]
        object.__setattr__(self, "verdict", verdict)
        object.__setattr__(self, "exit_code", code)

    def metrics(self, verdict: Verdict) -> list[tuple[CaseVerdict, MetricVerdict]]:
        return [(c, m) for c in self.cases for m in c.metrics if m.verdict == verdict]

    def counts(self) -> list[tuple[Verdict, int]]:
        found = [m.verdict for c in self.cases for m in c.metrics]
        return [(v, found.count(v)) for v in VERDICT_ORDER if v in found]

    def to_json(self) -> dict[str, object]:
        cases = []
        for case in self.cases:
            cases.append(
                {
                    "case_id": case.case_id,
                    "label": case.case.label,
                    "verdict": case.verdict,
                    "gpu_mode": case.attributes.mode,  # named when the GPUs ran throttled
                    **{k: _plain(v) for k, v in dataclasses.asdict(case).items()},
                }
            )
        return {
            "schema_version": SCHEMA_VERSION,
            "playbook": self.playbook,
            "night": self.night,
            "night_time": self.night_time.isoformat() if self.night_time else None,
            "results_dir": self.results_dir,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "counts": dict(self.counts()),
            "notes": list(self.notes),
            "cases": cases,
        }


def could_not_measure(
    playbook: str, night: str, reason: str, *, results_dir: str | None = None
) -> NightlyVerdict:
    """The verdict of a night that measured nothing (hosts down, the playbook did not run)."""
    return NightlyVerdict(playbook, night, (), results_dir=results_dir, notes=(reason,))


def _plain(obj: object) -> object:
    """JSON-safe: tuples as lists, non-finite floats as None, datetimes as ISO text."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, datetime):
        return obj.isoformat()
    return obj


def fmt(value: float | None, unit: str = "") -> str:
    """A figure as a person reads it: 1234.5 -> "1234", 45.67 -> "45.7", 0.8123 -> "0.812"."""
    if value is None or not math.isfinite(value):
        return "-"
    text = (
        f"{value:.0f}"
        if abs(value) >= 1000
        else f"{value:.1f}"
        if abs(value) >= 10
        else f"{value:.3g}"
    )
    return f"{text} {unit}".strip()


def change_text(m: MetricVerdict) -> str:
    if m.change is None or not math.isfinite(m.change):
        return "-"
    return f"{m.change:+.4f}" if m.absolute else f"{m.change * 100:+.1f}%"


def _threshold(m: MetricVerdict) -> str:
    if m.threshold is None:
        return "-"
    return f"{m.threshold:g}" if m.absolute else f"{m.threshold * 100:g}%"


def _p(m: MetricVerdict) -> str:
    return "-" if m.p_value is None else f"{m.p_value:.2g}"


def _violation_lines(case: CaseVerdict, m: MetricVerdict) -> list[str]:
    """A violation or an improvement: the figure before and after, then the case, the nights,
    what changed and where the shift began, one indented line each."""
    head = (
        f"- **{md_text(m.metric)}** {fmt(m.baseline, m.unit)} → {fmt(m.value, m.unit)} "
        f"({change_text(m)}; threshold {_threshold(m)}; p={_p(m)}; {m.n} repeats)"
    )
    lines = [head, f"  - case {md_code(case.case_id)} {md_text(case.case.label)}"]
    if m.reason and m.verdict in ("regression", "drift", "inconclusive"):
        lines.append(f"  - why: {md_text(m.reason)}")
    if m.since:
        nights = len(m.violating_nights)
        good = f", last good {md_code(m.last_good)}" if m.last_good else ""
        since = md_code(m.since)
        lines.append(f"  - since {since} ({nights} night{'s' if nights != 1 else ''}){good}")
        changed = "; ".join(c.text for c in m.changes) or "nothing recorded"
        lines.append(f"  - changed: {md_text(changed)}")
    if m.change_point:
        note = md_text(m.change_point_note)
        lines.append(f"  - change point: {md_code(m.change_point)} ({note})")
    elif m.change_point_note:
        lines.append(f"  - change point: not located ({md_text(m.change_point_note)})")
    return lines


def _grouped_lines(items: Sequence[tuple[CaseVerdict, MetricVerdict]]) -> list[str]:
    """One line per case and reason (a new playbook is short of baseline nights everywhere)."""
    groups: dict[tuple[str, str], list[str]] = {}
    labels = {}
    for case, m in items:
        groups.setdefault((case.case_id, m.reason), []).append(m.metric)
        labels[case.case_id] = case.case.label
    return [
        f"- case {md_code(cid)} {md_text(labels[cid])}: {md_text(reason)} "
        f"({md_text(', '.join(names))})"
        for (cid, reason), names in groups.items()
    ]


def _table(verdict: NightlyVerdict) -> list[str]:
    lines = [
        "| case | metric | verdict | value | baseline | change | threshold | p | n |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in verdict.cases:
        for m in case.metrics:
            lines.append(
                f"| {md_code(case.case_id)} | {md_text(m.metric)} | {m.verdict} | "
                f"{fmt(m.value, m.unit)} | "
                f"{fmt(m.baseline, m.unit)} | {change_text(m)} | {_threshold(m)} | {_p(m)} | {m.n} |"
            )
    return lines


def render_markdown(verdict: NightlyVerdict) -> str:
    """``nightly.md`` (see the module docstring)."""
    when = f" ({verdict.night_time:%Y-%m-%d %H:%M} UTC)" if verdict.night_time else ""
    counts = (
        ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in verdict.counts()) or "nothing judged"
    )
    lines = [
        f"# Nightly: {verdict.verdict.upper().replace('_', ' ')} (exit {verdict.exit_code})",
        "",
        f"Playbook **{md_text(verdict.playbook)}**, night {md_code(verdict.night)}{when}: {counts} "
        f"({len(verdict.cases)} case{'s' if len(verdict.cases) != 1 else ''}).",
    ]
    lines += [f"> {md_block(note)}" for note in verdict.notes]
    for kind in SECTIONS:
        items = verdict.metrics(kind)
        if not items:
            continue
        lines += ["", f"## {HEADINGS[kind]}", ""]
        if kind in ("failure", "could_not_measure", "insufficient_data", "recovered"):
            lines += _grouped_lines(items)
        else:
            lines += [line for case, m in items for line in _violation_lines(case, m)]
    if verdict.cases:
        lines += ["", "## Cases", ""]
        lines += [
            f"- {md_code(c.case_id)} {md_text(c.case.label)}: **{c.verdict}**"
            + (f"; {md_text(c.attributes.mode)}" if c.attributes.mode else "")
            for c in verdict.cases
        ]
        lines += [
            "",
            "<details><summary>Every figure</summary>",
            "",
            *_table(verdict),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"


def write_nightly(verdict: NightlyVerdict, folder: Path | str) -> tuple[Path, Path]:
    """Write ``nightly.md`` and ``nightly.json`` into ``folder`` (never over existing ones)."""
    folder = Path(folder)
    md = write_text(folder / MD_FILE, render_markdown(verdict))
    js = write_json(folder / JSON_FILE, verdict.to_json())
    return md, js
