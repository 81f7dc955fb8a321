"""Server-sent events of one streamed OpenAI-compatible response, parsed into a request record.

Pure and standard library only (the caller supplies the arrival time of each piece of bytes),
so the latency and token-count identities are pinned by unit tests with scripted times while
``loadgen`` does the I/O. How tokens per chunk are counted (``usage``, ``tokenizer``, ``chunk``)
is described in ``loadgen``'s docstring, which is the verb's contract.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional


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
        self.chunks: List[List[float]] = []  # [seconds since request start, tokens]
        self.counted = 0
        self.output_tokens: Optional[int] = None
        self.prompt_tokens: Optional[int] = None
        self.methods: Dict[str, int] = {}
        self.done = False
        self.error: Optional[str] = None
        self._buffer = b""

    def feed(self, data: bytes, t: float) -> None:
        """Bytes that arrived at ``t``; complete lines are parsed now, the rest is kept."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.strip(), t)

    def _line(self, line: bytes, t: float) -> None:
        if not line.startswith(b"data:"):
            return  # blank separators, ": keep-alive" comments, "event:" fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
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
        text = "".join(_choice_text(c) for c in choices if isinstance(c, dict))
        if isinstance(completion, int):
            n, method = max(0, completion - self.counted), "usage"
        elif text and self.count_text is not None:
            n, method = max(1, self.count_text(text)), "tokenizer"
        elif text:
            n, method = 1, "chunk"
        else:
            return
        if n > 0:
            self.counted += n
            self.chunks.append([t, n])
            self.methods[method] = self.methods.get(method, 0) + 1

    def finish(self, *, error: Optional[str] = None) -> Dict[str, Any]:
        """The record fields this response determines.

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
        chunks = [[round(t, 6), n] for t, n in self.chunks]  # microseconds: plenty, and lean JSON
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
