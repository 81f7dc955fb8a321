"""SLO targets at a measurement: the figure each target bounds, a request's own latencies for
goodput (vLLM ``--goodput`` semantics), and the SloResult of a measurement.

Times are multiples of 1/64 s so the millisecond values below are exact in binary floating point.
"""

from __future__ import annotations

import pytest

from orchestrator.config.slo import parse_target
from orchestrator.loadgen.records import Chunk, RequestRecord
from orchestrator.metrics.summary import RequestStats, Stats, request_stats
from orchestrator.results.model import SloCheck, SloResult
from orchestrator.sweep.slo import evaluate, figure, request_value


def record(
    chunks: list[tuple[float, int]],
    *,
    index: int = 0,
    ok: bool = True,
    warmup: bool = False,
    method: str | None = "usage",
    output_tokens: int | None = -1,
) -> RequestRecord:
    """A request whose ttft/e2el are its first/last chunk's arrival (s after it was sent)."""
    tokens = sum(n for _, n in chunks) if output_tokens == -1 else output_tokens
    return RequestRecord(
        index=index,
        warmup=warmup,
        start=0.0,
        start_wall=1.0e9,
        end=chunks[-1][0] if chunks else 0.5,
        status=200 if ok else 500,
        ttft=chunks[0][0] if chunks else None,
        e2el=chunks[-1][0] if chunks else None,
        chunks=tuple(Chunk(t, n) for t, n in chunks),
        output_tokens=tokens if ok else None,
        token_count_method=method,
        error=None if ok else "HTTP 500",
    )


# --- target normalisation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("ttft_ms_p99<=2000", "ttft_ms_p99 <= 2000"),
        ("ttft_ms_p99 <= 2e3", "ttft_ms_p99 <= 2000"),
        ("tpot_ms_median <= 12.5", "tpot_ms_median <= 12.5"),
        ("output_tok_s >= 1234567", "output_tok_s >= 1234567"),  # not 1.23457e+06
        ("request_throughput >= 0.1", "request_throughput >= 0.1"),
        ("e2el_ms_p90 <= 1234.5678", "e2el_ms_p90 <= 1234.5678"),
    ],
)
def test_targets_print_every_digit_and_round_trip(text: str, normalised: str) -> None:
    target = parse_target(text)
    assert str(target) == normalised
    assert parse_target(str(target)) == target


# --- figure: which statistic a target bounds ------------------------------------------------


def _dist(base: float) -> Stats:
    """Distinct values per statistic, so a wrong mapping shows."""
    return Stats(n=3, mean=base + 1, median=base + 2, p90=base + 3, p99=base + 4)


STATS = RequestStats(
    completed=3,
    failed=0,
    duration_s=2.0,
    request_throughput=1.5,
    output_throughput=480.0,
    total_output_tokens=960,
    total_prompt_tokens=30,
    decode_tok_s=_dist(900),
    ttft_ms=_dist(100),
    tpot_ms=_dist(200),
    e2el_ms=_dist(300),
    itl_chunk_ms=_dist(400),  # per step: never what an itl target bounds
    itl_token_ms=_dist(500),
    tokens_per_chunk=None,
    tokens_per_chunk_request_mean=None,
    token_count_method="usage",
)


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("ttft_ms_mean", 101),
        ("ttft_ms_median", 102),
        ("ttft_ms_p90", 103),
        ("ttft_ms_p99", 104),
        ("tpot_ms_mean", 201),
        ("tpot_ms_p99", 204),
        ("e2el_ms_median", 302),
        ("e2el_ms_p90", 303),
        ("itl_ms_mean", 501),
        ("itl_ms_p99", 504),
        ("output_tok_s", 480.0),
        ("request_throughput", 1.5),
    ],
)
def test_figure_reads_the_statistic_the_target_names(metric: str, expected: float) -> None:
    op = ">=" if metric in ("output_tok_s", "request_throughput") else "<="
    assert figure(parse_target(f"{metric} {op} 1"), STATS) == expected


def test_figure_is_none_when_not_measured() -> None:
    empty = STATS.model_copy(
        update={"itl_token_ms": Stats(), "request_throughput": None, "output_throughput": None}
    )
    for text in ("itl_ms_p99 <= 1", "request_throughput >= 1", "output_tok_s >= 1"):
        assert figure(parse_target(text), empty) is None


# --- request_value: one request's own latencies ---------------------------------------------

# first chunk of 2 tokens at 250 ms, then 2 + 2 tokens at 375 and 500 ms: 6 tokens
TWO_TOKEN_FIRST = [(0.25, 2), (0.375, 2), (0.5, 2)]


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        # tpot = 250 ms / (6 - 1); itl = 250 ms / the 4 tokens after the first chunk
        (record(TWO_TOKEN_FIRST), {"ttft": 250.0, "e2el": 500.0, "tpot": 50.0, "itl": 62.5}),
        # one token: nothing after the first to be late (vLLM counts its tpot as 0)
        (record([(0.25, 1)]), {"ttft": 250.0, "e2el": 250.0, "tpot": 0.0, "itl": 0.0}),
        # tokens counted one per chunk: per-token gaps unknown, tpot from the output count
        (
            record([(0.125, 1), (0.25, 1), (0.375, 1)], method="chunk", output_tokens=5),
            {"ttft": 125.0, "e2el": 375.0, "tpot": 62.5, "itl": None},
        ),
        # no output token count: no tpot
        (
            record([(0.125, 1), (0.25, 1)], output_tokens=None),
            {"ttft": 125.0, "e2el": 250.0, "tpot": None, "itl": 125.0},
        ),
        # a failed request has no latency that could meet a target
        (record([(0.125, 1), (0.25, 1)], ok=False), dict.fromkeys(("ttft", "e2el", "tpot", "itl"))),
    ],
)
def test_request_value(rec: RequestRecord, expected: dict[str, float | None]) -> None:
    assert {lat: request_value(lat, rec) for lat in expected} == expected


def test_request_value_agrees_with_the_run_statistics() -> None:
    """One request's tpot and itl are its share of summary's tpot_ms and itl_token_ms."""
    rec = record([(0.125, 3), (0.25, 1), (0.4375, 4), (0.5, 2)])
    stats = request_stats([rec], window_s=1.0)
    assert request_value("tpot", rec) == pytest.approx(stats.tpot_ms.mean, rel=1e-12)
    assert request_value("itl", rec) == pytest.approx(stats.itl_token_ms.mean, rel=1e-12)
    assert request_value("ttft", rec) == stats.ttft_ms.mean
    assert request_value("e2el", rec) == stats.e2el_ms.mean


def test_request_value_rejects_an_unknown_latency() -> None:
    with pytest.raises(ValueError, match="unknown latency 'tbt'"):
        request_value("tbt", record(TWO_TOKEN_FIRST))


# --- evaluate: checks, met, goodput ---------------------------------------------------------

RECORDS = [
    record([(0.25, 1), (0.3125, 1), (0.375, 1)], index=0),  # ttft 250, tpot 62.5
    record([(0.375, 1), (0.4375, 2)], index=1),  # ttft 375, tpot 31.25
    record([(0.125, 1)], index=2, ok=False),  # failed: never good
    record([(0.125, 1), (0.1875, 1), (0.25, 1), (0.3125, 1)], index=3),  # ttft 125, tpot 62.5
    record([(0.0625, 1), (0.125, 1)], index=4, warmup=True),  # meets all, but not measured
]
WINDOW = 2.0  # s


@pytest.mark.parametrize(
    ("targets", "good"),
    [
        ([], 3),  # no target: every completed request is good
        (["ttft_ms_p99 <= 300"], 2),  # #0, #3 (a percentile bound applies to each request)
        (["ttft_ms_median <= 300"], 2),  # the statistic does not change the per-request bound
        (["tpot_ms_median <= 50"], 1),  # #1
        (["ttft_ms_p99 <= 300", "tpot_ms_mean <= 50"], 0),
        (["e2el_ms_p99 <= 375"], 2),  # #0 at exactly 375, #3 at 312.5
        (["itl_ms_p90 <= 62.5"], 3),  # a one-token first chunk: itl = tpot
        (["output_tok_s >= 1", "request_throughput >= 100"], 3),  # throughput: not per request
    ],
)
def test_goodput_counts_measured_requests_meeting_every_latency_target(
    targets: list[str], good: int
) -> None:
    result = evaluate([parse_target(t) for t in targets], None, RECORDS, WINDOW)
    assert result.goodput == good / WINDOW
    assert result.goodput_fraction == good / 4  # 4 measured requests, one of them failed


def test_evaluate_checks_each_target_against_the_measured_figure() -> None:
    stats = request_stats(RECORDS, window_s=WINDOW)
    targets = [
        parse_target(t)
        for t in ("ttft_ms_median <= 250", "ttft_ms_p99 <= 300", "request_throughput >= 1.5")
    ]
    result = evaluate(targets, stats, RECORDS, WINDOW)
    assert result == SloResult(
        checks=[
            SloCheck(target="ttft_ms_median <= 250", value=250.0, met=True),
            SloCheck(target="ttft_ms_p99 <= 300", value=stats.ttft_ms.p99, met=False),
            SloCheck(target="request_throughput >= 1.5", value=1.5, met=True),
        ],
        met=False,
        goodput=1.0,
        goodput_fraction=0.5,
    )
    assert stats.ttft_ms.p99 == pytest.approx(372.5, rel=1e-12)  # [125, 250, 375] at p99


def test_evaluate_met_when_every_check_is() -> None:
    stats = request_stats(RECORDS, window_s=WINDOW)
    targets = [parse_target(t) for t in ("ttft_ms_p99 <= 400", "output_tok_s >= 5")]
    result = evaluate(targets, stats, RECORDS, WINDOW)
    assert [c.value for c in result.checks] == [pytest.approx(372.5, rel=1e-12), 5.0]
    assert result.met is True
    assert result.goodput == 1.5


def test_unmeasured_figures_are_not_met() -> None:
    targets = [parse_target("ttft_ms_p99 <= 300"), parse_target("output_tok_s >= 1")]
    result = evaluate(targets, None, RECORDS, WINDOW)
    assert result.checks == [
        SloCheck(target="ttft_ms_p99 <= 300", value=None, met=False),
        SloCheck(target="output_tok_s >= 1", value=None, met=False),
    ]
    assert result.met is False


@pytest.mark.parametrize(
    ("records", "window", "goodput", "fraction"),
    [
        ([], WINDOW, None, None),  # nothing measured
        (RECORDS[4:], WINDOW, None, None),  # only warm-up
        (RECORDS, 0.0, None, 0.75),  # no window: no rate, the fraction still holds
        (RECORDS[2:3], WINDOW, 0.0, 0.0),  # every measured request failed: measured as 0
        # an itl target on requests whose per-chunk tokens are unknown: unknown, not 0
        ([record([(0.125, 1), (0.25, 1)], method="chunk")], WINDOW, None, None),
    ],
)
def test_goodput_edges(
    records: list[RequestRecord], window: float, goodput: float | None, fraction: float | None
) -> None:
    targets = [parse_target("itl_ms_p99 <= 1000")]
    result = evaluate(targets, None, records, window)
    assert (result.goodput, result.goodput_fraction) == (goodput, fraction)
