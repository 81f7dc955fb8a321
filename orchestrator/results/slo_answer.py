"""What each run's SLO search found, read back from its ``slo-search.json``, for the places a
person looks: the console at the end of `orch run`, report.md and report.html, the Pareto plots.

The runner writes ``slo-search.json`` into the run's folder once every measurement the search
names is written (``slo-search-<n>.json`` for a resumed run's n-th server session: the newest
is the answer). A run whose measurements include SLO-search points but whose folder holds no
such file stopped before its search ended: it has no answer, and says so, rather than a guess
from the points it did measure. A file that cannot be read is named with what is wrong.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.results.model import RunResult

SEARCH_FILE = re.compile(r"^slo-search(?:-(\d+))?\.json$")


@dataclass(frozen=True)
class SloAnswer:
    """One run's search: the answer (``best``: None when no load in the range met every
    target), the runner's one-line explanation, and the targets; ``problem`` instead when there
    is no answer to show (the search did not end, or its file is unreadable)."""

    results_dir: str  # the results folder, as given (the frame's ``results_dir``)
    run: str
    host: str
    key: str
    kind: str  # concurrency or request_rate
    best: float | None
    explain: str
    targets: tuple[str, ...]
    problem: str | None = None

    @property
    def label(self) -> str:
        """``c=11`` / ``rate=2.5``, as tables show a load point; ``none`` without an answer."""
        if self.best is None:
            return "none"
        return f"c={self.best:g}" if self.kind == "concurrency" else f"rate={self.best:g}"

    @property
    def detail(self) -> str:
        """What the search found, in one sentence (the runner's), or why there is no answer."""
        return self.problem if self.problem is not None else self.explain


def _newest(folder: Path) -> Path | None:
    found = []
    for path in folder.glob("slo-search*.json") if folder.is_dir() else []:
        match = SEARCH_FILE.match(path.name)
        if match:
            found.append((int(match.group(1) or 1), path))
    return max(found)[1] if found else None


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"'best' is {value!r}, not a number or null")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"'best' is {value!r}, not a load")
    return float(value)


def parse_search(obj: object, result: RunResult, results_dir: str = "") -> SloAnswer:
    """An answer from a ``slo-search.json`` object; ValueError naming what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    kind, explain, targets = obj.get("kind"), obj.get("explain"), obj.get("targets", [])
    if kind not in ("concurrency", "request_rate"):
        raise ValueError(f"'kind' is {kind!r}, not concurrency or request_rate")
    if not isinstance(explain, str):
        raise ValueError("no 'explain' text")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ValueError("'targets' is not a list of texts")
    best = None if obj.get("best") is None else _number(obj.get("best"))
    run = result.run
    return SloAnswer(results_dir, run.name, run.host, run.key, kind, best, explain, tuple(targets))


def _unanswered(results_dir: str, result: RunResult, why: str) -> SloAnswer:
    run = result.run
    return SloAnswer(results_dir, run.name, run.host, run.key, "concurrency", None, "", (), why)


def _read(path: Path, result: RunResult, results_dir: str) -> SloAnswer:
    try:
        return parse_search(json.loads(path.read_text(encoding="utf-8")), result, results_dir)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        where = f"{path.name} in {run_dir(result)}"
        return _unanswered(results_dir, result, f"{where} cannot be read ({exc}): no answer")


def run_dir(result: RunResult) -> str:
    """The run's own folder under the results folder (a sweep point's first part)."""
    return Path(result.run.folder).parts[0]


def slo_answers(results_dir: Path | str, results: Sequence[RunResult]) -> list[SloAnswer]:
    """Each run's SLO search answer, in run order: the runs whose folder holds a search file,
    and those with SLO-search points but no file (their search did not end)."""
    where = str(results_dir)
    answers = []
    firsts: dict[str, RunResult] = {}
    for result in results:
        firsts.setdefault(result.run.key, result)
    for key, first in firsts.items():
        path = _newest(Path(results_dir) / run_dir(first))
        if path is not None:
            answers.append(_read(path, first, where))
            continue
        mine = [r for r in results if r.run.key == key]
        if any(r.point is not None and r.point.origin == "slo_search" for r in mine):
            why = (
                "its SLO search stopped before it ended (no slo-search.json): no answer; "
                "orch run --resume on the results folder finishes it"
            )
            answers.append(_unanswered(where, first, why))
    return answers


def slo_targets(results: Sequence[RunResult]) -> tuple[str, ...]:
    """Every SLO target the measurements were checked against, in the order first met."""
    found = (c.target for r in results if r.slo is not None for c in r.slo.checks)
    return tuple(dict.fromkeys(found))
