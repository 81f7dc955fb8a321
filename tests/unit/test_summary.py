"""Summary metric math: scripted-clock identities, percentiles, and the aggregate numbers.

Times are multiples of 1/64 s so every sum and difference below is exact in binary floating
point and can be compared with ``==``.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from orchestrator.loadgen.records import Chunk, RequestFailure, RequestRecord
from orchestrator.metrics.summary import (
    ClientLag,
    LagStats,
    RequestStats,
    Stats,
    chunk_steps,
    percentile,
    request_stats,
)
from orchestrator.remote.loadgen import StreamParser


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat_chunk(content: str | None, completion: int | None, *, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    obj: dict = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if completion is not None:
        obj["usage"] = {
            "prompt_tokens": 20,
            "completion_tokens": completion,
            "total_tokens": 20 + completion,
        }
    return sse(obj)


USAGE_ONLY = sse(
    {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": 11},
    }
)

# (arrival time, bytes): a DFlash-like stream with per-chunk usage; the usage-only chunk and
# [DONE] come well after the last token and must not count.
SCRIPT = [
    (
        0.0625,
        sse(
            {
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 0},
            }
        ),
    ),
    (0.125, chat_chunk("The", 1)),
    (0.1875, chat_chunk(" answer is", 5)),
    (0.3125, chat_chunk(" forty", 7)),
    (0.375, chat_chunk(" two, of course.", 11)),
    (0.4375, chat_chunk(None, 11, finish="length")),
    (0.5, USAGE_ONLY),
    (0.5625, b"data: [DONE]\n\n"),
]


def scripted_record(
    script=SCRIPT, *, index: int = 0, start: float = 1.0, count_text=None, split: bool = True
) -> RequestRecord:
    parser = StreamParser(count_text)
    for t, data in script:
        if split:  # a line cut across two network reads is parsed once complete
            parser.feed(data[:7], t)
            parser.feed(data[7:], t)
        else:
            parser.feed(data, t)
    fields = parser.finish()
    wire = {
        "index": index,
        "warmup": False,
        "due": start,
        "start": start,
        "start_wall": 1e9 + start,
        "end": start + script[-1][0],
        "status": 200,
        **fields,
    }
    return RequestRecord.from_json(json.loads(json.dumps(wire)))


def test_scripted_clock_identities():
    r = scripted_record()
    assert r.ok
    assert r.token_count_method == "usage"
    assert [(c.t, c.tokens) for c in r.chunks] == [(0.125, 1), (0.1875, 4), (0.3125, 2), (0.375, 4)]
    assert r.ttft == 0.125
    assert r.e2el == 0.375  # the last token chunk, not the finish/usage chunk or [DONE]
    gaps = [b.t - a.t for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    assert gaps == [0.0625, 0.125, 0.0625]
    assert r.e2el - r.ttft == sum(gaps) == 0.25
    assert r.output_tokens == 11 and r.prompt_tokens == 20
    assert sum(c.tokens for c in r.chunks) == r.output_tokens
    assert chunk_steps(r) == (6, 2)  # ended at max_tokens: its last step (4 tokens) was cut

    s = request_stats([r], window_s=0.5)
    assert s.completed == 1 and s.failed == 0
    assert s.decode_tok_s.median == 40.0  # (11 - 1) / 0.25
    assert s.ttft_ms.median == 125.0
    assert s.e2el_ms.median == 375.0
    assert s.tpot_ms.mean == pytest.approx(25.0, rel=1e-12)  # 0.25 / 10
    assert sorted(s.itl_chunk_ms.__dict__[k] for k in ("min", "max")) == [62.5, 125.0]
    assert s.itl_chunk_ms.mean == pytest.approx(250 / 3, rel=1e-12)
    # per token: 4 x 15.625, 2 x 62.5, 4 x 15.625 -> mean 250/10, median 15.625
    assert s.itl_token_ms.n == 10
    assert s.itl_token_ms.mean == pytest.approx(25.0, rel=1e-12)
    assert s.itl_token_ms.median == 15.625
    assert s.itl_token_ms.max == 62.5
    assert s.tokens_per_chunk == 6 / 2  # the cut last step left out
    assert s.output_throughput == 22.0  # 11 tokens / 0.5 s
    assert s.request_throughput == 2.0


def test_stream_without_per_chunk_usage_counts_one_per_chunk_and_uses_final_usage():
    script = [
        (t, chat_chunk(text, None, finish=finish))
        for t, text, finish in (
            (0.125, "The", None),
            (0.25, " answer is", None),
            (0.5, " 42", "stop"),
        )
    ]
    script += [
        (0.625, sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})),
        (0.6875, b"data: [DONE]\n\n"),
    ]
    r = scripted_record(script)
    assert r.token_count_method == "chunk"
    assert [c.tokens for c in r.chunks] == [1, 1, 1]
    assert r.output_tokens == 7 and r.e2el == 0.5
    assert chunk_steps(r) == (6, 2)  # usage total minus the first token, over two steps
    s = request_stats([r])
    assert s.tokens_per_chunk == 3.0
    assert s.itl_token_ms.n == 0 and s.itl_token_ms.mean is None  # per-chunk counts unknown
    assert s.itl_chunk_ms.n == 2
    assert s.token_count_method == "chunk"


def test_tokenizer_counting_is_used_when_usage_is_per_response_only():
    script = [
        (0.125, chat_chunk("a b", None)),
        (0.25, chat_chunk(" c d e", None, finish="stop")),
        (0.3125, sse({"choices": [], "usage": {"completion_tokens": 5}})),
        (0.375, b"data: [DONE]\n\n"),
    ]
    r = scripted_record(script, count_text=lambda text: len(text.split()))
    assert r.token_count_method == "tokenizer"
    assert [(c.t, c.tokens) for c in r.chunks] == [(0.125, 2), (0.25, 3)]
    assert request_stats([r]).itl_token_ms.n == 3


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ([(0.125, chat_chunk("x", 1, finish="stop"))], "stream ended before [DONE]"),
        ([(0.125, chat_chunk("x", 1))], "the stream ended without a finish_reason"),
        (
            [(0.125, chat_chunk("", 0, finish="stop")), (0.25, b"data: [DONE]\n\n")],
            "response carried no output tokens",
        ),
        (
            [(0.125, chat_chunk("x", 1)), (0.25, sse({"error": {"message": "boom"}}))],
            "server error in stream: boom",
        ),
        ([(0.125, b"data: {not json\n\n")], "unparseable SSE data"),
    ],
)
def test_broken_streams_are_failures(script, error):
    parser = StreamParser()
    for t, data in script:
        parser.feed(data, t)
    fields = parser.finish()
    assert fields["error"].startswith(error)


def test_completions_stream_text_and_keepalive_comments():
    parser = StreamParser()
    for t, data in [
        (0.125, b": keep-alive\n\n"),
        (
            0.25,
            sse(
                {
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": "Hi"}],
                    "usage": {"completion_tokens": 3},
                }
            ),
        ),
        (
            0.375,
            sse(
                {
                    "choices": [{"index": 0, "text": " there", "finish_reason": "length"}],
                    "usage": {"completion_tokens": 6},
                }
            ),
        ),
        (0.5, b"data: [DONE]\n\n"),
    ]:
        parser.feed(data, t)
    fields = parser.finish()
    assert fields["error"] is None
    assert fields["chunks"] == [[0.25, 3], [0.375, 3]]
    assert fields["ttft"] == 0.25 and fields["e2el"] == 0.375


PERCENTILES = [
    ([5.0], {0: 5.0, 50: 5.0, 99: 5.0}),
    ([1.0, 2.0, 3.0, 4.0], {0: 1.0, 10: 1.3, 50: 2.5, 90: 3.7, 99: 3.97, 100: 4.0}),
    ([10.0, 0.0, 30.0, 20.0, 40.0], {25: 10.0, 50: 20.0, 90: 36.0, 99: 39.6}),
]


@pytest.mark.parametrize(("values", "expected"), PERCENTILES)
def test_percentile_table(values, expected):
    for p, want in expected.items():
        assert percentile(values, p) == pytest.approx(want, abs=1e-12)
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-12)


def test_percentile_edges():
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert Stats.of([]) == Stats()
    s = Stats.of([4.0, 1.0, 3.0, 2.0])
    assert (s.n, s.mean, s.median, s.p10, s.p90, s.min, s.max) == (4, 2.5, 2.5, 1.3, 3.7, 1.0, 4.0)
    # population standard deviation, as numpy's np.std and vllm bench serve: sqrt(5/4)
    assert s.std == pytest.approx(np.std([4.0, 1.0, 3.0, 2.0]), rel=1e-15)
    assert s.std == pytest.approx(1.25**0.5, rel=1e-15)
    assert Stats.of([7.0]).std == 0.0


def rec(
    index: int,
    *,
    start: float,
    chunks: list[tuple[float, int]],
    out: int | None = None,
    warmup: bool = False,
    status: int = 200,
    error: str | None = None,
    due: float | None = None,
) -> RequestRecord:
    cs = tuple(Chunk(t, n) for t, n in chunks)
    return RequestRecord(
        index=index,
        warmup=warmup,
        start=start,
        start_wall=1e9 + start,
        end=start + (chunks[-1][0] if chunks else 0.0) + 0.0625,
        due=start if due is None else due,
        status=status,
        ttft=cs[0].t if cs else None,
        e2el=cs[-1].t if cs else None,
        chunks=cs,
        output_tokens=sum(n for _, n in chunks) if out is None else out,
        prompt_tokens=10,
        token_count_method="usage" if cs else None,
        error=error,
    )


def test_summary_over_several_requests_excludes_warmup_and_counts_failures():
    records = [
        rec(0, start=0.0, chunks=[(0.5, 1), (0.75, 8)], warmup=True),  # ignored entirely
        rec(1, start=1.0, chunks=[(0.25, 1), (0.5, 2), (0.75, 2)]),  # 4 tokens after 0.5 s
        rec(2, start=1.5, chunks=[(0.125, 1), (0.25, 3), (0.375, 5), (0.5, 3)]),  # 11 after 0.375 s
        rec(3, start=2.0, chunks=[], status=500, error="HTTP 500: oops"),
        rec(4, start=2.25, chunks=[(0.25, 1)], error="stream ended before [DONE]"),
    ]
    s = request_stats(records)
    assert (s.completed, s.failed) == (2, 2)
    assert s.duration_s == (2.25 + 0.25 + 0.0625) - 1.0  # first sent -> last ended (a failure)
    assert s.total_output_tokens == 5 + 12
    assert s.output_throughput == 17 / s.duration_s
    assert s.decode_tok_s.n == 2
    assert sorted([s.decode_tok_s.min, s.decode_tok_s.max]) == [8.0, 11 / 0.375]
    assert s.decode_tok_s.median == (8.0 + 11 / 0.375) / 2
    assert s.ttft_ms.mean == pytest.approx(187.5, rel=1e-12)
    assert s.itl_chunk_ms.n == 2 + 3
    assert s.itl_token_ms.n == 4 + 11
    assert s.tokens_per_chunk == 15 / 5  # sum of tokens after the first chunk / sum of steps
    assert s.tokens_per_chunk_request_mean == (2.0 + 11 / 3) / 2
    assert s.client_lag.send_lag_ms == LagStats(p50=0.0, p99=0.0, max=0.0)
    assert s.client_lag.loop_delay_ms is None
    again = RequestStats.model_validate(json.loads(json.dumps(s.model_dump(mode="json"))))
    assert again == s and again.decode_tok_s.n == 2


def test_send_lag_and_loop_delay_are_reported():
    records = [
        rec(i, start=float(i), due=float(i) - lag, chunks=[(0.25, 1), (0.5, 1)])
        for i, lag in enumerate([0.0, 0.0625, 0.125, 0.25])
    ]
    s = request_stats(records, window_s=4.0, loop_delay_ms=LagStats(p50=0.5, p99=3.0, max=9.0))
    assert s.client_lag.send_lag_ms.max == 250.0
    assert s.client_lag.send_lag_ms.p50 == pytest.approx(93.75, rel=1e-12)
    assert s.client_lag.loop_delay_ms == LagStats(p50=0.5, p99=3.0, max=9.0)
    assert isinstance(s.client_lag, ClientLag)


def test_empty_run():
    s = request_stats([])
    assert (s.completed, s.failed, s.duration_s, s.output_throughput) == (0, 0, 0.0, None)
    assert s.tokens_per_chunk is None and s.decode_tok_s.median is None


def test_record_json_round_trip():
    r = scripted_record()
    assert RequestRecord.from_json(json.loads(json.dumps(r.to_json()))) == r
    # the wire contract is strict: an unknown key is an error, not silently dropped
    with pytest.raises(ValueError, match="RequestRecord: unknown field 'new_field'"):
        RequestRecord.from_json({**r.to_json(), "new_field": 1})


def test_per_token_itl_costs_memory_per_chunk_not_per_claimed_token():
    """A chunk claiming a billion tokens is one weighted value, with the expanded list's
    figures: the statistics of ten values 1..10 repeated k times each match numpy's."""
    s = request_stats([rec(0, start=0.0, chunks=[(0.25, 1), (0.5, 10**9)])])
    assert s.itl_token_ms.n == 10**9
    assert s.itl_token_ms.median == pytest.approx(0.25 / 10**9 * 1000.0)
    pairs = [(float(v), v % 4 + 1) for v in range(1, 11)]
    expanded = np.repeat([v for v, _ in pairs], [k for _, k in pairs])
    w = Stats.weighted(pairs)
    assert w.n == len(expanded) and w.mean == pytest.approx(float(np.mean(expanded)))
    for p, got in ((10, w.p10), (50, w.median), (90, w.p90), (99, w.p99)):
        assert got == pytest.approx(float(np.percentile(expanded, p)), abs=1e-12)
    assert w.std == pytest.approx(float(np.std(expanded)))


def test_a_failed_request_enters_no_statistic():
    good = rec(0, start=0.0, chunks=[(0.25, 1), (0.5, 3)])
    aborted = dataclasses.replace(
        rec(1, start=0.0, chunks=[(0.01, 1), (0.02, 2)]),
        finish_reason="abort",
        failure=RequestFailure.ABORTED,
    )
    s = request_stats([good, aborted])
    assert (s.completed, s.failed, s.total_output_tokens) == (1, 1, 4)
    assert (s.ttft_ms.n, s.ttft_ms.max, s.itl_chunk_ms.n) == (1, 250.0, 1)


def test_a_request_that_ended_for_another_reason_keeps_its_last_step() -> None:
    """Only ``length`` cuts the last step short: a stop (EOS) ends on a whole step."""
    script = [*SCRIPT[:5], (0.4375, chat_chunk(None, 11, finish="stop")), *SCRIPT[6:]]
    r = scripted_record(script)
    assert r.finish_reason == "stop"
    assert chunk_steps(r) == (10, 3)
