"""One verdict policy for one measurement: what makes its figures not to be trusted.

Every command that measures (``orch run``'s points and repeats, ``orch nightly``'s runs,
``orch loadgen``) hands what it saw to ``assess``, which returns the verdict and the typed
findings behind it. The findings are ``RunWarning`` values (a kind, a message, details): a
result's ``warnings`` hold them, so nothing downstream recognises a problem by its wording.

A measurement is failed when any of these is found:

- ``requests_failed``: more of its measured requests failed than ``max_failed_fraction``
  allows (default 0: any), or none completed (then nothing was measured, whatever the setting);
- ``client_saturated``: the load generator, not the server, set the pace;
- ``window_truncated``: records of the measured window were lost, so its figures miss requests;
- ``token_count_mismatch``: a server's token counts contradicted what the client received;
- ``engine_died``: the engine stopped while it was measured.

Failed requests never enter the figures (``metrics/summary.py``); under a non-zero
``max_failed_fraction`` a measurement with a few is kept, and its ``requests_failed`` warning
says how many failed, of which kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue

# The kinds that fail a measurement (``assess``), then those that only inform.
FailingKind = Literal[
    "requests_failed",
    "client_saturated",
    "window_truncated",
    "token_count_mismatch",
    "engine_died",
]
WarningKind = Literal[
    FailingKind,
    "log_window_unmarked",  # the load generator never said when its window began
    "acceptance_log_missing",  # no spec-decode line of the engine's log fell in the window
    "short_log_window",  # the window is shorter than the engine's stats interval
    "cache_not_reset",  # the prefix cache was not emptied before the point
    "connection_dropped",  # measured again after the connection to the host dropped
    "measured_again",  # measured again after an attempt failed only for a saturated client
    "stop_failed",  # the server may still run
    "cap_bound",  # an open loop's concurrency cap, i.e. the server's pace, held requests back
    "telemetry_missing",  # the GPUs could not be sampled (no NVML, no nvidia-smi)
    "telemetry_unsound",  # the energy figure stands, flagged: gaps, a disagreement, no counter
    "roofline_implausible",  # decode read faster than the GPUs can: no % of roofline given
    "note",  # a warning of a result written before warnings had kinds
]
FAILING_KINDS: frozenset[str] = frozenset(get_args(FailingKind))
DEFAULT_MAX_FAILED_FRACTION = 0.0
# The relative error against the server's truth within which a timing figure of a measurement
# orch reports ok must lie (issue 10: measured points against the simulator's ground truth).
# The benchmarks judge orch and its peers by it; a busy machine's tests widen it by the
# client's measured lag (tests/fixtures/truth.py: timing_tolerance).
ACCURACY_BAR = 0.05
COMMON_ERRORS = 3  # the most common request errors a requests_failed message quotes


class RunWarning(BaseModel):
    """One thing a measurement's result warns of: ``kind`` is the interface (what a program
    tests), ``message`` what a person reads, ``details`` the figures behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: WarningKind
    message: str
    details: dict[str, JsonValue] = Field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Evidence:
    """What a measurement saw that bears on its verdict, whoever measured it.

    ``failures``: the measured requests that failed, by failure kind (``RequestFailure``);
    ``errors``: their error texts by count, for the message; ``saturation``: the client's
    ``client_saturated`` warnings; ``truncated``: why the window's records are incomplete;
    ``engine_died``: how the engine stopped, when it did.
    """

    requests: int = 0
    completed: int = 0
    failed: int = 0
    failures: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    token_count_mismatches: int = 0
    saturation: Sequence[RunWarning] = ()
    truncated: Sequence[str] = ()
    engine_died: str | None = None

    def past(self, limit: float) -> bool:
        """More failed requests than ``limit`` (a fraction of those measured) allows, or none
        completed: nothing was measured then, whatever the limit."""
        if self.completed == 0:
            return True
        return self.failed / self.requests > limit if self.requests else False


@dataclass(frozen=True)
class Assessment:
    """The verdict on one measurement: ``findings`` are every problem seen (what the result
    warns of), ``reasons`` the ones that failed it (empty: its figures stand)."""

    findings: tuple[RunWarning, ...]
    reasons: tuple[RunWarning, ...]
    none_completed: bool = False

    @property
    def verdict(self) -> Literal["ok", "failed"]:
        return "failed" if self.reasons else "ok"

    @property
    def failed(self) -> bool:
        return bool(self.reasons)

    def message(self) -> str:
        """The reasons in one line, as a result's ``error.message`` carries them."""
        return " | ".join(r.message for r in self.reasons)


def assess(
    evidence: Evidence, *, max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION
) -> Assessment:
    """The one policy: which findings ``evidence`` holds, and which of them fail it."""
    findings: list[RunWarning] = []
    reasons: list[RunWarning] = []
    none_completed = evidence.completed == 0
    requests = _requests_failed(evidence, max_failed_fraction)
    if requests is not None:
        findings.append(requests)
        if evidence.past(max_failed_fraction):
            reasons.append(requests)
    failing: list[RunWarning] = [*evidence.saturation]
    if evidence.token_count_mismatches:
        n = evidence.token_count_mismatches
        failing.append(
            RunWarning(
                kind="token_count_mismatch",
                message=f"{n} request(s) had token counts that contradict what the client "
                "received (usage against chunks and max_tokens): the server's counts cannot be "
                "trusted (requests.jsonl marks each as token_count_mismatch)",
                details={"requests": n},
            )
        )
    failing += [
        RunWarning(kind="window_truncated", message=why, details={}) for why in evidence.truncated
    ]
    if evidence.engine_died is not None:
        failing.append(RunWarning(kind="engine_died", message=evidence.engine_died))
    findings += failing
    reasons += failing
    return Assessment(tuple(findings), tuple(reasons), none_completed=none_completed)


def _requests_failed(evidence: Evidence, limit: float) -> RunWarning | None:
    """The ``requests_failed`` finding: any failed request, or none completed."""
    failed, requests = evidence.failed, evidence.requests
    if failed == 0 and evidence.completed > 0:
        return None
    tail = ""
    common = sorted(evidence.errors.items(), key=lambda kv: (-kv[1], kv[0]))[:COMMON_ERRORS]
    quoted = "; ".join(f"{n} x {text}" for text, n in common)
    if evidence.completed == 0:
        head = f"every measured request failed ({failed} of {requests})"
        if requests == 0:
            head = "no measured request was sent (0 of 0)"
    else:
        share = failed / requests if requests else 1.0
        head = f"{failed} of {requests} measured requests failed ({share:.1%}"
        if evidence.past(limit):
            head += f", more than max_failed_fraction {limit:g} allows)"
        else:
            head += f", within max_failed_fraction {limit:g})"
            tail = f"; the figures cover only the {evidence.completed} that completed"
    return RunWarning(
        kind="requests_failed",
        message=head + (f": {quoted}" if quoted else "") + tail,
        details={
            "requests": requests,
            "completed": evidence.completed,
            "failed": failed,
            "by_kind": dict(sorted(evidence.failures.items())),
            "max_failed_fraction": limit,
        },
    )
