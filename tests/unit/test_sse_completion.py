"""A request is completed only when the engine says so and its counts agree: the stream
parser fed hostile bytes (and real vLLM streams), each failure kind asserted with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.completion import Facts, judge
from orchestrator.remote.sse import StreamParser
from orchestrator.remote.wire import RequestFailure

STREAMS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_cpu"


def ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def tok(n: int, reason: object = None, text: str = "x") -> bytes:
    """A vLLM chat chunk with continuous usage: cumulative ``n`` tokens so far."""
    return ev(
        {
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": reason}],
            "usage": {"prompt_tokens": 4, "completion_tokens": n},
        }
    )


def usage(n: int) -> bytes:
    return ev({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n}})


DONE = b"data: [DONE]\n\n"


def parse(*reads: bytes, **kw: Any) -> dict[str, Any]:
    parser = StreamParser(**kw)
    for i, data in enumerate(reads):
        parser.feed(data, 0.1 * (i + 1))
    return {**parser.finish(), "reconciled": parser.reconciled}


def test_a_normal_stream_completes_and_is_reconciled():
    out = parse(tok(1), tok(2), tok(3, "stop"), usage(3), DONE, max_tokens=16)
    assert (out["failure"], out["error"], out["finish_reason"]) == (None, None, "stop")
    assert out["reconciled"] is True and out["output_tokens"] == 3


def test_abort_after_3_of_3000_tokens_is_aborted():
    out = parse(tok(1), tok(2), tok(3, "abort"), usage(3), DONE, max_tokens=3000, ignore_eos=True)
    assert out["failure"] is RequestFailure.ABORTED
    assert out["finish_reason"] == "abort"
    assert out["error"] == "the engine ended the request with finish_reason 'abort' after 3 tokens"
    assert out["reconciled"] is False


def test_a_stream_ended_without_finish_reason_is_no_finish():
    """A front-end whose engine died ends its streams with usage and [DONE], no finish."""
    out = parse(tok(1), tok(2), usage(2), DONE, max_tokens=3000)
    assert out["failure"] is RequestFailure.NO_FINISH
    assert out["error"] == "the stream ended without a finish_reason after 2 tokens"


def test_sse_error_event_mid_stream_fails_the_request():
    out = parse(tok(1), b'event: error\ndata: {"message": "engine dead"}\n\n', tok(2, "stop"), DONE)
    assert out["failure"] is RequestFailure.ERROR_EVENT
    assert "engine dead" in out["error"]
    assert out["chunks"] == [[0.1, 1]]  # nothing after the failure is kept


def test_error_event_split_from_its_data_across_reads():
    out = parse(tok(1), b"event: error\n", b'data: {"message": "x"}\n\n', DONE)
    assert out["failure"] is RequestFailure.ERROR_EVENT


def test_error_object_in_stream_fails_the_request():
    """vLLM's streaming error (EngineDeadError) and the older object: error shape."""
    for body in ({"error": {"message": "EngineCore died", "code": 500}}, {"object": "error"}):
        out = parse(tok(1), ev(body), DONE)
        assert out["failure"] is RequestFailure.ERROR_EVENT


def test_chunks_after_done_are_a_protocol_error_and_not_counted():
    out = parse(tok(1), tok(2), tok(3, "stop"), DONE, *[tok(3 + i) for i in range(1, 197)])
    assert out["failure"] is RequestFailure.PROTOCOL
    assert out["error"].startswith("bytes after [DONE]")
    assert out["output_tokens"] == 3 and len(out["chunks"]) == 3


def test_bytes_after_done_in_the_same_read():
    out = parse(tok(1, "stop") + DONE + tok(2))
    assert out["failure"] is RequestFailure.PROTOCOL


def test_blank_lines_after_done_are_fine():
    out = parse(tok(1, "stop") + DONE + b"\n\r\n")
    assert out["failure"] is None


def test_usage_beyond_max_tokens_is_a_token_count_mismatch():
    out = parse(tok(1), tok(2, "length"), usage(50000), DONE, max_tokens=16)
    assert out["failure"] is RequestFailure.TOKEN_COUNT_MISMATCH
    assert out["error"] == "usage.completion_tokens 50000 > max_tokens 16"


def test_a_chunk_claiming_a_billion_tokens_keeps_one_chunk():
    out = parse(tok(1), tok(10**9, "length"), DONE, max_tokens=16)
    assert out["failure"] is RequestFailure.TOKEN_COUNT_MISMATCH
    assert out["chunks"] == [[0.1, 1], [0.2, 10**9 - 1]]  # memory: one entry, not 1e9


def test_final_usage_disagreeing_with_the_chunks_is_a_mismatch():
    out = parse(tok(1), tok(2), tok(3, "stop"), usage(40), DONE, max_tokens=100)
    assert out["failure"] is RequestFailure.TOKEN_COUNT_MISMATCH
    assert out["error"] == "the chunks' usage adds up to 3, the final usage says 40"


def test_more_token_chunks_than_tokens_is_a_mismatch():
    chunk = ev({"choices": [{"delta": {"content": "a"}, "finish_reason": None}]})
    last = ev({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}]})
    out = parse(chunk, chunk, chunk, last, usage(2), DONE)
    assert out["failure"] is RequestFailure.TOKEN_COUNT_MISMATCH
    assert out["error"] == "4 token chunks but usage.completion_tokens 2"


def test_fewer_chunks_than_tokens_is_speculative_decoding_not_a_mismatch():
    chunk = ev({"choices": [{"delta": {"content": "abc"}, "finish_reason": None}]})
    last = ev({"choices": [{"delta": {"content": "abcd"}, "finish_reason": "length"}]})
    out = parse(chunk, last, usage(7), DONE, max_tokens=7, ignore_eos=True)
    assert (out["failure"], out["reconciled"], out["token_count_method"]) == (None, True, "chunk")


def test_usage_going_backwards_is_a_mismatch():
    out = parse(tok(5), tok(3), tok(6, "stop"), DONE)
    assert out["failure"] is RequestFailure.TOKEN_COUNT_MISMATCH


def test_ignore_eos_with_fewer_tokens_than_asked_is_short_output():
    out = parse(tok(1), tok(5, "stop"), usage(5), DONE, max_tokens=16, ignore_eos=True)
    assert out["failure"] is RequestFailure.SHORT_OUTPUT
    assert out["error"] == "ignore_eos: 5 of the 16 tokens asked for (finish_reason 'stop')"
    # without ignore_eos, an early stop is a completion
    assert parse(tok(1), tok(5, "stop"), usage(5), DONE, max_tokens=16)["failure"] is None


@pytest.mark.parametrize(
    ("reason", "failure"),
    [({"type": "length", "length": 2}, None), ({"type": "abort"}, RequestFailure.ABORTED)],
)
def test_sglang_finish_reason_objects(reason: object, failure: object):
    out = parse(tok(1), tok(2, reason), DONE, max_tokens=2)
    assert out["failure"] is failure
    assert out["finish_reason"] == reason["type"]  # type: ignore[index]


def test_no_done_is_protocol_and_no_tokens_is_no_output():
    assert parse(tok(1, "stop"))["failure"] is RequestFailure.PROTOCOL
    empty = ev({"choices": [{"delta": {"content": ""}, "finish_reason": "stop"}]})
    assert parse(empty, DONE)["failure"] is RequestFailure.NO_OUTPUT


@pytest.mark.parametrize(
    "data",
    [
        b"data: {not json\n\n",
        b"data: [1, 2]\n\n",
        b'data: {"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":'
        + b"9" * 5000
        + b"}}\n\n",
    ],
)
def test_unparseable_or_absurd_data_is_a_protocol_error(data: bytes):
    out = parse(tok(1), data, tok(2, "stop"), DONE)
    assert out["failure"] is RequestFailure.PROTOCOL


def test_an_endless_line_is_refused_without_keeping_it():
    parser = StreamParser()
    for _ in range(40):
        parser.feed(b"x" * 65536, 0.1)
    out = parser.finish()
    assert out["failure"] is RequestFailure.PROTOCOL
    assert len(parser._buffer) == 0


def test_the_callers_failure_wins():
    out = StreamParser().finish(error="timed out after 5 s", failure=RequestFailure.TIMEOUT)
    assert (out["failure"], out["error"]) == (RequestFailure.TIMEOUT, "timed out after 5 s")


def test_tokenizer_counts_have_a_tolerance():
    def facts(counted: int, usage: int) -> Facts:
        return Facts("stop", True, 3, counted, usage, "tokenizer", False, None, False)

    assert judge(facts(20, 12)).failure is None  # 2 x 12 + 8 = 32 >= 20
    assert judge(facts(33, 12)).failure is RequestFailure.TOKEN_COUNT_MISMATCH
    assert judge(facts(3, 12)).failure is None  # 12 / 2 - 8 < 3
    assert judge(facts(3, 40)).failure is RequestFailure.TOKEN_COUNT_MISMATCH


def _real(name: str, **kw: Any) -> dict[str, Any]:
    data = (STREAMS / name).read_bytes()
    parser = StreamParser(**kw)
    for i in range(0, len(data), 700):  # reads cut anywhere
        parser.feed(data[i : i + 700], i / 1e5)
    return {**parser.finish(), "reconciled": parser.reconciled}


def test_real_vllm_stream_completes():
    out = _real("normal_length16.sse", max_tokens=16, ignore_eos=True)
    assert (out["failure"], out["finish_reason"], out["output_tokens"]) == (None, "length", 16)
    assert out["reconciled"] is True


def test_real_vllm_stream_aborted_by_sigterm_is_failed():
    out = _real("sigterm_abort.sse", max_tokens=500)
    assert out["failure"] is RequestFailure.ABORTED
    assert out["finish_reason"] == "abort"


def test_real_vllm_stream_cut_by_a_hung_shutdown_is_failed():
    out = _real("sigterm_hung.sse", max_tokens=500)
    assert out["failure"] is RequestFailure.NO_FINISH
