"""The SSE parser's fast path (``sse.quick_usage``) on chunk bytes of every shape it may meet,
and the parser reaching the very same record with and without it."""

from __future__ import annotations

import json

import pytest

from orchestrator.remote import sse
from orchestrator.remote.sse import StreamParser, quick_usage

ABSENT = object()


def chunk(content: object = "hi", usage: object = "default", **extra: object) -> bytes:
    """A vLLM-style chat chunk as the server writes it (compact JSON); ``usage=ABSENT``: none."""
    obj: dict = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    if usage == "default":
        obj["usage"] = {"prompt_tokens": 20, "total_tokens": 25, "completion_tokens": 5}
    elif usage is not ABSENT:
        obj["usage"] = usage
    obj.update(extra)
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (chunk(), (True, 5, 20)),
        # the usage-only chunk after the last token: no choices
        (chunk(usage={"prompt_tokens": 20, "completion_tokens": 11}, choices=[]), (False, 11, 20)),
        # spaced JSON (json.dumps defaults), keys in another order, no prompt_tokens
        (
            json.dumps({"usage": {"completion_tokens": 3}, "choices": [{"text": "x"}]}).encode(),
            (True, 3, None),
        ),
        (json.dumps({"choices": [], "usage": {"completion_tokens": 3}}).encode(), (False, 3, None)),
        # text the model wrote that looks like the keys: escaped quotes cannot match
        (chunk(content='say "usage": {"completion_tokens": 99} and "error"'), (True, 5, 20)),
        (chunk(content='"usage": {"completion_tokens": 99}'), (True, 5, 20)),
        # several choices (n > 1): usage counts them all
        (
            chunk(choices=[{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {}}]),
            (True, 5, 20),
        ),
        # the full decode: usage null or absent, nested details, non-integer counts
        (chunk(usage=None), None),
        (chunk(usage=ABSENT), None),
        (
            chunk(usage={"completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}}),
            None,
        ),
        (chunk(usage={"completion_tokens": 5.0}), None),
        (chunk(usage={"prompt_tokens": 20}), None),
        # errors: as a key, as the object's kind
        (
            b'{"error":{"message":"boom","code":500},"usage":{"completion_tokens":1},"choices":[]}',
            None,
        ),
        (b'{"object":"error","message":"x","usage":{"completion_tokens":1},"choices":[]}', None),
        # the text is exactly a key's name: "usage" counted twice, so the full decode
        (chunk(content="usage"), None),
        (chunk(content="choices"), (True, 5, 20)),  # never followed by ':', so never a key
        # no choices key at all, choices null
        (b'{"usage":{"completion_tokens":4}}', None),
        (b'{"choices":null,"usage":{"completion_tokens":4}}', None),
    ],
)
def test_quick_usage(payload: bytes, expected: object):
    assert quick_usage(payload) == expected


def test_escaped_text_is_not_read_as_keys():
    """Text that spells the keys counts from the real usage, not from the 99 in the text."""
    parser = StreamParser()
    parser.feed(b"data: " + chunk(content='say "usage": {"completion_tokens": 99}') + b"\n\n", 1.0)
    assert (parser.chunks, parser.output_tokens) == ([(1.0, 5)], 5)


def events() -> list[bytes]:
    """Every shape a stream has: a role chunk (0 tokens), tokens with quotes and backslashes,
    an empty delta that still adds tokens, reasoning text with the finish_reason, and the
    usage-only chunk."""
    out = [chunk(content="", usage={"prompt_tokens": 7, "total_tokens": 7, "completion_tokens": 0})]
    for n, text in enumerate(['The "quoted"', " and \\ back", "", " end"], start=1):
        out.append(chunk(content=text, usage={"prompt_tokens": 7, "completion_tokens": 2 * n}))
    out.append(
        json.dumps(
            {
                "choices": [
                    {"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 7, "completion_tokens": 9},
            }
        ).encode()
    )
    out.append(chunk(usage={"prompt_tokens": 7, "completion_tokens": 9}, choices=[]))
    # both line ends servers use: LF (vLLM), CRLF (sse-starlette)
    return [b"data: " + e + (b"\n\n" if i % 2 else b"\r\n\r\n") for i, e in enumerate(out)]


def reads() -> list[tuple[float, bytes]]:
    """The events as reads at 1/8 s steps; the first token chunk is cut across two reads."""
    e = events()
    return [
        (0.125, e[0] + e[1][:30]),
        (0.25, e[1][30:]),
        (0.375, e[2]),
        (0.5, e[3]),
        (0.625, e[4]),
        (0.75, e[5]),
        (0.875, e[6] + b": ping\n\ndata: [DONE]\n\n"),
    ]


def test_the_fast_path_changes_nothing(monkeypatch: pytest.MonkeyPatch):
    def record() -> dict:
        parser = StreamParser()
        for t, data in reads():
            parser.feed(data, t)
        return parser.finish(start=0.0625)

    fast = record()
    assert fast == {
        "ttft": 0.1875,
        "e2el": 0.6875,
        "chunks": [[0.1875, 2], [0.3125, 2], [0.4375, 2], [0.5625, 2], [0.6875, 1]],
        "output_tokens": 9,
        "usage_reported": True,
        "prompt_tokens": 7,
        "token_count_method": "usage",
        "finish_reason": "stop",
        "failure": None,
        "error": None,
    }
    taken = []
    monkeypatch.setattr(sse, "quick_usage", lambda payload: taken.append(payload))
    assert record() == fast  # every chunk through the full decode: the same record
    assert len(taken) == 7
