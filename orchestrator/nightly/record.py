"""A night's history rows, from the results folder a playbook run wrote.

``record_night(results_dir)`` reads every measurement (``load_results``: summary.json files
only, never the per-request files), groups them by case (``case_of``: a run's repeats, and the
same case measured on several hosts, pool together), and makes one row per case x metric (the
metric catalogue's nightly ones, computed by it):

- ``output_tok_s``, ``decode_tok_s_median`` (per-request decode tok/s, median), ``ttft_ms_median``,
  ``ttft_ms_p99``, ``tpot_ms_median``, ``tpot_ms_p99``, ``failure_rate`` (failed requests / sent);
- with speculative decoding, ``acceptance_length`` and ``acceptance_pos_<k>`` (the acceptance
  rate at draft position k, for each position a measurement reported).

A measurement that failed (its host went down, its engine died: ``RunResult.error``) gives no
figure; a case none of whose measurements succeeded is ``failed`` (the night could not measure
it), one with fewer than two values of a figure is ``insufficient`` for it. A collapse
(``RunResult.collapse``) marks every row of its case, with the collapse's message.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.config.nightly_terms import METRICS, POSITION_PREFIX, Status, metric, position
from orchestrator.errors import OrchError
from orchestrator.metrics import catalogue
from orchestrator.nightly.cases import CaseKey, NightAttributes, attributes_of, case_of
from orchestrator.nightly.cases import read_manifest as read_run_manifest
from orchestrator.nightly.history import HistoryRow
from orchestrator.results.manifest import Manifest
from orchestrator.results.model import RunResult
from orchestrator.results.report import load_results

STAMP = re.compile(r"^(\d{8}T\d{6}Z)-(.+)$")  # store.new_results_dir's <UTC stamp>-<playbook>
MIN_VALUES = 2  # below two values a figure has no spread and no t-test: "insufficient"


def mean_and_spread(values: tuple[float, ...]) -> tuple[float | None, float | None]:
    """The mean and sample standard deviation (n - 1) of a night's values, None where there
    are too few (as ``results.stats.interval`` has them, without its interval's cost)."""
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    return mean, statistics.stdev(values, mean) if len(values) >= 2 else None


def night_time(results_dir: Path, results: list[RunResult]) -> datetime:
    """When the night ran: its folder's UTC stamp, else its first measurement's start."""
    match = STAMP.match(results_dir.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    return min(r.times.started_at for r in results)


def figure(result: RunResult, name: str) -> float | None:
    """One measurement's value of a nightly metric (None: not measured, or not finite): the
    catalogue's, or the acceptance rate at a draft position."""
    k = position(name)
    if k is None:
        return catalogue.get(name).value(result)
    acc = result.acceptance
    per = acc.per_position if acc else None
    value = per[k - 1] if per and len(per) >= k else None
    return float(value) if value is not None and math.isfinite(value) else None


def metric_names(results: list[RunResult], speculative: bool) -> list[str]:
    """The metrics of a case: acceptance ones with speculation only, a position per one seen."""
    names = [m.name for m in METRICS if speculative or m.name != "acceptance_length"]
    if speculative:
        seen = [len(r.acceptance.per_position or []) for r in results if r.acceptance]
        names += [f"{POSITION_PREFIX}{k}" for k in range(1, max(seen, default=0) + 1)]
    return names


def _case_rows(
    night: str,
    when: datetime,
    playbook: str,
    case: CaseKey,
    results: list[RunResult],
    attributes: NightAttributes,
) -> list[HistoryRow]:
    good = [r for r in results if r.error is None]
    collapse = next((r.collapse for r in good if r.collapse is not None), None)
    errors = [r.error.message for r in results if r.error is not None]
    note = collapse.message if collapse else (errors[0] if errors else None)
    rows = []
    for name in metric_names(good, speculative=case.method != "none"):
        values = tuple(v for v in (figure(r, name) for r in good) if v is not None)
        status: Status = "failed" if not good else "measured"
        if good and len(values) < MIN_VALUES:
            status = "insufficient"
        mean, spread = mean_and_spread(values)
        rows.append(
            HistoryRow(
                night=night,
                night_time=when,
                playbook=playbook,
                case=case,
                metric=name,
                direction=metric(name).direction,
                value=mean,
                spread=spread,
                n=len(values),
                values=values,
                failed_repeats=len(results) - len(good),
                status=status,
                collapse=collapse is not None,
                note=note,
                attributes=attributes,
            )
        )
    return rows


def _playbook(results_dir: Path, manifests: Mapping[str, Manifest | None]) -> str:
    for manifest in manifests.values():
        name = manifest.playbook.name if manifest and manifest.playbook else None
        if name:
            return name
    match = STAMP.match(results_dir.name)
    return match.group(2) if match else results_dir.name


def record_night(results_dir: Path | str, *, playbook: str | None = None) -> list[HistoryRow]:
    """The rows of the night a results folder holds (see the module docstring). The night is
    the folder's name; ``playbook`` defaults to the name its manifests record."""
    results_dir = Path(results_dir)
    results = load_results(results_dir)
    if not results:
        raise OrchError(
            f"{results_dir} holds no run results (summary.json files)",
            hint="give the folder `orch run` wrote for the night, like results/<stamp>-nightly",
        )
    manifests: dict[str, Manifest | None] = {}
    groups: dict[CaseKey, list[tuple[RunResult, NightAttributes]]] = {}
    for result in results:
        folder = Path(result.run.folder).parts[0]
        if folder not in manifests:
            manifests[folder] = read_run_manifest(results_dir / folder)
        attributes = attributes_of(result, manifests[folder])
        groups.setdefault(case_of(result), []).append((result, attributes))
    name = playbook or _playbook(results_dir, manifests)
    when = night_time(results_dir, results)
    rows = []
    for case, members in groups.items():
        merged = NightAttributes.merge([a for _, a in members])
        measured = [r for r, _ in members]
        rows += _case_rows(results_dir.name, when, name, case, measured, merged)
    return rows
