"""Settings an engine changed on its own, read from its log (SGLang only for now).

SGLang's ``server_args.py`` rewrites some settings and only says so in a log line; a run then
measures something other than what was asked. The lines matched here are SGLang's own
(``python/sglang/srt/server_args.py``, 0.5.x), for example::

    [2025-11-11 20:29:05] WARNING server_args.py:1183: Attention backend not explicitly specified. Use flashinfer backend by default.
    FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton.
    The current platform does not support Intel AMX, will fallback to torch_native backend.
    FlashMLA only supports a page_size of 64, change page_size to 64.
    TensorRT-LLM MHA only supports page_size of 16, 32 or 64, changing page_size from 1 to 64.
    speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1

Patterns search anywhere in a line, so the log prefix (date, TP rank, level) does not matter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.doctor.findings import Finding, warning

ATTENTION_BACKEND_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"Attention backend not explicitly specified\. Use (?P<value>\w+) backend by default"
    ),
    re.compile(r"Attention backend not specified\. Falling back to '(?P<value>\w+)'"),
    re.compile(r"Setting attention backend to (?P<value>\w+)"),
    re.compile(r"will fallback to (?P<value>\w+) backend"),
)
PAGE_SIZE_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"change page_size to (?P<value>\d+)"),
    re.compile(r"changing page_size from \d+ to (?P<value>\d+)"),
)
DRAFT_TOKENS_PATTERN = re.compile(
    r"speculative_num_draft_tokens is adjusted to (?P<value>[\w +]+?) when"
)


def chosen_settings(log_lines: Iterable[str]) -> dict[str, tuple[str, str]]:
    """{setting: (value, log line)} for every setting the log says the engine chose; the last
    line about a setting wins, as it does in the engine."""
    chosen: dict[str, tuple[str, str]] = {}
    for line in log_lines:
        if not line:
            continue
        for setting, patterns in (
            ("attention_backend", ATTENTION_BACKEND_PATTERNS),
            ("page_size", PAGE_SIZE_PATTERNS),
        ):
            for pattern in patterns:
                match = pattern.search(line)
                if match:
                    chosen[setting] = (match.group("value"), line.strip())
        match = DRAFT_TOKENS_PATTERN.search(line)
        if match:
            chosen["speculative_num_draft_tokens"] = (match.group("value").strip(), line.strip())
    return chosen


@dataclass(frozen=True)
class RequestedSettings:
    """What a run asked of the engine among the settings SGLang may silently change; None is
    not asked for, so the engine's own choice is not a change."""

    attention_backend: str | None = None
    page_size: int | None = None
    speculative_num_draft_tokens: int | None = None


def engine_silent_changes(log_lines: Iterable[str], requested: RequestedSettings) -> list[Finding]:
    """Warnings for settings the log shows differ from the requested ones (only the changes)."""
    chosen = chosen_settings(log_lines)
    findings: list[Finding] = []
    backend = requested.attention_backend
    if backend is not None and "attention_backend" in chosen:
        value, line = chosen["attention_backend"]
        if value.lower() != backend.lower():
            findings.append(
                warning(
                    "attention_backend",
                    f"SGLang replaced the requested attention backend {backend!r} with {value!r} "
                    f"(log: {line!r}); speed is then not that of {backend}. Fix: change what forced it "
                    "(KV cache dtype, GPU, page size) or request a backend it accepts.",
                    requested=backend,
                    chosen=value,
                    line=line,
                )
            )
    page = requested.page_size
    if page is not None and "page_size" in chosen:
        value, line = chosen["page_size"]
        if int(value) != page:
            findings.append(
                warning(
                    "page_size",
                    f"SGLang changed the requested page size {page} to {value} (log: {line!r}); "
                    f"prefix caching and memory use then differ from the plan. Fix: request page_size "
                    f"{value} explicitly or pick an attention backend that supports {page}.",
                    requested=page,
                    chosen=int(value),
                    line=line,
                )
            )
    drafts = requested.speculative_num_draft_tokens
    if drafts is not None and "speculative_num_draft_tokens" in chosen:
        value, line = chosen["speculative_num_draft_tokens"]
        findings.append(
            warning(
                "num_draft_tokens",
                f"SGLang overrode the requested --speculative-num-draft-tokens {drafts} ({value}; log: "
                f"{line!r}). Fix: with topk 1 set num_draft_tokens to speculative_num_steps + 1.",
                requested=drafts,
                chosen=value,
                line=line,
            )
        )
    return findings
