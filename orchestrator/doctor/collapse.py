"""After a run: was speculation collapsed, and what most likely caused it?

A collapsed drafter still "works": every draft is rejected, each step yields about one token,
and the run is slower than without speculation. Healthy figures (docs/ENGINES.md): DFlash 4-8 at
block 16, MTP with 3 draft tokens 2.5-3.2; a collapsed drafter 1.0-1.2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pydantic import ConfigDict

from orchestrator.config.methods import MODEL_FREE_METHODS
from orchestrator.doctor.enginelog import engine_silent_changes
from orchestrator.doctor.findings import Finding
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.doctor.reference import NO_SPECULATION, canonical_method
from orchestrator.engines import get_engine
from orchestrator.engines.base import Engine

__all__ = [
    "Cause",
    "Collapse",
    "acceptance_floor",
    "detect_collapse",
    "engine_silent_changes",
    "rank_causes",
]

# Mean acceptance length below which a model-based drafter counts as collapsed, by draft
# tokens per step (3 or more -> 1.5). With one draft token a healthy MTP head reaches about
# 1.8, a rejected one 1.0-1.1. Prompt-lookup methods (ngram, suffix) get no floor: their
# acceptance depends on how repetitive the prompts are, not on a configuration.
FLOORS: dict[int, float] = {1: 1.15, 2: 1.3}
DEFAULT_FLOOR = 1.5
NEAR_ZERO = 0.05  # per-position acceptance rate at or below which a position is "dead"


@dataclass(frozen=True)
class Collapse:
    """Speculation collapsed (drafts rejected), why it was called so, and the likely causes.

    Also the persisted record (``RunResult.collapse``): pydantic validates it as it stands, so
    its fields are declared here only."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    method: str
    num_draft_tokens: int | None
    acceptance_length: float | None
    floor: float | None
    per_position: list[float] | None
    reasons: list[str]
    message: str
    likely_causes: list[Cause] = field(default_factory=list)  # ranked (``rank_causes``)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def acceptance_floor(method: str, num_draft_tokens: int | None) -> float | None:
    canonical = canonical_method(method)
    if not canonical or canonical in MODEL_FREE_METHODS or canonical in NO_SPECULATION:
        return None
    if num_draft_tokens is None or num_draft_tokens >= 3:
        return DEFAULT_FLOOR
    return FLOORS.get(num_draft_tokens, FLOORS[1])


def detect_collapse(
    *,
    method: str,
    num_draft_tokens: int | None,
    acceptance_length: float | None,
    per_position: Sequence[float] | None,
) -> Collapse | None:
    """A Collapse when acceptance is below the method's floor, or dead from the first position."""
    floor = acceptance_floor(method, num_draft_tokens)
    if floor is None:
        return None
    positions = [float(p) for p in per_position] if per_position else None
    reasons: list[str] = []
    if acceptance_length is not None and acceptance_length < floor:
        reasons.append(
            f"mean acceptance length {acceptance_length:.2f} is below {floor:.2f}, the floor "
            f"for {method} with {num_draft_tokens or 'default'} draft tokens"
        )
    if positions and positions[0] <= NEAR_ZERO:
        reasons.append(
            f"per-position acceptance is near zero from the first position "
            f"({positions[0]:.3f} <= {NEAR_ZERO})"
        )
    if not reasons:
        return None
    message = (
        "speculation collapsed: "
        + "; ".join(reasons)
        + ". Drafts are rejected, so the run is slower than without speculation."
    )
    return Collapse(method, num_draft_tokens, acceptance_length, floor, positions, reasons, message)


@dataclass(frozen=True)
class Cause:
    """One likely cause. ``source`` is "finding" (the doctor found it) or "configuration"
    (a setting known to hurt, not proven wrong). Persisted as it stands (``Collapse``)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    rank: int
    cause: str
    source: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    checks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Doctor checks -> the cause people know them by, in the order they are ranked.
CHECK_CAUSES: dict[str, str] = {
    "mask_token_id": "mask_token",
    "target_layer_ids": "layer_ids",
    "num_target_layers": "layer_ids",
    "drafter": "drafter",
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "architecture": "architecture",
    "block_size": "block_size",
    "mtp": "mtp",
    "attention_backend": "attention_backend",
    "model_runner": "model_runner",
    "page_size": "page_size",
    "num_draft_tokens": "num_draft_tokens",
    "thinking": "thinking_mode",
}
_CHECK_ORDER = list(CHECK_CAUSES)
_FIXES = {
    "mask_token": "set dflash_config.mask_token_id to the id the drafter was trained with",
    "layer_ids": "set dflash_config.target_layer_ids to the ids the drafter was trained with",
    "drafter": "set speculative.draft_model to the drafter checkpoint",
    "vocab_size": "use the drafter published for this target",
    "hidden_size": "use the drafter published for this target",
    "architecture": "use a drafter made for the chosen method, or change the method",
    "block_size": "set speculative.num_draft_tokens to the drafter's block_size - 1",
    "mtp": "pick a target with MTP layers, or a drafter method",
    "page_size": "request the page size the attention backend supports",
    "num_draft_tokens": "set num_draft_tokens to what the engine accepts for this method",
    "thinking_mode": "set workload.chat_template_kwargs: {enable_thinking: false}",
    "kv_cache_quantization": "drop --kv-cache-dtype (keep the KV cache in bf16) and compare",
}


def rank_causes(
    findings: Iterable[Finding],
    *,
    engine: str,
    attention_backend: str | None,
    env: Mapping[str, str] | None,
    extra_args: Sequence[str] | None,
    chat_template_kwargs: Mapping[str, Any] | None,
    kv_cache_dtype: str | None,
    method: str | None = None,
    drafter: ModelConfig | None = None,
    chat: bool = True,
) -> list[Cause]:
    """Likely causes of a collapse, most likely first: the doctor's errors, then its warnings,
    then configuration suspicions (attention backend, model runner, thinking, KV cache).
    ``chat`` False: the workload sent plain completions, so no chat template (nor its thinking
    mode) was applied.

    ``extra_args`` are read with the engine's flag reader (``Engine.flag_value``), the one the
    launch and the doctor use, so an abbreviated flag counts here as it does there.
    """
    causes: dict[str, Cause] = {}
    findings = list(findings)
    found = get_engine(engine)
    for severity in ("error", "warning"):
        for finding in sorted(
            (f for f in findings if f.severity == severity and f.check in CHECK_CAUSES),
            key=lambda f: _CHECK_ORDER.index(f.check),
        ):
            name = CHECK_CAUSES[finding.check]
            cause = causes.setdefault(name, Cause(0, name, "finding", fix=_fix(name, found)))
            cause.evidence.append(finding.message)
            cause.checks.append(finding.check)
    for name, evidence in _suspicions(
        engine=found,
        method=canonical_method(method),
        attention_backend=attention_backend,
        env=env or {},
        extra_args=list(extra_args or ()),
        chat_template_kwargs=chat_template_kwargs or {},
        kv_cache_dtype=kv_cache_dtype,
        drafter=drafter,
        chat=chat,
    ):
        if name not in causes:
            causes[name] = Cause(0, name, "configuration", [evidence], _fix(name, found))
    return [replace(cause, rank=rank) for rank, cause in enumerate(causes.values(), start=1)]


def _fix(cause: str, engine: Engine) -> str:
    """The fix for ``cause``; the attention backend and model runner are the engine's own."""
    launch = engine.doctor.dflash_launch
    if cause == "attention_backend":
        return engine.doctor.attention_fix
    if cause == "model_runner" and launch is not None and launch.runner_env:
        return f"set env {launch.runner_env}=1 for this run"
    return _FIXES.get(cause, "")


def _suspicions(
    *,
    engine: Engine,
    method: str | None,
    attention_backend: str | None,
    env: Mapping[str, str],
    extra_args: list[str],
    chat_template_kwargs: Mapping[str, Any],
    kv_cache_dtype: str | None,
    drafter: ModelConfig | None,
    chat: bool,
) -> list[tuple[str, str]]:
    found = _dflash_launch_suspicions(
        engine, method, attention_backend=attention_backend, env=env, extra_args=extra_args
    )
    if drafter is not None and drafter.mixes_sliding_and_full:
        found += _runner_suspicion(engine, method, env)
    thinking_off = (
        chat_template_kwargs.get("enable_thinking") is False
        or chat_template_kwargs.get("thinking") is False
    )
    if (
        chat
        and method not in ("mtp", *MODEL_FREE_METHODS)
        and not thinking_off
        and not (drafter is not None and drafter.trained_with_thinking)
    ):
        found.append(
            (
                "thinking_mode",
                "the workload does not set enable_thinking: false; a drafter "
                "trained without thinking accepts far less on <think> text",
            )
        )
    kv = kv_cache_dtype or engine.flag_value(extra_args, "--kv-cache-dtype")
    if kv and kv.lower() not in ("auto", "bf16", "bfloat16", "fp16", "float16"):
        found.append(
            (
                "kv_cache_quantization",
                f"the KV cache is quantized ({kv}): target and "
                "drafter attend over approximated keys and values, which lowers acceptance",
            )
        )
    return found


def _dflash_launch_suspicions(
    engine: Engine,
    method: str | None,
    *,
    attention_backend: str | None,
    env: Mapping[str, str],
    extra_args: list[str],
) -> list[tuple[str, str]]:
    """An attention backend other than the one the engine's DFlash drafter runs with."""
    launch = engine.doctor.dflash_launch
    if launch is None or method not in (None, "dflash"):
        return []
    backend = (
        attention_backend
        or engine.flag_value(extra_args, launch.attention_flag)
        or (env.get(launch.attention_env) if launch.attention_env else None)
    )
    if (backend or "").lower() == launch.backend:
        return []
    return [
        (
            "attention_backend",
            f"{engine.display_name}'s DFlash drafter is run with {launch.attention_flag} "
            f"{launch.backend}; this run used {backend or 'the engine default'}",
        )
    ]


def _runner_suspicion(
    engine: Engine, method: str | None, env: Mapping[str, str]
) -> list[tuple[str, str]]:
    """A drafter mixing sliding-window and full attention layers, without the model runner the
    engine serves such drafters correctly with."""
    launch = engine.doctor.dflash_launch
    if launch is None or not launch.runner_env or method not in (None, "dflash"):
        return []
    if env.get(launch.runner_env) == "1":
        return []
    return [
        (
            "model_runner",
            "the drafter mixes sliding-window and full attention layers, "
            f"which {engine.display_name} serves correctly only with {launch.runner_env}=1 "
            "(not set)",
        )
    ]
