"""The client benchmark's targets, judged only on figures a user would get.

orch marks a measurement failed when its client set the pace (``client_saturated``); a user
then gets no figure from it, so no target takes one from it. A figure also counts toward the
capacity target only when its error against the simulator's truth is within orch's accuracy
bar (``ACCURACY_BAR``, ``orchestrator/results/validity.py``), orch's and a peer's alike: a
client that streams many tokens a second but times them wrong has not measured that load.
The TPOT targets are judged over every rung orch reports ok, whatever its error (an ok rung
off by more than the target is a miss); a rung orch marked failed is counted and named, not
judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.client_peers import ToolRun
from benchmarks.client_sim import Case, Truth
from benchmarks.common import Target
from orchestrator.results.validity import ACCURACY_BAR

BAR_PCT = ACCURACY_BAR * 100.0


@dataclass(frozen=True)
class Measured:
    case: Case
    run: ToolRun
    truth: Truth

    @property
    def ok(self) -> bool:
        """The client produced figures and did not mark its measurement failed."""
        return self.run.error is None and not self.run.flagged

    @property
    def tok_s_err(self) -> float | None:
        return error_pct(self.run.tok_s, self.truth.tok_s)

    @property
    def tpot_err(self) -> float | None:
        return error_pct(self.run.tpot_ms, self.truth.tpot_ms)

    @property
    def in_bar(self) -> bool:
        """Ok, and both figures a capacity is read from (tok/s, TPOT) within the bar."""
        errors = (self.tok_s_err, self.tpot_err)
        return self.ok and all(e is not None and abs(e) <= BAR_PCT for e in errors)


def error_pct(value: float | None, truth: float | None) -> float | None:
    if value is None or not truth:
        return None
    return (value - truth) / truth * 100.0


def best(measured: list[Measured]) -> Measured | None:
    """The measurement with the most tok/s, or None."""
    return max(measured, key=lambda m: m.run.tok_s or 0.0, default=None)


@dataclass(frozen=True)
class Capacity:
    orch: Measured  # orch's best rung of the ladder that it reports ok, within the bar
    peer: Measured  # the best peer's best rung within the bar

    @property
    def ratio(self) -> float:
        return (self.orch.run.tok_s or 0.0) / max(self.peer.run.tok_s or 0.0, 1e-9)


def capacity(measured: list[Measured]) -> Capacity | None:
    """orch's best ok, in-bar rung of the offered-rate ladder against the peers' best in-bar
    one; None when either side has none."""
    rungs = [m for m in measured if m.case.ladder and m.in_bar]
    orch = best([m for m in rungs if m.run.tool == "orch"])
    peer = best([m for m in rungs if m.run.tool != "orch"])
    return Capacity(orch, peer) if orch and peer else None


def _rung(m: Measured) -> str:
    return f"{m.run.tool} {m.run.tok_s or 0:,.0f} tok/s at {m.case.offered_tok_s:,.0f} offered"


def tpot_target(
    orch: list[Measured], name: str, limit: float, select: Callable[[Case], bool]
) -> tuple[Target | None, str | None]:
    """The largest |TPOT error| over the rungs in ``select`` that orch reports ok, and a line
    naming the rungs it marked failed (None when there were none)."""
    rungs = [m for m in orch if select(m.case)]
    ok = [m for m in rungs if m.ok]
    failed = [m.case.label for m in rungs if not m.ok]
    line = None
    if failed:
        line = (
            f"{name}: orch marked {len(failed)} of {len(rungs)} rungs failed ("
            + "; ".join(failed)
            + "): a user gets only the failure there, so they are not judged"
        )
    errors = [abs(e) for e in (m.tpot_err for m in ok) if e is not None]
    if not errors:
        why = "no rung orch reports ok" if rungs else "not measured"
        return None, f"Not evaluated: {name} ({why})" + (f"; {line}" if line else "")
    label = f"{name} (largest, over the {len(errors)} rungs orch reports ok)"
    return Target(label, max(errors), limit, "%"), line


def ttft_gap(measured: list[Measured]) -> float | None:
    """orch's |TTFT error| minus AIPerf's at 256 streams, the worst over the rungs where orch
    reports ok and AIPerf is within the bar (None: no such rung)."""
    gaps = []
    for m in measured:
        if m.run.tool != "orch" or m.case.concurrency != 256 or not m.ok:
            continue
        peer = [p for p in measured if p.case == m.case and p.run.tool == "AIPerf" and p.in_bar]
        if peer:
            gaps.append(_ttft_abs(m) - _ttft_abs(peer[0]))
    return max(gaps) if gaps else None


def _ttft_abs(m: Measured) -> float:
    return abs((m.run.ttft_ms or 0.0) - (m.truth.ttft_ms or 0.0))


def targets(measured: list[Measured]) -> tuple[list[Target], list[str]]:
    """The issue's targets (module docstring), and lines on what could not be judged and why."""
    orch = [m for m in measured if m.run.tool == "orch"]
    out: list[Target] = []
    lines: list[str] = []
    for name, limit, select in (
        ("orch TPOT error up to 256 streams", 1.0, lambda c: c.concurrency <= 256),
        ("orch TPOT error at 1024 streams", 2.0, lambda c: c.concurrency == 1024),
    ):
        target, line = tpot_target(orch, name, limit, select)
        out += [target] if target else []
        lines += [line] if line else []
    peers = {m.run.tool for m in measured if m.run.tool != "orch" and m.case.ladder}
    found = capacity(measured)
    if found is not None:
        out.append(
            Target(
                "orch capacity / best peer's (best rung on the ladder: orch's reported ok, "
                f"each within the {BAR_PCT:g}% bar; one core each)",
                found.ratio,
                2.0,
                "x",
                at_most=False,
            )
        )
        lines.append(f"Capacity from {_rung(found.orch)} against {_rung(found.peer)}")
    elif not peers:
        lines.append("Not evaluated: capacity against the peers (no peer measured)")
    else:
        lines.append(
            "Not evaluated: capacity against the peers (no ladder rung within the "
            f"{BAR_PCT:g}% bar that orch reports ok, or none within it for any peer)"
        )
    gap = ttft_gap(measured)
    if gap is not None:
        out.append(Target("orch TTFT |error| at 256 streams minus AIPerf's", gap, 0.0, "ms"))
    else:
        lines.append(
            "Not evaluated: TTFT at 256 streams against AIPerf (no rung where orch reports ok "
            f"and AIPerf's figures are within the {BAR_PCT:g}% bar)"
        )
    return out, lines
