"""Server-sent events of one streamed OpenAI-compatible response, parsed into a request record.

Pure and standard library only (the caller supplies the arrival time of each piece of bytes),
so the latency and token-count identities are pinned by unit tests with scripted times while
``loadgen`` does the I/O. How tokens per chunk are counted (``usage``, ``tokenizer``, ``chunk``)
is described in ``loadgen``'s docstring, which is the verb's contract.

Cost per chunk matters: at 1,024 streams the client parses thousands of chunks a second on one
core. A chunk with per-chunk usage (the common case: vLLM and SGLang asked for
``continuous_usage_stats``) is read without decoding its JSON (``quick_usage``); anything else
(no usage, an error, nested or repeated keys) takes the full decode, with ``orjson`` when the
host has it.
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from .completion import Facts, judge
from .wire import RequestFailure


def _json_parser() -> Tuple[Callable[[bytes], Any], str]:
    """orjson's loads when the host has it (several times faster), else the standard one."""
    try:
        module = importlib.import_module("orjson")
    except ImportError:
        return json.loads, "json"
    return module.loads, "orjson"


loads, JSON_PARSER = _json_parser()
MAX_LINE = 1 << 20  # an SSE line (one chunk's JSON) longer than this is not a completion chunk

# A JSON string cannot hold an unescaped quote, so '"usage"' or '"error"' in a chunk's bytes is a
# key or a value, never text the model wrote ('"' inside text is always '\"').
_USAGE = re.compile(rb'"usage"\s*:\s*\{([^{}]*)\}')
# at most 15 digits: a longer number takes the full decode, whose checks refuse it
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,15})\s*[,}]')
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d{1,15})\s*[,}]')
_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*(\]?)')


def quick_usage(payload: bytes) -> Optional[Tuple[bool, int, Optional[int]]]:
    """(choices non-empty, usage.completion_tokens, usage.prompt_tokens) of one chunk, read from
    its bytes; None when the chunk needs the full decode.

    Only for the plain shape: one flat ``usage`` object holding ``completion_tokens``, a
    ``choices`` array, no ``error``, no finish_reason but null. The tokens a chunk adds then come from the cumulative
    usage alone, so its text need not be decoded. A key is a string followed by ``:``, which
    no string value is, so ``"choices":[`` cannot be the model's text.
    """
    if b'"error"' in payload or payload.count(b'"usage"') != 1:
        return None
    if payload.count(b'"finish_reason":null') != payload.count(b'"finish_reason"'):
        return None  # the last chunk: its finish_reason is read by the full decode
    usage = _USAGE.search(payload)
    if usage is None:
        return None
    fields = usage.group(1) + b"}"
    completion = _COMPLETION.search(fields)
    if completion is None:
        return None
    if b'"choices":[]' in payload:
        has_choices = False
    elif b'"choices":[{' in payload:
        has_choices = True
    else:  # spaced out: the general pattern
        choices = _CHOICES.search(payload)
        if choices is None:
            return None
        has_choices = not choices.group(1)
    prompt = _PROMPT.search(fields)
    return (
        has_choices,
        int(completion.group(1)),
        int(prompt.group(1)) if prompt is not None else None,
    )


def _choice_text(choice: Dict[str, Any]) -> str:
    """Generated text of one streamed choice: completions ``text`` or chat delta parts.

    Reasoning parsers move thinking tokens out of ``content`` (vLLM ``reasoning_content``,
    newer ``reasoning``), and those tokens are output tokens too.
    """
    text = choice.get("text")
    if isinstance(text, str):
        return text
    delta = choice.get("delta") or {}
    parts = [delta.get(key) for key in ("content", "reasoning_content", "reasoning")]
    return "".join(p for p in parts if isinstance(p, str))


def finish_reason(choice: Dict[str, Any]) -> Optional[str]:
    """A choice's ``finish_reason``: a string (vLLM, OpenAI) or SGLang's ``{"type": ...}``."""
    reason = choice.get("finish_reason")
    if isinstance(reason, dict):
        reason = reason.get("type")
    return reason if isinstance(reason, str) and reason else None


class StreamParser:
    """Turns the bytes of one SSE response, each with its arrival time, into a record.

    Pure (the caller supplies the clock), so the metric identities can be pinned with
    scripted times. A chunk is a *token chunk* when it adds output tokens; only token chunks
    are kept, so the trailing usage-only chunk and ``[DONE]`` never extend the latency.
    Whether the request completed is ``completion.judge``'s; the stream-level failures are
    found here: an ``event: error`` or error object, unparseable data, bytes after ``[DONE]``.
    Once failed, nothing more is parsed or kept, so a hostile stream costs no more memory
    than the chunks it sent before.
    """

    def __init__(
        self,
        count_text: Optional[Callable[[str], int]] = None,
        *,
        max_tokens: Optional[int] = None,
        ignore_eos: bool = False,
    ) -> None:
        self.count_text = count_text
        self.max_tokens, self.ignore_eos = max_tokens, ignore_eos
        self.chunks: List[Tuple[float, int]] = []  # (arrival time, tokens)
        self.counted = 0
        self.output_tokens: Optional[int] = None
        self.prompt_tokens: Optional[int] = None
        self.methods: Dict[str, int] = {}
        self.finish_reason: Optional[str] = None
        self.done = False
        self.backwards = False
        self.error: Optional[str] = None
        self.failure: Optional[RequestFailure] = None
        self.reconciled = False  # set by ``finish``: completed, counts checked against usage
        self._event = b""  # the pending "event:" name of the event being read
        self._buffer = b""

    def feed(self, data: bytes, t: float) -> None:
        """Bytes that arrived at ``t``; complete lines are parsed now, the rest is kept."""
        if self.failure is not None:
            return
        if self._buffer:
            data, self._buffer = self._buffer + data, b""
        elif (  # the usual read: exactly one event
            not self.done
            and not self._event
            and data.startswith(b"data:")
            and data.endswith(b"\n\n")
            and data.find(b"\n") == len(data) - 2
        ):
            self._data(data[5:-2].strip(), t)
            return
        lines = data.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > MAX_LINE:
            self._fail(RequestFailure.PROTOCOL, f"an SSE line of over {MAX_LINE} bytes")
            return
        for line in lines:
            self._line(line, t)
            if self.failure is not None:
                return

    def _line(self, line: bytes, t: float) -> None:
        if not line.startswith(b"data:"):
            line = line.strip()  # blank separators, ": keep-alive" comments, "event:"...
        if self.done:
            if line:
                self._fail(RequestFailure.PROTOCOL, f"bytes after [DONE]: {line[:200]!r}")
            return
        if not line:
            self._event = b""  # an event ends at a blank line
        elif line.startswith(b"event:"):
            self._event = line[6:].strip()
        elif line.startswith(b"data:"):
            self._data(line[5:].strip(), t)

    def _data(self, payload: bytes, t: float) -> None:
        if self._event == b"error":
            self._fail(
                RequestFailure.ERROR_EVENT, f"server error event in stream: {payload[:300]!r}"
            )
            return
        if self._event not in (b"", b"message"):
            return  # another named event (a proxy's ping): not a completion chunk
        if payload == b"[DONE]":
            self.done = True
            return
        quick = quick_usage(payload)
        if quick is not None:
            has_choices, completion, prompt = quick
            self._usage(completion)
            if prompt is not None:
                self.prompt_tokens = prompt
            if has_choices:
                self._count(completion - self.counted, "usage", t)
            return
        try:
            obj = loads(payload)
        except ValueError:  # orjson's JSONDecodeError is one too; so is a number too long
            self._fail(RequestFailure.PROTOCOL, f"unparseable SSE data: {payload[:200]!r}")
            return
        if isinstance(obj, dict):
            self._event_obj(obj, t)
        else:
            self._fail(RequestFailure.PROTOCOL, f"SSE data is not an object: {payload[:200]!r}")

    def _event_obj(self, obj: Dict[str, Any], t: float) -> None:
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            message = err.get("message") if isinstance(err, dict) else err
            self._fail(RequestFailure.ERROR_EVENT, f"server error in stream: {message}")
            return
        usage = obj.get("usage")
        completion = None
        if isinstance(usage, dict):
            completion = _count_value(usage.get("completion_tokens"))
            if completion is not None:
                self._usage(completion)
            prompt = _count_value(usage.get("prompt_tokens"))
            if prompt is not None:
                self.prompt_tokens = prompt
        choices = obj.get("choices") or []
        if not isinstance(choices, list) or not choices:
            return  # the usage-only chunk after the last token
        choices = [c for c in choices if isinstance(c, dict)]
        for choice in choices:
            self.finish_reason = finish_reason(choice) or self.finish_reason
        if completion is not None:
            self._count(completion - self.counted, "usage", t)
            return
        text = "".join(_choice_text(c) for c in choices)
        if text and self.count_text is not None:
            self._count(max(1, self.count_text(text)), "tokenizer", t)
        elif text:
            self._count(1, "chunk", t)

    def _usage(self, completion: int) -> None:
        if self.output_tokens is not None and completion < self.output_tokens:
            self.backwards = True
        self.output_tokens = completion

    def _count(self, n: int, method: str, t: float) -> None:
        if n > 0:
            self.counted += n
            self.chunks.append((t, n))
            self.methods[method] = self.methods.get(method, 0) + 1

    def _fail(self, kind: RequestFailure, message: str) -> None:
        if self.failure is None:
            self.failure, self.error = kind, message
        self._buffer = b""

    def finish(
        self,
        *,
        error: Optional[str] = None,
        failure: Optional[RequestFailure] = None,
        start: float = 0.0,
    ) -> Dict[str, Any]:
        """The record fields this response determines, chunk times made relative to ``start``
        (when the request was sent, on the clock the arrival times were given in). ``error``
        and ``failure``: the caller's, when the request failed outside the stream (HTTP
        status, connection, timeout); they take precedence over what the stream showed.

        ``ttft``/``e2el``: first/last token chunk; ``output_tokens``: the final usage (else the
        tokens counted); ``token_count_method``: the weakest method any chunk needed.
        Sets ``reconciled``.
        """
        method = None
        for name in ("usage", "tokenizer", "chunk"):
            if name in self.methods:
                method = name
        if error is None and failure is None:
            failure, error = self.failure, self.error
        if failure is None and error is None:
            verdict = judge(
                Facts(
                    finish_reason=self.finish_reason,
                    done=self.done,
                    chunks=len(self.chunks),
                    counted=self.counted,
                    usage=self.output_tokens,
                    method=method,
                    backwards=self.backwards,
                    max_tokens=self.max_tokens,
                    ignore_eos=self.ignore_eos,
                )
            )
            failure, error, self.reconciled = verdict
        elif failure is None:
            failure = RequestFailure.CONNECTION
        # microseconds: plenty, and lean JSON
        chunks = [[round(t - start, 6), n] for t, n in self.chunks]
        return {
            "ttft": chunks[0][0] if chunks else None,
            "e2el": chunks[-1][0] if chunks else None,
            "chunks": chunks,
            "output_tokens": self.output_tokens if self.output_tokens is not None else self.counted,
            "usage_reported": self.output_tokens is not None,
            "prompt_tokens": self.prompt_tokens,
            "token_count_method": method,
            "finish_reason": self.finish_reason,
            "failure": failure,
            "error": error,
        }


def _count_value(value: Any) -> Optional[int]:
    """A token count as JSON gives it: a non-negative integer (not a bool, not a float)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
