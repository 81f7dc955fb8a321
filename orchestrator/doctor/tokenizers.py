"""What the doctor can learn about a tokenizer from tokenizer_config.json alone.

tokenizer.json (10 MB and more) is never read: the added tokens in ``added_tokens_decoder``
sit at the top of the id range in the families we check, so they tell where BPE text ends and
where the tokenizer ends, which is all the mask-id check needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.doctor.reference import TokenizerFamily


@dataclass(frozen=True)
class AddedToken:
    content: str
    special: bool


def added_tokens(tokenizer_config: Mapping[str, Any] | None) -> dict[int, AddedToken]:
    """``added_tokens_decoder`` as {id: token}; malformed entries are skipped, not fatal."""
    decoder = (tokenizer_config or {}).get("added_tokens_decoder")
    if not isinstance(decoder, Mapping):
        return {}
    tokens: dict[int, AddedToken] = {}
    for key, entry in decoder.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            continue
        if isinstance(entry, Mapping):
            tokens[token_id] = AddedToken(
                str(entry.get("content", "")), bool(entry.get("special", False))
            )
        elif isinstance(entry, str):
            tokens[token_id] = AddedToken(entry, False)
    return tokens


def chat_template_text(
    tokenizer_config: Mapping[str, Any] | None, extra: str | None = None
) -> str | None:
    """The chat template: tokenizer_config's (a string or a list of named templates) or ``extra``
    (a chat_template.jinja file beside it, which newer checkpoints ship instead)."""
    template = (tokenizer_config or {}).get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default") or next(
            (t for t in named.values() if isinstance(t, str)), None
        )
    if isinstance(template, str) and template:
        return template
    return extra or None


ThinkingDefault = Literal["on", "off", "none"]
_THINKING_KWARG = re.compile(r"\bthinking\b")


def template_thinking(template: str | None) -> ThinkingDefault:
    """Whether a chat template thinks by default.

    Qwen-style templates read ``enable_thinking`` and think unless it is false ("on");
    templates that read a bare ``thinking`` flag (DeepSeek-V3.1 style) think only when it is
    true ("off"); templates that never mention it cannot think ("none"). A template that emits
    ``<think>`` without any switch always thinks ("on").
    """
    if not template:
        return "none"
    if "enable_thinking" in template:
        return "on"
    if _THINKING_KWARG.search(template):
        return "off"
    return "on" if "<think>" in template else "none"


def thinking_requested(
    default: ThinkingDefault, chat_template_kwargs: Mapping[str, Any] | None
) -> bool:
    """Whether requests will think, given the template's default and the workload's kwargs."""
    kwargs = chat_template_kwargs or {}
    if default == "none":
        return False
    if "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    if "thinking" in kwargs:
        return bool(kwargs["thinking"])
    return default == "on"


MaskStatus = Literal["special", "unused", "text", "added_text", "unknown"]


@dataclass(frozen=True)
class TokenIdClass:
    """Where an id sits in a tokenizer. ``basis`` says what the verdict rests on."""

    status: MaskStatus
    basis: str
    content: str | None = None
    first_added_id: int | None = None
    length: int | None = None


def classify_id(
    token_id: int, tokens: Mapping[int, AddedToken], family: TokenizerFamily | None
) -> TokenIdClass:
    """Is ``token_id`` a special token, an unused row, or an ordinary text token?

    The tokenizer_config's added tokens decide when present; otherwise the published layout
    of a known family (by vocab size) does; otherwise the answer is "unknown".
    """
    if tokens:
        first, length = min(tokens), max(tokens) + 1
        basis = "tokenizer_config.json added_tokens_decoder"
        token = tokens.get(token_id)
        if token is not None:
            status: MaskStatus = "special" if token.special else "added_text"
            return TokenIdClass(status, basis, token.content, first, length)
        status = "unused" if token_id >= length else "text"
        return TokenIdClass(status, basis, None, first, length)
    if family is not None:
        basis = f"published {family.name} tokenizer layout"
        if token_id >= family.length:
            return TokenIdClass("unused", basis, None, family.first_added_id, family.length)
        if token_id < family.first_added_id:
            return TokenIdClass("text", basis, None, family.first_added_id, family.length)
        return TokenIdClass("unknown", basis, None, family.first_added_id, family.length)
    return TokenIdClass("unknown", "no tokenizer_config.json and no known tokenizer family")
