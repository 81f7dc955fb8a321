"""The nightly verdict's detection figures on seeded synthetic histories (issue 24).

Each scenario is one case's throughput (or TTFT p99) over 30 nights. Nights move together:
every repeat of a night shares one night factor (normal, or Student-t with 3 degrees of freedom
for heavy tails), and a night may run in one of several operating modes (GPU clock states a few
percent apart, drawn at random per night, named in the night's attributes as the GPUs' SM
clock); each repeat adds 1% of its own noise. Changes start at night 20: a step, a one-night
blip, or a drift from night 0. Three rules judge every history night by night:

- **orch**: ``orchestrator.nightly.verdict.replay`` with the default policy, as ``orch nightly``;
- **simple**: 5% worse than the median of the 7 nights before, two nights in a row;
- **split**: the best split of the last 30 night means (Welch t), p < 0.001 and a shift of
  more than 5% the worse way, in the manner of Hunter.

Per scenario and rule: the share of histories with a false regression (before any change, or
ever in a quiet one), with a suspicious night (orch), caught (a regression, or a drift) by nights
21, 22, 23, 24 and 29, and, of those called, the share that went back to exit 0 while the change was still
there. The issue's targets are checked on orch's rows.

    python -m benchmarks.nightly                 # 200 seeds, 3 and 5 repeats
    python -m benchmarks.nightly --smoke         # 10 seeds, 5 repeats: that it runs
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy
from scipy import stats

from benchmarks.common import Bench, Target, arguments
from orchestrator.config.nightly_terms import EXIT_CODES, metric
from orchestrator.nightly.cases import NightAttributes
from orchestrator.nightly.verdict import Policy, replay
from tests.fixtures.nightly_histories import row

NIGHTS = 30
CHANGE_AT = 20
THRESHOLD = 0.05  # the practical threshold of throughput (the default policy's)
BUSY_SM_MHZ = 1740.0


@dataclass(frozen=True)
class Scenario:
    name: str
    noise: float = 0.03  # night-to-night, relative standard deviation
    tails: str = "normal"  # or "t3"
    modes: tuple[float, ...] = (0.0,)  # relative offsets of the operating modes
    step: float = 0.0  # relative change from CHANGE_AT on (of tok/s: -0.1; of a latency: +0.1)
    blip: float = 0.0  # relative change on CHANGE_AT only
    drift: float = 0.0  # relative change per night from night 0
    metric: str = "output_tok_s"
    repeat_noise: float = 0.01

    @property
    def changed(self) -> bool:
        return bool(self.step or self.drift)

    def true_factor(self, night: int) -> float:
        f = 1.0 + self.drift * night
        if night >= CHANGE_AT:
            f *= 1.0 + self.step
        if night == CHANGE_AT:
            f *= 1.0 + self.blip
        return f


SCENARIOS = (
    Scenario("quiet, 1% night noise", noise=0.01),
    Scenario("quiet, 3% night noise"),
    Scenario("quiet, 5% night noise", noise=0.05),
    Scenario("quiet, 3% Student-t(3) tails", tails="t3"),
    Scenario("one-night -20% blip", blip=-0.20),
    Scenario("two modes 4% apart", modes=(0.0, -0.04)),
    Scenario("two modes 7% apart", modes=(0.0, -0.07)),
    Scenario("three modes 4%, 7% apart", modes=(0.0, -0.04, -0.07)),
    Scenario("-5% step, 1% night noise", noise=0.01, step=-0.05),
    Scenario("-5% step", step=-0.05),
    Scenario("-10% step", step=-0.10),
    Scenario("-10% step, 5% night noise", noise=0.05, step=-0.10),
    Scenario("-20% step", step=-0.20),
    Scenario("drift -0.3%/night", drift=-0.003),
    Scenario("TTFT p99 +10% step", metric="ttft_ms_p99", step=0.10),
    Scenario("TTFT p99 +15% step", metric="ttft_ms_p99", step=0.15),
)
LEVELS = {"output_tok_s": 1000.0, "ttft_ms_p99": 800.0}


def night_means(scenario: Scenario, seed: int, repeats: int) -> list[tuple[list[float], int]]:
    """Per night: the repeats' values and the operating mode's index."""
    rng = numpy.random.default_rng(seed)
    worse = -1.0 if metric(scenario.metric).direction == "higher" else 1.0
    out = []
    for night in range(NIGHTS):
        draw = rng.standard_t(3) / numpy.sqrt(3.0) if scenario.tails == "t3" else rng.normal()
        mode = int(rng.integers(len(scenario.modes)))
        shared = 1.0 + scenario.noise * draw
        offset = 1.0 + scenario.modes[mode] * -worse  # a slower mode: lower tok/s, higher TTFT
        level = LEVELS[scenario.metric] * shared * offset * scenario.true_factor(night)
        values = [float(level * (1 + scenario.repeat_noise * rng.normal())) for _ in range(repeats)]
        out.append((values, mode))
    return out


# --- the three rules: each gives the verdict of every night ----------------------------------


def orch_rule(scenario: Scenario, nights: Sequence[tuple[list[float], int]]) -> list[str]:
    rows = []
    for i, (values, mode) in enumerate(nights):
        base = row(i, scenario.metric, values)
        clock = BUSY_SM_MHZ * (1 + scenario.modes[mode]) if len(scenario.modes) > 1 else None
        rows.append(
            [replace(base, attributes=NightAttributes(hosts=("gpu-1",), sm_clock_mhz=clock))]
        )
    judged = replay(rows, Policy(), find=lambda values: None)
    return [night[0].metrics[0].verdict for night in judged]


def _worse(value: float, baseline: float, higher: bool) -> float:
    """How much worse ``value`` is than ``baseline``, relative (positive: worse)."""
    return (baseline - value) / baseline if higher else (value - baseline) / baseline


def simple_rule(scenario: Scenario, nights: Sequence[tuple[list[float], int]]) -> list[str]:
    higher = metric(scenario.metric).direction == "higher"
    means = [statistics.fmean(v) for v, _ in nights]
    bad = [
        i >= 7 and _worse(means[i], statistics.median(means[i - 7 : i]), higher) > THRESHOLD
        for i in range(len(means))
    ]
    return ["regression" if i and bad[i] and bad[i - 1] else "ok" for i in range(len(means))]


def split_rule(scenario: Scenario, nights: Sequence[tuple[list[float], int]]) -> list[str]:
    higher = metric(scenario.metric).direction == "higher"
    means = [statistics.fmean(v) for v, _ in nights]
    out = []
    for i in range(len(means)):
        window = means[max(0, i - 29) : i + 1]
        found = "ok"
        for k in range(3, len(window) - 1):
            before, after = window[:k], window[k:]
            if _worse(statistics.fmean(after), statistics.fmean(before), higher) <= THRESHOLD:
                continue
            with warnings.catch_warnings():  # a side without spread: no p-value, no split
                warnings.simplefilter("ignore", RuntimeWarning)
                p = stats.ttest_ind(before, after, equal_var=False).pvalue
            if p < 0.001:
                found = "regression"
                break
        out.append(found)
    return out


RULES: dict[str, Callable[[Scenario, Sequence[tuple[list[float], int]]], list[str]]] = {
    "orch": orch_rule,
    "simple": simple_rule,
    "split": split_rule,
}


# --- figures ---------------------------------------------------------------------------------


@dataclass
class Figures:
    histories: int = 0
    false_regression: int = 0
    suspicious: int = 0
    caught: dict[int, int] = field(default_factory=lambda: {21: 0, 22: 0, 23: 0, 24: 0, 29: 0})
    called: int = 0
    back_to_ok: int = 0

    def pct(self, count: int, of: int | None = None) -> float:
        return 100.0 * count / max(1, self.histories if of is None else of)


def first_cumulative_past_threshold(scenario: Scenario) -> int:
    """The first night whose true change passes the threshold (a drift's, or the step's)."""
    for night in range(NIGHTS):
        if abs(scenario.true_factor(night) - 1.0) > THRESHOLD:
            return night
    return NIGHTS


ALARMS = ("regression", "drift")  # exit 1: what a history is caught (or falsely flagged) by
PASSING = {v for v, code in EXIT_CODES.items() if code == 0}  # exit 0


def count(scenario: Scenario, verdicts: Sequence[str], out: Figures) -> None:
    out.histories += 1
    start = first_cumulative_past_threshold(scenario) if scenario.changed else NIGHTS
    if scenario.blip:
        start = NIGHTS  # a blip is never a regression
    out.false_regression += any(v in ALARMS for v in verdicts[:start])
    out.suspicious += "suspicious" in verdicts[: CHANGE_AT if not scenario.changed else start]
    if not scenario.changed:
        return
    called = next((i for i, v in enumerate(verdicts) if i >= start and v in ALARMS), None)
    for last in out.caught:
        out.caught[last] += called is not None and called <= last
    if called is not None:
        out.called += 1
        out.back_to_ok += any(v in PASSING for v in verdicts[called + 1 :])


def run(seeds: int, repeats: int) -> dict[tuple[str, str], Figures]:
    found: dict[tuple[str, str], Figures] = {}
    for scenario in SCENARIOS:
        for name, rule in RULES.items():
            figures = found.setdefault((scenario.name, name), Figures())
            for seed in range(seeds):
                count(scenario, rule(scenario, night_means(scenario, seed, repeats)), figures)
    return found


def targets(found: dict[tuple[str, str], Figures]) -> list[Target]:
    """The issue's targets, on orch's rows."""

    def f(name: str) -> Figures:
        return found[(name, "orch")]

    out = [
        Target("false regression, quiet at 3%", f("quiet, 3% night noise").pct(f("quiet, 3% night noise").false_regression), 1, "%"),
        Target("false regression, quiet at 5%", f("quiet, 5% night noise").pct(f("quiet, 5% night noise").false_regression), 2, "%"),
        Target("false regression, two modes 7% apart", f("two modes 7% apart").pct(f("two modes 7% apart").false_regression), 1, "%"),
        Target("suspicious, quiet at 3%", f("quiet, 3% night noise").pct(f("quiet, 3% night noise").suspicious), 5, "%"),
        Target("false regression, heavy tails", f("quiet, 3% Student-t(3) tails").pct(f("quiet, 3% Student-t(3) tails").false_regression), 0, "%"),
        Target("false regression, one-night blip", f("one-night -20% blip").pct(f("one-night -20% blip").false_regression), 0, "%"),
        Target("-10% step caught by night 22", f("-10% step").pct(f("-10% step").caught[22]), 95, "%", at_most=False),
        Target("-10% step caught by night 24", f("-10% step").pct(f("-10% step").caught[24]), 99, "%", at_most=False),
        Target("-20% step caught by night 21", f("-20% step").pct(f("-20% step").caught[21]), 99, "%", at_most=False),
        Target("-5% step at 1% noise caught by night 23", f("-5% step, 1% night noise").pct(f("-5% step, 1% night noise").caught[23]), 90, "%", at_most=False),
        Target("-5% step at 3% noise caught by night 29", f("-5% step").pct(f("-5% step").caught[29]), 80, "%", at_most=False),
        Target("TTFT p99 +15% caught by night 23", f("TTFT p99 +15% step").pct(f("TTFT p99 +15% step").caught[23]), 90, "%", at_most=False),
        Target("drift caught by night 29", f("drift -0.3%/night").pct(f("drift -0.3%/night").caught[29]), 80, "%", at_most=False),
        Target("drift: called before its total passed 5%", f("drift -0.3%/night").pct(f("drift -0.3%/night").false_regression), 0, "%"),
        Target("-10% step: called, then exit 0 while it persists", f("-10% step").pct(f("-10% step").back_to_ok, f("-10% step").called), 0, "%"),
    ]  # fmt: skip
    return out


def main() -> None:
    args = arguments(__doc__ or "", "10 seeds, 5 repeats: that it runs", seeds=200)
    seeds = 10 if args.smoke else args.seeds
    bench = Bench(
        name="nightly",
        title="Nightly verdict: detection on synthetic histories",
        columns=[
            "scenario",
            "repeats",
            "rule",
            "false regression %",
            "suspicious %",
            "by night 21 %",
            "by 22 %",
            "by 23 %",
            "by 24 %",
            "by 29 %",
            "back to exit 0 %",
        ],
        smoke=args.smoke,
    )
    five: dict[tuple[str, str], Figures] = {}
    for repeats in (5,) if args.smoke else (5, 3):
        found = run(seeds, repeats)
        five = five or found
        for (scenario, rule), f in found.items():
            changed = next(s for s in SCENARIOS if s.name == scenario).changed
            bench.rows.append(
                [
                    scenario,
                    repeats,
                    rule,
                    f.pct(f.false_regression),
                    f.pct(f.suspicious) if rule == "orch" else None,
                    *(
                        (f.pct(f.caught[n]) for n in (21, 22, 23, 24, 29))
                        if changed
                        else (None,) * 5
                    ),
                    f.pct(f.back_to_ok, f.called) if changed and f.called else None,
                ]
            )
    bench.targets = targets(five)
    bench.notes = [
        f"{seeds} seeds of {NIGHTS} nights per scenario; changes at night {CHANGE_AT} (a drift "
        "from night 0: 'caught' counts from the night its total passes the 5% threshold, and a "
        "regression before that is a false one); 1% repeat noise on top of the night's; the "
        "targets are the issue's, on the 5-repeat rows of orch's default policy."
    ]
    bench.publish(args.out)


if __name__ == "__main__":
    main()
