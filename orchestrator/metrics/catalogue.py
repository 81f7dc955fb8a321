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
so it must import neither the results model nor the configuration back. A result is read
through ``Measurement``, the Protocol of the attributes computed from (results/ sits above
metrics/): ``RunResult`` is one, which mypy checks wherever one is handed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from orchestrator.metrics.summary import RequestStats, Stats

Direction = Literal["higher", "lower"]  # which way is better
TableRule = Literal[
    "always", "roofline", "speculation", "slo", "energy"
]  # when a table shows the metric
Latency = Literal["ttft", "tpot", "itl", "e2el"]  # a request's own latency, for goodput


class _Settings(Protocol):
    @property
    def gpu_count(self) -> int | None: ...
    @property
    def tensor_parallel(self) -> int | None: ...


class _Acceptance(Protocol):
    @property
    def length(self) -> float | None: ...


class _Slo(Protocol):
    @property
    def goodput(self) -> float | None: ...
    @property
    def goodput_fraction(self) -> float | None: ...


class _Energy(Protocol):
    @property
    def j_per_output_token(self) -> float | None: ...
    @property
    def j_per_token(self) -> float | None: ...
    @property
    def output_tok_s_per_w(self) -> float | None: ...
    @property
    def power_mean_w(self) -> float | None: ...
    @property
    def sm_mhz_mean(self) -> float | None: ...
    @property
    def throttled_share(self) -> float | None: ...


class _Roofline(Protocol):
    @property
    def pct(self) -> float: ...
    @property
    def achieved_gb_s(self) -> float: ...


def throttled_pct(r: Measurement) -> float | None:
    """The largest share of the window one GPU spent under a throttling reason, in %."""
    share = r.energy.throttled_share if r.energy else None
    return 100.0 * share if share is not None else None


class _EngineLog(Protocol):
    @property
    def generation_throughput_mean(self) -> float | None: ...


class Measurement(Protocol):
    """What the catalogue reads of one measurement's result (``results/model.py: RunResult``)."""

    @property
    def requests(self) -> RequestStats | None: ...
    @property
    def settings(self) -> _Settings: ...
    @property
    def acceptance(self) -> _Acceptance | None: ...
    @property
    def slo(self) -> _Slo | None: ...
    @property
    def engine_metrics(self) -> _EngineLog: ...
    @property
    def energy(self) -> _Energy | None: ...
    @property
    def roofline(self) -> _Roofline | None: ...


Read = Callable[[Measurement], "float | None"]
ReadRequests = Callable[["RequestStats"], "float | None"]


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One figure: what it is called and shown as, and how it is made from a result: either
    ``compute`` (from the whole result) or ``of_requests`` (a request statistic, which SLO
    targets read during a run, before there is a result)."""

    name: str
    header: str  # a table's column header: "TTFT p99 ms"
    title: str  # a plot axis or a sentence: "p99 TTFT"
    unit: str  # "ms", "tok/s", "" for a ratio
    direction: Direction | None  # None: a diagnostic, neither way is better
    decimals: int  # summary.csv keeps this many (fixed point)
    spec: str  # format of a table's figure: ".1f"
    compute: Read | None = None
    of_requests: ReadRequests | None = None
    per_request: Latency | None = None
    slo: bool = False
    nightly: float | None = None  # default threshold, when the nightly watches it
    absolute: bool = False
    table: TableRule | None = None
    aliases: tuple[str, ...] = ()  # older spellings an SLO target may still use

    def __post_init__(self) -> None:
        if (self.compute is None) == (self.of_requests is None):
            raise TypeError(f"metric {self.name}: give compute or of_requests, not both")

    def value(self, result: Measurement) -> float | None:
        """The figure of one measurement; None when unknown or not finite."""
        if self.of_requests is not None:
            req = result.requests
            return finite(self.of_requests(req)) if req is not None else None
        assert self.compute is not None
        return finite(self.compute(result))

    def better(self, change: float) -> bool | None:
        """Whether a (non-zero) change of the figure is an improvement; None: no direction."""
        if self.direction is None or change == 0:
            return None
        return change > 0 if self.direction == "higher" else change < 0


def finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den; None where either is unknown, the numerator not finite or den <= 0."""
    if num is None or den is None or den <= 0 or not math.isfinite(num):
        return None
    return num / den


def gpu_count(result: Measurement) -> int | None:
    """GPUs the server used: recorded since schema 3, else its tensor-parallel size (orch gives
    a server exactly that many)."""
    settings = result.settings
    count = settings.gpu_count if settings.gpu_count is not None else settings.tensor_parallel
    return count if count is not None and count > 0 else None


def total_tok_s(result: Measurement) -> float | None:
    """(prompt + output tokens) / the measured window."""
    req = result.requests
    if req is None:
        return None
    return ratio(float(req.total_prompt_tokens + req.total_output_tokens), req.duration_s)


def output_tok_s_per_gpu(result: Measurement) -> float | None:
    req = result.requests
    return ratio(req.output_throughput if req else None, gpu_count(result))


def interactivity(result: Measurement) -> float | None:
    """1000 / median TPOT: the tokens per second one user sees."""
    req = result.requests
    return ratio(1000.0, req.tpot_ms.median if req else None)


def failure_rate(result: Measurement) -> float | None:
    """Failed requests / sent."""
    req = result.requests
    sent = req.completed + req.failed if req else 0
    return req.failed / sent if req and sent else None


def loop_delay_ms_p99(result: Measurement) -> float | None:
    lag = result.requests.client_lag if result.requests else None
    return lag.loop_delay_ms.p99 if lag and lag.loop_delay_ms else None


# A distribution of the request statistics, and a statistic of it: read by attribute, never
# by a name in a string.
DISTRIBUTIONS: dict[str, Callable[[RequestStats], Stats]] = {
    "decode_tok_s": lambda s: s.decode_tok_s,
    "ttft_ms": lambda s: s.ttft_ms,
    "tpot_ms": lambda s: s.tpot_ms,
    "itl_token_ms": lambda s: s.itl_token_ms,
    "itl_chunk_ms": lambda s: s.itl_chunk_ms,
    "e2el_ms": lambda s: s.e2el_ms,
}
STATISTICS: dict[str, Callable[[Stats], float | None]] = {
    "mean": lambda d: d.mean,
    "median": lambda d: d.median,
    "p10": lambda d: d.p10,
    "p90": lambda d: d.p90,
    "p99": lambda d: d.p99,
}
STAT_TITLES = {"mean": "Mean", "median": "Median", "p10": "p10", "p90": "p90", "p99": "p99"}
STAT_WORDS = {"mean": "mean", "median": "med", "p10": "p10", "p90": "p90", "p99": "p99"}


def statistic(dist: str, stat: str) -> ReadRequests:
    """The reader of ``<dist>_<stat>`` (``ttft_ms``, ``p99``)."""
    of_dist, of_stat = DISTRIBUTIONS[dist], STATISTICS[stat]
    return lambda s: of_stat(of_dist(s))


def latencies(
    dist: str,
    what: tuple[str, str],
    latency: Latency,
    *,
    watched: tuple[str, ...] = (),
    shown: tuple[str, ...] = (),
    alias: str | None = None,
) -> tuple[Metric, ...]:
    """A latency's mean, median, p90 and p99: ms, lower is better, SLO targets may bound them
    (each request's own ``latency`` for goodput). ``what``: its name in a table header and in a
    title ("ITL", "per-token ITL"); the nightly watches the ``watched`` statistics (10%), every
    table shows the ``shown`` ones; ``alias``: an older spelling of ``dist``."""
    return tuple(
        Metric(
            name=f"{dist}_{stat}",
            header=f"{what[0]} {STAT_WORDS[stat]} ms",
            title=f"{STAT_TITLES[stat]} {what[1]}",
            unit="ms",
            direction="lower",
            decimals=3,
            spec=".2f" if latency in ("tpot", "itl") else ".1f",
            of_requests=statistic(dist, stat),
            per_request=latency,
            slo=True,
            nightly=0.10 if stat in watched else None,
            table="always" if stat in shown else None,
            aliases=(f"{alias}_{stat}",) if alias else (),
        )
        for stat in ("mean", "median", "p90", "p99")
    )


# The order is the DataFrame's and the tables'; summary.csv keeps its historical columns in
# place and appends the rest in this order.
# fmt: off
CATALOGUE: tuple[Metric, ...] = (
    Metric(name="duration_s", header="window s", title="Measured window", unit="s",
           direction=None, decimals=3, spec=".1f", of_requests=lambda s: s.duration_s),
    Metric(name="request_throughput", header="req/s", title="Request throughput", unit="req/s",
           direction="higher", decimals=4, spec=".3f",
           of_requests=lambda s: s.request_throughput, slo=True),
    Metric(name="output_tok_s", header="out tok/s", title="Output throughput", unit="tok/s",
           direction="higher", decimals=2, spec=".1f", of_requests=lambda s: s.output_throughput,
           slo=True, nightly=0.05, table="always"),
    Metric(name="total_tok_s", header="total tok/s", title="Total throughput", unit="tok/s",
           direction="higher", decimals=2, spec=".1f", compute=total_tok_s),
    Metric(name="output_tok_s_per_gpu", header="out tok/s/GPU", title="Output throughput per GPU",
           unit="tok/s/GPU", direction="higher", decimals=2, spec=".1f",
           compute=output_tok_s_per_gpu, table="always"),
    Metric(name="total_tok_s_per_gpu", header="total tok/s/GPU", title="Total throughput per GPU",
           unit="tok/s/GPU", direction="higher", decimals=2, spec=".1f",
           compute=lambda r: ratio(total_tok_s(r), gpu_count(r))),
    Metric(name="interactivity", header="tok/s/user", title="Interactivity", unit="tok/s/user",
           direction="higher", decimals=3, spec=".1f", compute=interactivity, table="always"),
    # decode against the GPUs' memory bandwidth (metrics/roofline.py)
    Metric(name="roofline_pct", header="% roofline", title="Decode's % of the memory-bandwidth roofline",
           unit="%", direction="higher", decimals=2, spec=".0f",
           compute=lambda r: r.roofline.pct if r.roofline else None, table="roofline"),
    Metric(name="decode_gb_s", header="decode GB/s", title="Memory read by decode steps",
           unit="GB/s", direction="higher", decimals=1, spec=".0f",
           compute=lambda r: r.roofline.achieved_gb_s if r.roofline else None),
    *(
        Metric(name=f"decode_tok_s_{stat}", header=f"decode {STAT_WORDS[stat]} tok/s",
               title=f"{STAT_TITLES[stat]} per-request decode speed", unit="tok/s",
               direction="higher", decimals=2, spec=".1f",
               of_requests=statistic("decode_tok_s", stat),
               nightly=0.05 if stat == "median" else None)
        for stat in ("mean", "median", "p10", "p90")
    ),
    *latencies("ttft_ms", ("TTFT", "TTFT"), "ttft", watched=("median", "p99"),
               shown=("median", "p99")),
    *latencies("tpot_ms", ("TPOT", "TPOT"), "tpot", watched=("median", "p99"), shown=("median",)),
    *latencies("itl_token_ms", ("ITL", "per-token ITL"), "itl", alias="itl_ms"),
    Metric(name="itl_chunk_ms_median", header="chunk ITL med ms", title="Median per-chunk ITL",
           unit="ms", direction="lower", decimals=3, spec=".2f",
           of_requests=statistic("itl_chunk_ms", "median")),
    *latencies("e2el_ms", ("E2EL", "E2E latency"), "e2el"),
    Metric(name="acceptance_length", header="accept len", title="Acceptance length",
           unit="tokens/step", direction="higher", decimals=4, spec=".2f",
           compute=lambda r: r.acceptance.length if r.acceptance else None,
           nightly=0.05, table="speculation"),
    Metric(name="goodput_req_s", header="goodput req/s", title="Goodput", unit="req/s",
           direction="higher", decimals=4, spec=".3f",
           compute=lambda r: r.slo.goodput if r.slo else None, table="slo"),
    Metric(name="goodput_fraction", header="goodput share",
           title="Share of requests meeting every SLO target", unit="", direction="higher",
           decimals=4, spec=".3f", compute=lambda r: r.slo.goodput_fraction if r.slo else None),
    Metric(name="failure_rate", header="failed share", title="Failed requests / sent", unit="",
           direction="lower", decimals=4, spec=".3f", compute=failure_rate,
           nightly=0.01, absolute=True),
    # from the GPU samples around the window (metrics/energy.py); a flagged figure stays
    Metric(name="j_per_output_token", header="J/out tok", title="Energy per output token",
           unit="J/tok", direction="lower", decimals=5, spec=".3f",
           compute=lambda r: r.energy.j_per_output_token if r.energy else None, table="energy"),
    Metric(name="j_per_token", header="J/tok", title="Energy per token (prompt and output)",
           unit="J/tok", direction="lower", decimals=5, spec=".3f",
           compute=lambda r: r.energy.j_per_token if r.energy else None),
    Metric(name="output_tok_s_per_w", header="out tok/s/W", title="Output throughput per watt",
           unit="tok/s/W", direction="higher", decimals=4, spec=".2f",
           compute=lambda r: r.energy.output_tok_s_per_w if r.energy else None, table="energy"),
    Metric(name="gpu_power_w", header="GPU W", title="Mean power of the run's GPUs", unit="W",
           direction=None, decimals=1, spec=".0f",
           compute=lambda r: r.energy.power_mean_w if r.energy else None),
    Metric(name="sm_clock_mhz", header="SM MHz", title="Mean SM clock of the run's GPUs",
           unit="MHz", direction=None, decimals=1, spec=".0f",
           compute=lambda r: r.energy.sm_mhz_mean if r.energy else None),
    Metric(name="gpu_throttled_pct", header="throttled %",
           title="Share of the window a GPU was throttled", unit="%", direction=None,
           decimals=1, spec=".0f", compute=throttled_pct),
    # diagnostics: how the engine and the client fared, not figures of merit
    Metric(name="engine_gen_tok_s", header="engine tok/s",
           title="Generation throughput the engine logged", unit="tok/s", direction=None,
           decimals=2, spec=".1f",
           compute=lambda r: r.engine_metrics.generation_throughput_mean),
    Metric(name="client_lag_ms_p99", header="send lag p99 ms", title="Client send lag p99",
           unit="ms", direction=None, decimals=3, spec=".2f",
           of_requests=lambda s: s.client_lag.send_lag_ms.p99),
    Metric(name="loop_delay_ms_p99", header="loop delay p99 ms", title="Client loop delay p99",
           unit="ms", direction=None, decimals=3, spec=".2f", compute=loop_delay_ms_p99),
)
# fmt: on

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


def values(result: Measurement) -> dict[str, float | None]:
    """Every catalogued figure of one measurement."""
    return {m.name: m.value(result) for m in CATALOGUE}
