"""OpenAI-compatible request parsing and response shapes, as vLLM and SGLang produce them.

Pure functions: a request body -> ``GenParams`` (or ``BadRequest``), and the JSON objects of
streamed chunks, final usage chunks and whole responses. Token counts come from a pseudo
tokenizer (words and punctuation, plus the chat template's control tokens); a prompt given as
token ids counts exactly. Generated text is one short word per token, so a client can also count
tokens from the text.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"\w+|[^\w\s]")
_VOCAB = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "as",
    "with",
    "on",
    "was",
    "by",
    "be",
    "this",
    "are",
    "at",
    "from",
    "or",
    "an",
    "which",
    "we",
    "can",
    "model",
    "token",
    "value",
    "step",
    "each",
    "all",
    "one",
    "two",
    "three",
    "data",
    "time",
    "if",
    "then",
    "so",
    "not",
    "more",
    "first",
    "new",
    "use",
    "may",
    "also",
    "these",
    "sum",
    "let",
    "x",
    "y",
    "n",
    "k",
    "i",
    "result",
    "thus",
]


class BadRequest(Exception):
    """A request the engine rejects with HTTP 400 (or 404 for an unknown model)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


@dataclass(frozen=True)
class GenParams:
    kind: str  # "chat" | "completion"
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    logprobs: bool
    seed: int | None
    key: str  # identifies the prompt, for per-request randomness


def count_text_tokens(text: str) -> int:
    return len(_WORD.findall(text))


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {value!r}", param=name)
    return value


def _common(body: dict[str, Any], kind: str, prompt_tokens: int, key: str) -> GenParams:
    options = body.get("stream_options") or {}
    max_tokens = _int(body, "max_completion_tokens", None) if kind == "chat" else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None)
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if body.get("n", 1) != 1:
        raise BadRequest("Only n=1 is supported by this server.", param="n")
    logprobs = body.get("logprobs")
    return GenParams(
        kind=kind,
        model=body.get("model"),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=_int(body, "min_tokens", 0) or 0,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(body.get("stream", False)),
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
        logprobs=bool(logprobs) if kind == "chat" else logprobs is not None,
        seed=_int(body, "seed", None),
        key=key,
    )


def parse_chat(body: dict[str, Any]) -> GenParams:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", param="messages")
    text = []
    tokens = 3  # "<|im_start|>assistant\n"
    for message in messages:
        if not isinstance(message, dict):
            raise BadRequest("each message must be an object", param="messages")
        content = _message_text(message.get("content"))
        text.append(f"{message.get('role')}:{content}")
        tokens += count_text_tokens(content) + 5  # <|im_start|>role\n ... <|im_end|>\n
    kwargs = body.get("chat_template_kwargs") or {}
    tokens += 4 if kwargs.get("enable_thinking") is False else 2  # the <think> block opened
    key = hashlib.sha256("\x1e".join(text).encode()).hexdigest()[:16]
    return _common(body, "chat", tokens, key)


def parse_completion(body: dict[str, Any]) -> GenParams:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        tokens, raw = count_text_tokens(prompt), prompt
    elif isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        tokens, raw = len(prompt), ",".join(map(str, prompt))
    else:
        raise BadRequest("prompt must be a string or a list of token ids", param="prompt")
    if tokens == 0:
        raise BadRequest("The prompt cannot be empty.", param="prompt")
    return _common(body, "completion", tokens, hashlib.sha256(raw.encode()).hexdigest()[:16])


def token_texts(key: str, start: int, count: int) -> list[str]:
    """The text of generated tokens ``start .. start+count``: one word (with its space) each."""
    seed = int(key[:8], 16) if key else 0
    return [" " + _VOCAB[(seed + 7 * i + i * i) % len(_VOCAB)] for i in range(start, start + count)]


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def _logprobs(kind: str, texts: list[str]) -> dict[str, Any]:
    if kind == "chat":
        return {
            "content": [
                {"token": t, "logprob": -0.01, "bytes": list(t.encode()), "top_logprobs": []}
                for t in texts
            ]
        }
    return {
        "text_offset": [0] * len(texts),
        "token_logprobs": [-0.01] * len(texts),
        "tokens": texts,
        "top_logprobs": [None] * len(texts),
    }


def stream_chunk(
    *,
    rid: str,
    created: int,
    model: str,
    params: GenParams,
    texts: list[str],
    finish_reason: str | None,
    role: bool = False,
    running_usage: dict[str, int] | None = None,
    vllm: bool = False,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """One SSE ``data:`` object carrying one step's tokens. vLLM 0.32's completion choices
    carry ``stop_reason``, ``prompt_token_ids`` and ``token_ids`` (null) in every chunk;
    ``fingerprint`` is its ``system_fingerprint``, which it puts on an aborted stream's last
    chunk (tests/fixtures/vllm_cpu/)."""
    text = "".join(texts)
    if params.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    choice["logprobs"] = _logprobs(params.kind, texts) if params.logprobs and not role else None
    choice["finish_reason"] = finish_reason
    if vllm and params.kind == "completion":
        choice.update(stop_reason=None, prompt_token_ids=None, token_ids=None)
    elif finish_reason is not None:
        choice["stop_reason"] = None
    chunk: dict[str, Any] = {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if running_usage is not None:
        chunk["usage"] = running_usage
    if fingerprint is not None:
        chunk["system_fingerprint"] = fingerprint
    return chunk


def usage_chunk(
    *,
    rid: str,
    created: int,
    model: str,
    params: GenParams,
    completion: int,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """The usage-only chunk; vLLM 0.32 adds its ``system_fingerprint`` to it."""
    obj = "chat.completion.chunk" if params.kind == "chat" else "text_completion"
    chunk: dict[str, Any] = {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(params.prompt_tokens, completion),
    }
    if fingerprint is not None:
        chunk["system_fingerprint"] = fingerprint
    return chunk


def full_response(
    *, rid: str, model: str, params: GenParams, texts: list[str], finish_reason: str
) -> dict[str, Any]:
    text = "".join(texts)
    logprobs = _logprobs(params.kind, texts) if params.logprobs else None
    if params.kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(params.prompt_tokens, len(texts)),
    }


def sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def error_body(engine: str, message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError"}.get(
        status, "InternalServerError"
    )
    if engine == "vllm":
        return {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return {"object": "error", "message": message, "type": kind, "param": param, "code": status}
