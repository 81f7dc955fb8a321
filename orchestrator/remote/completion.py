"""When a streamed request counts as completed: what the engine said and whether its counts agree.

A stream that ends is not a request that completed: an engine that aborts a request (vLLM's
shutdown, a front-end whose engine died) still ends the stream properly, and a server can claim
any token count it likes. So a request is completed only when the engine said so and the
tokens the client received agree with what the server reports (MLPerf's TEST06 checks the
former, TEST09 the latter). Pure and standard library only: the parser feeds it the facts.

Rules, in the order they are applied (the first that fails names the request's failure):

- ``finish_reason`` must be a completion (``COMPLETED``: ``stop``, ``length``, or a tool call);
  any other (``abort``, ``error``...) is ``aborted``, none at all ``no_finish``;
- the stream must end with ``[DONE]`` (``protocol`` otherwise) and carry a token (``no_output``);
- token counts (``token_count_mismatch``): every token chunk carries at least one token, so
  chunks <= tokens; tokens <= ``max_tokens``; with ``usage`` counting the client's sum of the
  per-chunk deltas equals the final ``usage.completion_tokens`` and never went backwards; with
  a tokenizer count it is within a factor ``TOKENIZER_FACTOR`` of it, plus ``TOKENIZER_SLACK``
  (a chunk's text tokenized alone can split differently, above all at byte fragments);
- with ``ignore_eos`` and ``max_tokens``, the request produced ``max_tokens`` tokens
  (``short_output``); without a reported usage the engine's ``length`` says it did.

A completed request whose usage was reported and checked is *reconciled*.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from .wire import RequestFailure

COMPLETED = ("stop", "length", "tool_calls", "function_call")
TOKENIZER_FACTOR = 2.0
TOKENIZER_SLACK = 8


class Facts(NamedTuple):
    """What one stream showed; ``usage`` is the last ``usage.completion_tokens`` (None: none)."""

    finish_reason: Optional[str]
    done: bool
    chunks: int  # token chunks
    counted: int  # tokens the client counted over those chunks
    usage: Optional[int]
    method: Optional[str]  # the weakest counting method: "usage" | "tokenizer" | "chunk"
    backwards: bool  # a cumulative usage went down
    max_tokens: Optional[int]
    ignore_eos: bool


class Verdict(NamedTuple):
    failure: Optional[RequestFailure]
    error: Optional[str]
    reconciled: bool


def judge(f: Facts) -> Verdict:
    """The verdict on one stream that ended without a transport or stream-level failure."""
    if f.finish_reason is not None and f.finish_reason not in COMPLETED:
        return _failed(
            RequestFailure.ABORTED,
            f"the engine ended the request with finish_reason {f.finish_reason!r} after "
            f"{_tokens(f)} tokens",
        )
    if f.finish_reason is None:
        return _failed(
            RequestFailure.NO_FINISH,
            f"the stream ended without a finish_reason after {_tokens(f)} tokens",
        )
    if not f.done:
        return _failed(RequestFailure.PROTOCOL, "stream ended before [DONE]")
    if not f.chunks:
        return _failed(RequestFailure.NO_OUTPUT, "response carried no output tokens")
    mismatch = count_mismatch(f)
    if mismatch is not None:
        return _failed(RequestFailure.TOKEN_COUNT_MISMATCH, mismatch)
    if f.ignore_eos and f.max_tokens is not None:
        if f.usage is not None and f.usage < f.max_tokens:
            return _failed(
                RequestFailure.SHORT_OUTPUT,
                f"ignore_eos: {f.usage} of the {f.max_tokens} tokens asked for "
                f"(finish_reason {f.finish_reason!r})",
            )
        if f.usage is None and f.finish_reason != "length":
            return _failed(
                RequestFailure.SHORT_OUTPUT,
                f"ignore_eos: finish_reason {f.finish_reason!r}, not 'length', with "
                f"max_tokens {f.max_tokens}",
            )
    return Verdict(None, None, f.usage is not None)


def count_mismatch(f: Facts) -> Optional[str]:
    """Why the counts cannot all be true, or None when they agree."""
    tokens = f.usage if f.usage is not None else f.counted
    exact = f.usage is not None or f.method != "tokenizer"  # a tokenizer may count over
    if f.max_tokens is not None and exact and tokens > f.max_tokens:
        said = "usage.completion_tokens" if f.usage is not None else "the client counted"
        return f"{said} {tokens} > max_tokens {f.max_tokens}"
    if f.max_tokens is not None and f.chunks > f.max_tokens:
        return f"{f.chunks} token chunks > max_tokens {f.max_tokens}"
    if f.backwards:
        return "usage.completion_tokens went down during the stream"
    if f.usage is None:
        return None
    if f.chunks > f.usage:
        return f"{f.chunks} token chunks but usage.completion_tokens {f.usage}"
    if f.method == "usage" and f.counted != f.usage:
        return f"the chunks' usage adds up to {f.counted}, the final usage says {f.usage}"
    if f.method == "tokenizer" and not (
        f.usage / TOKENIZER_FACTOR - TOKENIZER_SLACK
        <= f.counted
        <= f.usage * TOKENIZER_FACTOR + TOKENIZER_SLACK
    ):
        return f"the tokenizer counted {f.counted} tokens, usage.completion_tokens {f.usage}"
    return None


def _tokens(f: Facts) -> int:
    return f.usage if f.usage is not None else f.counted


def _failed(kind: RequestFailure, message: str) -> Verdict:
    return Verdict(kind, message, False)
