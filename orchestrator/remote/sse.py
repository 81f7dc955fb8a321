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


def _json_parser() -> Tuple[Callable[[bytes], Any], str]:
    """orjson's loads when the host has it (several times faster), else the standard one."""
    try:
        module = importlib.import_module("orjson")
    except ImportError:
        return json.loads, "json"
    return module.loads, "orjson"


loads, JSON_PARSER = _json_parser()

# A JSON string cannot hold an unescaped quote, so '"usage"' or '"error"' in a chunk's bytes is a
# key or a value, never text the model wrote ('"' inside text is always '\"').
_USAGE = re.compile(rb'"usage"\s*:\s*\{([^{}]*)\}')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)\s*[,}]')
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)\s*[,}]')
_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*(\]?)')


def quick_usage(payload: bytes) -> Optional[Tuple[bool, int, Optional[int]]]:
    """(choices non-empty, usage.completion_tokens, usage.prompt_tokens) of one chunk, read from
    its bytes; None when the chunk needs the full decode.

    Only for the plain shape: one flat ``usage`` object holding ``completion_tokens``, a
    ``choices`` array, no ``error``. The tokens a chunk adds then come from the cumulative
    usage alone, so its text need not be decoded. A key is a string followed by ``:``, which
    no string value is, so ``"choices":[`` cannot be the model's text.
    """
    if b'"error"' in payload or payload.count(b'"usage"') != 1:
        return None
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


class StreamParser:
    """Turns the bytes of one SSE response, each with its arrival time, into a record.

    Pure (the caller supplies the clock), so the metric identities can be pinned with
    scripted times. A chunk is a *token chunk* when it adds output tokens; only token chunks
    are kept, so the trailing usage-only chunk and ``[DONE]`` never extend the latency.
    """

    def __init__(self, count_text: Optional[Callable[[str], int]] = None) -> None:
        self.count_text = count_text
        self.chunks: List[Tuple[float, int]] = []  # (arrival time, tokens)
        self.counted = 0
        self.output_tokens: Optional[int] = None
        self.prompt_tokens: Optional[int] = None
        self.methods: Dict[str, int] = {}
        self.done = False
        self.error: Optional[str] = None
        self._buffer = b""

    def feed(self, data: bytes, t: float) -> None:
        """Bytes that arrived at ``t``; complete lines are parsed now, the rest is kept."""
        if self._buffer:
            data, self._buffer = self._buffer + data, b""
        elif (  # the usual read: exactly one event
            data.startswith(b"data:")
            and data.endswith(b"\n\n")
            and data.find(b"\n") == len(data) - 2
        ):
            self._data(data[5:-2].strip(), t)
            return
        lines = data.split(b"\n")
        self._buffer = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                line = line.strip()  # blank separators, ": keep-alive" comments, "event:"...
                if not line.startswith(b"data:"):
                    continue
            self._data(line[5:].strip(), t)

    def _data(self, payload: bytes, t: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        quick = quick_usage(payload)
        if quick is not None:
            has_choices, completion, prompt = quick
            self.output_tokens = completion
            if prompt is not None:
                self.prompt_tokens = prompt
            if has_choices:
                self._count(completion - self.counted, "usage", t)
            return
        try:
            obj = loads(payload)
        except ValueError:
            self.error = self.error or f"unparseable SSE data: {payload[:200]!r}"
            return
        if isinstance(obj, dict):
            self._event(obj, t)

    def _event(self, obj: Dict[str, Any], t: float) -> None:
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            message = err.get("message") if isinstance(err, dict) else err
            self.error = self.error or f"server error in stream: {message}"
            return
        usage = obj.get("usage")
        completion = None
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens")
            if isinstance(completion, int):
                self.output_tokens = completion
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
        choices = obj.get("choices") or []
        if not choices:
            return  # the usage-only chunk after the last token
        if isinstance(completion, int):
            self._count(completion - self.counted, "usage", t)
            return
        text = "".join(_choice_text(c) for c in choices if isinstance(c, dict))
        if text and self.count_text is not None:
            self._count(max(1, self.count_text(text)), "tokenizer", t)
        elif text:
            self._count(1, "chunk", t)

    def _count(self, n: int, method: str, t: float) -> None:
        if n > 0:
            self.counted += n
            self.chunks.append((t, n))
            self.methods[method] = self.methods.get(method, 0) + 1

    def finish(self, *, error: Optional[str] = None, start: float = 0.0) -> Dict[str, Any]:
        """The record fields this response determines, chunk times made relative to ``start``
        (when the request was sent, on the clock the arrival times were given in).

        ``ttft``/``e2el``: first/last token chunk; ``output_tokens``: the final usage (else the
        tokens counted); ``token_count_method``: the weakest method any chunk needed.
        """
        if error is None:
            error = self.error
        if error is None and not self.done:
            error = "stream ended before [DONE]"
        if error is None and not self.chunks:
            error = "response carried no output tokens"
        method = None
        for name in ("usage", "tokenizer", "chunk"):
            if name in self.methods:
                method = name
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
            "error": error,
        }
