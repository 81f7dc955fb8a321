"""The metric catalogue: every figure orch reports, declared once.

Each ``Metric`` says its name (the column users see in summary.csv, the DataFrame and the
tables, and write in SLO targets and nightly thresholds), how it is labelled, its unit, which
way is better, how it is formatted, and how it is computed from a ``RunResult``. summary.csv,
the results DataFrame, the console and report tables, ``orch compare``, the nightly and the SLO
target grammar all read it, so a metric cannot be known to one output and missing from another
(``tests/unit/test_metric_catalogue.py`` holds every output to it).

Where a metric goes besides summary.csv and the DataFrame (which carry every one):
``table`` (the report's, compare's and ``orch results``' tables: always, with speculation, with
SLO targets), ``slo`` (an SLO target may bound it; a latency's ``per_request`` names the
request's own value goodput bounds), ``nightly`` (the nightly watches it, with this default
threshold; ``absolute``: a difference rather than a ratio).

Standard library only at run time: the SLO grammar (imported by the playbook model) reads it,
so it must import neither the results model nor the configuration back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from orchestrator.metrics.summary import RequestStats, Stats
    from orchestrator.results.model import RunResult

Direction = Literal["higher", "lower"]  # which way is better
TableRule = Literal["always", "speculation", "slo"]  # when a table shows the metric
Latency = Literal["ttft", "tpot", "itl", "e2el"]  # a request's own latency, for goodput


@dataclass(frozen=True)
class Metric:
    """One figure: what it is called and shown as, and how it is made from a result."""

    name: str
    header: str  # a table's column header: "TTFT p99 ms"
    title: str  # a plot axis or a sentence: "TTFT p99"
    unit: str  # "ms", "tok/s", "" for a ratio
    direction: Direction | None  # None: a diagnostic, neither way is better
    decimals: int  # summary.csv keeps this many (fixed point)
    spec: str  # format of a table's figure: ".1f"
    value: Callable[[RunResult], float | None]
    of_requests: Callable[[RequestStats], float | None] | None = None  # SLO targets read this
    per_request: Latency | None = None
    slo: bool = False
    nightly: float | None = None  # default threshold, when the nightly watches it
    absolute: bool = False
    table: TableRule | None = None
    aliases: tuple[str, ...] = ()  # older spellings an SLO target may still use

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"

    def better(self, change: float) -> bool | None:
        """Whether a (non-zero) change of the figure is an improvement; None: no direction."""
        if self.direction is None or change == 0:
            return None
        return change > 0 if self.direction == "higher" else change < 0

    def axis_label(self) -> str:
        """ "TTFT p99 (ms)": a plot axis."""
        return f"{self.title} ({self.unit})" if self.unit else self.title


def finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den; None where either is unknown, the numerator not finite or den <= 0."""
    if num is None or den is None or den <= 0 or not math.isfinite(num):
        return None
    return num / den


def gpu_count(result: RunResult) -> int | None:
    """GPUs the server used: recorded since schema 3, else its tensor-parallel size (orch gives
    a server exactly that many)."""
    settings = result.settings
    count = settings.gpu_count if settings.gpu_count is not None else settings.tensor_parallel
    return count if count is not None and count > 0 else None


def total_tok_s(result: RunResult) -> float | None:
    """(prompt + output tokens) / the measured window."""
    req = result.requests
    if req is None:
        return None
    return ratio(float(req.total_prompt_tokens + req.total_output_tokens), req.duration_s)


def _of_requests(
    read: Callable[[RequestStats], float | None],
) -> Callable[[RunResult], float | None]:
    return lambda r: finite(read(r.requests)) if r.requests is not None else None


def _per_gpu(figure: Callable[[RunResult], float | None]) -> Callable[[RunResult], float | None]:
    return lambda r: ratio(figure(r), gpu_count(r))


def _interactivity(result: RunResult) -> float | None:
    req = result.requests
    return ratio(1000.0, req.tpot_ms.median if req else None)


def _failure_rate(result: RunResult) -> float | None:
    req = result.requests
    sent = req.completed + req.failed if req else 0
    return req.failed / sent if req and sent else None


def _stat_reader(field: str, stat: str) -> Callable[[RequestStats], float | None]:
    def read(stats: RequestStats) -> float | None:
        dist: Stats = getattr(stats, field)
        found: float | None = getattr(dist, stat)
        return found

    return read


def _request_metric(
    name: str,
    header: str,
    title: str,
    unit: str,
    read: Callable[[RequestStats], float | None],
    **kw: object,
) -> Metric:
    return Metric(name, header, title, unit, value=_of_requests(read), of_requests=read, **kw)  # type: ignore[arg-type]


STAT_TITLES = {"mean": "Mean", "median": "Median", "p10": "p10", "p90": "p90", "p99": "p99"}
STAT_WORDS = {"mean": "mean", "median": "med", "p10": "p10", "p90": "p90", "p99": "p99"}


def _latencies(
    field: str,
    what: tuple[str, str],
    latency: Latency,
    alias: str | None,
    shown: dict[str, TableRule],
    nightly: tuple[str, ...],
    spec: str,
) -> tuple[Metric, ...]:
    """A latency's mean, median, p90 and p99 (ms, lower is better, SLO targets may bound them);
    ``what``: its name in a table header and in a title ("ITL", "per-token ITL")."""
    return tuple(
        _request_metric(
            f"{field}_{stat}",
            f"{what[0]} {STAT_WORDS[stat]} ms",
            f"{STAT_TITLES[stat]} {what[1]}",
            "ms",
            _stat_reader(field, stat),
            direction="lower",
            decimals=3,
            spec=spec,
            per_request=latency,
            slo=True,
            nightly=0.10 if stat in nightly else None,
            table=shown.get(stat),
            aliases=(f"{alias}_{stat}",) if alias else (),
        )
        for stat in ("mean", "median", "p90", "p99")
    )


# The order is the DataFrame's and the tables'; summary.csv keeps its historical columns in
# place and appends the rest in this order.
CATALOGUE: tuple[Metric, ...] = (
    _request_metric(
        "duration_s",
        "window s",
        "Measured window",
        "s",
        lambda s: s.duration_s,
        direction=None,
        decimals=3,
        spec=".1f",
    ),
    _request_metric(
        "request_throughput",
        "req/s",
        "Request throughput",
        "req/s",
        lambda s: s.request_throughput,
        direction="higher",
        decimals=4,
        spec=".3f",
        slo=True,
    ),
    _request_metric(
        "output_tok_s",
        "out tok/s",
        "Output throughput",
        "tok/s",
        lambda s: s.output_throughput,
        direction="higher",
        decimals=2,
        spec=".1f",
        slo=True,
        nightly=0.05,
        table="always",
    ),
    Metric(
        "total_tok_s", "total tok/s", "Total throughput", "tok/s", "higher", 2, ".1f", total_tok_s
    ),
    Metric(
        "output_tok_s_per_gpu",
        "out tok/s/GPU",
        "Output throughput per GPU",
        "tok/s/GPU",
        "higher",
        2,
        ".1f",
        _per_gpu(_of_requests(lambda s: s.output_throughput)),
        table="always",
    ),
    Metric(
        "total_tok_s_per_gpu",
        "total tok/s/GPU",
        "Total throughput per GPU",
        "tok/s/GPU",
        "higher",
        2,
        ".1f",
        _per_gpu(total_tok_s),
    ),
    Metric(
        "interactivity",
        "tok/s/user",
        "Interactivity",
        "tok/s/user",
        "higher",
        3,
        ".1f",
        _interactivity,
        table="always",
    ),
    *(
        _request_metric(
            f"decode_tok_s_{stat}",
            f"decode {STAT_WORDS[stat]} tok/s",
            f"{STAT_TITLES[stat]} per-request decode speed",
            "tok/s",
            _stat_reader("decode_tok_s", stat),
            direction="higher",
            decimals=2,
            spec=".1f",
            nightly=0.05 if stat == "median" else None,
        )
        for stat in ("mean", "median", "p10", "p90")
    ),
    *_latencies(
        "ttft_ms",
        ("TTFT", "TTFT"),
        "ttft",
        None,
        {"median": "always", "p99": "always"},
        ("median", "p99"),
        ".1f",
    ),
    *_latencies(
        "tpot_ms", ("TPOT", "TPOT"), "tpot", None, {"median": "always"}, ("median", "p99"), ".2f"
    ),
    *_latencies("itl_token_ms", ("ITL", "per-token ITL"), "itl", "itl_ms", {}, (), ".2f"),
    _request_metric(
        "itl_chunk_ms_median",
        "chunk ITL med ms",
        "Median per-chunk ITL",
        "ms",
        _stat_reader("itl_chunk_ms", "median"),
        direction="lower",
        decimals=3,
        spec=".2f",
    ),
    *_latencies("e2el_ms", ("E2EL", "E2E latency"), "e2el", None, {}, (), ".1f"),
    Metric(
        "acceptance_length",
        "accept len",
        "Acceptance length",
        "tokens/step",
        "higher",
        4,
        ".2f",
        lambda r: finite(r.acceptance.length) if r.acceptance else None,
        nightly=0.05,
        table="speculation",
    ),
    Metric(
        "goodput_req_s",
        "goodput req/s",
        "Goodput",
        "req/s",
        "higher",
        4,
        ".3f",
        lambda r: finite(r.slo.goodput) if r.slo else None,
        table="slo",
    ),
    Metric(
        "goodput_fraction",
        "goodput share",
        "Share of requests meeting every SLO target",
        "",
        "higher",
        4,
        ".3f",
        lambda r: finite(r.slo.goodput_fraction) if r.slo else None,
    ),
    Metric(
        "failure_rate",
        "failed share",
        "Failed requests / sent",
        "",
        "lower",
        4,
        ".3f",
        _failure_rate,
        nightly=0.01,
        absolute=True,
    ),
    Metric(
        "engine_gen_tok_s",
        "engine tok/s",
        "Generation throughput the engine logged",
        "tok/s",
        None,
        2,
        ".1f",
        lambda r: finite(r.engine_metrics.generation_throughput_mean),
    ),
    Metric(
        "client_lag_ms_p99",
        "send lag p99 ms",
        "Client send lag p99",
        "ms",
        None,
        3,
        ".2f",
        lambda r: finite(r.requests.client_lag.send_lag_ms.p99) if r.requests else None,
    ),
    Metric(
        "loop_delay_ms_p99",
        "loop delay p99 ms",
        "Client loop delay p99",
        "ms",
        None,
        3,
        ".2f",
        lambda r: (
            finite(r.requests.client_lag.loop_delay_ms.p99)
            if r.requests and r.requests.client_lag.loop_delay_ms
            else None
        ),
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOGUE}
_ALIASES: dict[str, Metric] = {a: m for m in CATALOGUE for a in m.aliases}
NAMES: tuple[str, ...] = tuple(BY_NAME)
TABLE: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.table is not None)
SLO: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.slo)
NIGHTLY: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.nightly is not None)


def get(name: str) -> Metric:
    """The metric called ``name`` (or an older spelling of it); KeyError for another name."""
    found = BY_NAME.get(name) or _ALIASES.get(name)
    if found is None:
        raise KeyError(name)
    return found


def slo_names() -> tuple[str, ...]:
    """Every name an SLO target may bound, the older spellings included."""
    return tuple(n for m in SLO for n in (m.name, *m.aliases))


def values(result: RunResult) -> dict[str, float | None]:
    """Every catalogued figure of one measurement."""
    return {m.name: m.value(result) for m in CATALOGUE}
