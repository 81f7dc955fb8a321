"""`orch nightly`, `orch history` and `orch baseline`: the nightly library (``nightly/``) around a
playbook run, without the command line.

A night is a results folder (``results/<UTC stamp>-<playbook>``). Once the playbook has run, its
figures are judged against the history under the same results root, appended to it, and the
verdict written next to the measurements (``nightly.md``, ``nightly.json``, the HTML report with
its trend plots). A host that is down fails its runs: their cases are history rows with status
``failed`` (``could_not_measure``). A night that measured nothing (the playbook could not start:
the doctor refused a run, no results folder) still gets its folder with a ``could_not_measure``
verdict naming why, so the morning's answer is never a missing file; it is not a history row
(it has no case), but ``orch history`` lists it from that folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.commands.run import PlaybookOutcome
from orchestrator.config.errors import validate
from orchestrator.config.nightly_terms import EXIT_CODES, Decision, Verdict
from orchestrator.config.playbook import NightlySpec, Playbook, load_playbook
from orchestrator.config.yamlload import child, load_yaml
from orchestrator.errors import ConfigError, OrchError
from orchestrator.nightly.history import History, NightSummary
from orchestrator.nightly.night import judge_and_record
from orchestrator.nightly.record import STAMP
from orchestrator.nightly.replay import ReplayedNight, replay_history
from orchestrator.nightly.report import (
    JSON_FILE,
    NightlyVerdict,
    could_not_measure,
    render_markdown,
    write_nightly,
)
from orchestrator.nightly.verdict import Policy, Thresholds, has_figure
from orchestrator.results.store import new_results_dir

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"  # GitHub Actions (and Gitea/Forgejo) job summaries
HISTORY_DIR = "history"


@dataclass(frozen=True)
class NightOutcome:
    """A judged night: the verdict, where it was written, and the report when one was made."""

    verdict: NightlyVerdict
    folder: Path
    files: tuple[Path, ...]
    report: Path | None = None
    report_problem: str | None = None  # why the HTML report could not be written

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def policy_of(spec: NightlySpec) -> Policy:
    """The playbook's ``nightly:`` settings as the verdict's policy."""
    return Policy(
        baseline_nights=spec.baseline_nights,
        min_baseline_nights=spec.min_baseline_nights,
        min_repeats=spec.min_repeats,
        alpha=spec.alpha,
        confirm_alpha=spec.confirm_alpha,
        run_alpha=spec.run_alpha,
        run_nights=spec.run_nights,
        drift_nights=spec.drift_nights,
        drift_alpha=spec.drift_alpha,
        thresholds=Thresholds(dict(spec.thresholds)),
    )


def repeat_notes(playbook: Playbook) -> list[str]:
    """Runs whose repeats cannot give a verdict, or give a weak one."""
    spec = playbook.nightly
    notes = []
    for run in playbook.runs:
        repeat = run.workload.repeat
        if repeat < spec.min_repeats:
            notes.append(
                f"run {run.name}: workload.repeat is {repeat}; a night needs at least "
                f"{spec.min_repeats} to be judged (its figures will be insufficient_data); use 5"
            )
        elif repeat < 5:
            notes.append(
                f"run {run.name}: workload.repeat is {repeat}; with fewer than 5 repeats a "
                "night's own scatter weighs more in its verdict (see the README's nightly section)"
            )
    return notes


def judge(
    outcome: PlaybookOutcome, *, results_root: Path, playbook: Playbook, report: bool = True
) -> NightOutcome:
    """Judge a finished playbook run, append it to the history, write its verdict files (a
    history that cannot be appended to is a note in them, see ``judge_and_record``)."""
    folder = outcome.results_dir
    try:
        verdict = judge_and_record(
            folder,
            results_root=results_root,
            policy=policy_of(playbook.nightly),
            playbook=playbook.name,
        )
    except OrchError as exc:  # nothing readable was measured: no row to append
        verdict = could_not_measure(
            playbook.name, folder.name, _reason(exc), results_dir=str(folder)
        )
    return write_outcome(verdict, folder, report=report and bool(outcome.results))


def measured_nothing(
    playbook: Playbook, results_root: Path, exc: OrchError, *, now: datetime | None = None
) -> NightOutcome:
    """The night of a playbook that could not run at all: a new folder holding its verdict."""
    folder = new_results_dir(results_root, playbook.name, now=now)
    verdict = could_not_measure(playbook.name, folder.name, _reason(exc), results_dir=str(folder))
    return write_outcome(verdict, folder, report=False)


def could_not_judge(playbook: Playbook, folder: Path, reason: str) -> NightOutcome:
    """The verdict of a night that ran but could not be judged (orch itself failed): the
    folder it ran into still answers the morning's question, could_not_measure, saying why."""
    verdict = could_not_measure(playbook.name, folder.name, reason, results_dir=str(folder))
    return write_outcome(verdict, folder, report=False)


def _reason(exc: OrchError) -> str:
    return f"{exc} ({exc.hint})" if exc.hint else str(exc)


def write_outcome(verdict: NightlyVerdict, folder: Path, *, report: bool) -> NightOutcome:
    """nightly.md and nightly.json, then the report (a report that fails, however it fails, is
    said, not fatal: the verdict is what the night is for)."""
    files = write_nightly(verdict, folder)
    if not report:
        return NightOutcome(verdict, folder, files)
    from orchestrator.commands.report import report as write_report

    try:
        done = write_report([folder])
    except OrchError as exc:
        return NightOutcome(verdict, folder, files, report_problem=str(exc))
    except Exception as exc:  # a plotting library's own error, say: still not the verdict's
        problem = f"{type(exc).__name__}: {exc}"
        return NightOutcome(verdict, folder, files, report_problem=problem)
    return NightOutcome(verdict, folder, files, report=done.written.html)


def step_summary(verdict: NightlyVerdict, environ: dict[str, str] | None = None) -> Path | None:
    """Append nightly.md to the CI job summary when the job runs under one."""
    target = (environ if environ is not None else dict(os.environ)).get(STEP_SUMMARY_ENV)
    if not target:
        return None
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(render_markdown(verdict).rstrip("\n") + "\n\n")
    except OSError as exc:
        raise OrchError(
            f"cannot append the verdict to {STEP_SUMMARY_ENV}={target}: {exc.strerror or exc}"
        ) from exc
    return path


# -- orch history ---------------------------------------------------------------------------


def playbook_name(text: str) -> str:
    """A playbook file's ``name``, or ``text`` itself when it names no file (a playbook's name
    as its results folders carry it)."""
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise ConfigError(
                "file not found",
                file=text,
                hint="give the playbook file orch nightly runs, or its name",
            )
        return load_playbook(path).name
    return text


@dataclass(frozen=True)
class NightListing:
    """A night as `orch history` lists it: from the history, or (measured nothing) from its
    folder's nightly.json."""

    night: str
    night_time: datetime | None
    cases: int
    verdict: Verdict | None  # None: recorded, never judged
    counts: tuple[tuple[Verdict, int], ...]
    decision: Decision | None
    note: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "night": self.night,
            "night_time": self.night_time.isoformat() if self.night_time else None,
            "cases": self.cases,
            "verdict": self.verdict,
            "exit_code": EXIT_CODES[self.verdict] if self.verdict else None,
            "counts": dict(self.counts),
            "decision": self.decision,
            "note": self.note,
        }


def list_nights(results_root: Path, playbook: str) -> tuple[list[NightListing], list[str]]:
    """Every night of ``playbook`` oldest first, and the history lines that were skipped."""
    history = History(results_root, playbook)
    if not history.path.exists() and not any(_unmeasured(results_root, playbook, set())):
        raise OrchError(
            f"no nightly history of playbook {playbook!r} under {results_root}",
            hint=f"`orch nightly PLAYBOOK --results {results_root}` records one; expected "
            f"{history.path}",
        )
    found = [_listing(s) for s in history.nights()]
    found += _unmeasured(results_root, playbook, {n.night for n in found})
    found.sort(key=lambda n: (n.night_time or datetime.min.replace(tzinfo=timezone.utc), n.night))
    return found, list(dict.fromkeys(history.problems))


def _listing(s: NightSummary) -> NightListing:
    return NightListing(s.night, s.night_time, s.cases, s.verdict, s.counts, s.decision)


def _unmeasured(results_root: Path, playbook: str, known: set[str]) -> Iterable[NightListing]:
    """Folders of this playbook with a could_not_measure nightly.json and no history rows."""
    for path in sorted(results_root.glob(f"*/{JSON_FILE}")):
        night = path.parent.name
        if night in known or not STAMP.match(night):
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("playbook") != playbook or doc.get("cases"):
            continue
        notes = doc.get("notes") or []
        yield NightListing(
            night,
            _stamp_time(night),
            0,
            "could_not_measure",
            (),
            None,
            note=str(notes[0]) if notes else None,
        )


def _stamp_time(night: str) -> datetime | None:
    match = STAMP.match(night)
    if not match:
        return None
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)


# -- orch baseline --------------------------------------------------------------------------


def locate_night(night: str, results_root: Path) -> tuple[str, Path, History]:
    """The night (a results folder or its name) and the history that records it."""
    path = Path(night)
    name = path.name
    roots = [results_root]
    if path.is_dir():
        roots.insert(0, path.resolve().parent)
    for root in dict.fromkeys(roots):
        for file in sorted((root / HISTORY_DIR).glob("*.jsonl")):
            if file.name.endswith(".decisions.jsonl"):
                continue
            history = History(root, file.stem)
            if history.path == file and name in history.nights_recorded():
                return name, root, history
    where = ", ".join(str(r / HISTORY_DIR) for r in dict.fromkeys(roots))
    raise OrchError(
        f"night {name} is in no nightly history under {where}",
        hint="`orch history PLAYBOOK` lists the recorded nights; a night that measured nothing "
        "has no figure to accept",
    )


def unmeasured_cases(history: History, night: str) -> tuple[list[str], list[str]]:
    """(labels of the night's cases with at least one measured figure, labels of the others)."""
    figures: dict[str, bool] = {}
    labels: dict[str, str] = {}
    for row in history.rows(nights={night}):
        labels.setdefault(row.case_id, row.case.label)
        figures[row.case_id] = figures.get(row.case_id, False) or has_figure(row)
    measured = [labels[c] for c, some in figures.items() if some]
    return measured, [labels[c] for c, some in figures.items() if not some]


def _refuse_empty_accept(name: str, history: History) -> None:
    """The night's unmeasured cases; OrchError when it measured no case at all: accepting it
    would start every baseline again from a night with no figure in it."""
    measured, unmeasured = unmeasured_cases(history, name)
    if measured:
        return
    notes = [r.note for r in history.rows(nights={name}) if r.note]
    why = f" ({notes[0]})" if notes else ""
    raise OrchError(
        f"night {name} of {history.playbook} has no measured figure: none of its "
        f"{len(unmeasured)} case(s) could be measured{why}; nothing was recorded",
        hint="accepting it would start every baseline again from a night with nothing in it. "
        "A night that measured nothing already counts in no baseline; accept the first night "
        f"that measured the change instead (`orch history {history.playbook}` lists them)",
    )


def decide(
    night: str, decision: Decision, results_root: Path, *, note: str | None = None
) -> tuple[str, History]:
    """Record a person's decision about a recorded night; (its playbook, its history). An accept
    of a night that measured nothing is refused (``_refuse_empty_accept``)."""
    name, _root, history = locate_night(night, results_root)
    if decision == "accept":
        _refuse_empty_accept(name, history)
    history.decide(name, decision, note=note)
    return history.playbook, history


# -- `orch history replay` ------------------------------------------------------------------


def policy_file(path: Path) -> Policy:
    """The policy a YAML file states: a playbook's ``nightly:`` section, or such a section on
    its own (``alpha: 0.01``, ``thresholds: {...}`` ...); its mistakes point into the file."""
    doc = load_yaml(path)
    data = doc.data
    if "runs" in data:  # a whole playbook
        return policy_of(load_playbook(path).nightly)
    found = child(doc.root, "nightly") if "nightly" in data else None
    node = found[1] if found else doc.root
    section = data["nightly"] if found else data
    return policy_of(
        validate(NightlySpec, section, doc, node, prefix=("nightly",) if found else ())
    )


def replay(history_file: Path, policy: Policy) -> tuple[list[ReplayedNight], list[str]]:
    """Every night of a history file judged again under ``policy`` (``nightly.replay``), and
    the lines that were skipped."""
    if not history_file.is_file():
        raise OrchError(
            f"no history file {history_file}",
            hint="a playbook's history is results/history/<playbook>.jsonl, as `orch nightly` "
            "writes it",
        )
    history = History.of_file(history_file)
    rows = history.rows()
    if not rows:
        raise OrchError(
            f"{history_file} holds no history row",
            hint="expected one JSON object per line (night x case x metric), as `orch nightly` "
            "writes them",
        )
    nights = replay_history(rows, history.decisions(), policy)
    return nights, list(dict.fromkeys(history.problems))
