"""Model and drafter facts read from Hugging Face JSON files (config.json, tokenizer_config.json).

Pure: the caller reads the files (locally, or on a host through the agent) and hands over the
parsed dicts. Values the checks must judge (mask id, layer ids, block size) are kept exactly as
found, wrong types included, so a check can say "found a string" instead of crashing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.doctor.reference import MTP_LAYER_FIELDS, NON_THINKING_DRAFTERS, THINKING_FIELDS
from orchestrator.doctor.tokenizers import (
    AddedToken,
    ThinkingDefault,
    added_tokens,
    chat_template_text,
    template_thinking,
)


@dataclass
class ModelConfig:
    """Facts about one checkpoint (a target model or a drafter)."""

    name: str | None = None
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    num_layers: int | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    mtp_layers: int | None = None
    mtp_field: str | None = None
    added_tokens: dict[int, AddedToken] = field(default_factory=dict)
    has_tokenizer_config: bool = False
    chat_template: str | None = None
    thinking_default: ThinkingDefault = "none"
    # Drafter facts, raw as found (None when absent).
    block_size: Any = None
    block_size_field: str | None = None
    num_target_layers: Any = None
    mask_token_id: Any = None
    target_layer_ids: Any = None
    trained_with_thinking: bool | None = None
    thinking_basis: str | None = None
    layer_types: tuple[str, ...] = ()
    mixes_sliding_and_full: bool = False
    # The language-model fields (text_config merged over the top level) for estimates.
    text: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(
        cls,
        config: Mapping[str, Any],
        tokenizer_config: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        chat_template: str | None = None,
    ) -> ModelConfig:
        """Build from config.json (+ tokenizer_config.json, + chat_template.jinja's text).

        Multimodal targets (Qwen3.5/3.6, Gemma 3...) keep the language model's fields under
        ``text_config``; those win over top-level ones of the same name.
        """
        text = language_model_fields(config)
        dflash = config.get("dflash_config")
        dflash = dflash if isinstance(dflash, Mapping) else {}
        mtp_field = next((f for f in MTP_LAYER_FIELDS if _int(text.get(f)) is not None), None)
        template = chat_template_text(tokenizer_config, chat_template)
        block_field = (
            "dflash_config.block_size"
            if "block_size" in dflash
            else ("block_size" if "block_size" in config else None)
        )
        types = text.get("layer_types")
        layer_types = (
            tuple(t for t in types if isinstance(t, str)) if isinstance(types, list) else ()
        )
        thinking, basis = trained_with_thinking(config, dflash, name)
        return cls(
            name=name or _str(config.get("_name_or_path")),
            architectures=tuple(a for a in config.get("architectures") or () if isinstance(a, str)),
            model_type=_str(config.get("model_type")),
            num_layers=_int(text.get("num_hidden_layers")),
            vocab_size=_int(text.get("vocab_size")),
            hidden_size=_int(text.get("hidden_size")),
            mtp_layers=_int(text.get(mtp_field)) if mtp_field else None,
            mtp_field=mtp_field,
            added_tokens=added_tokens(tokenizer_config),
            has_tokenizer_config=tokenizer_config is not None,
            chat_template=template,
            thinking_default=template_thinking(template),
            block_size=dflash.get("block_size", config.get("block_size")),
            block_size_field=block_field,
            num_target_layers=config.get("num_target_layers", dflash.get("num_target_layers")),
            mask_token_id=dflash.get("mask_token_id", config.get("mask_token_id")),
            target_layer_ids=dflash.get("target_layer_ids", config.get("target_layer_ids")),
            trained_with_thinking=thinking,
            thinking_basis=basis,
            layer_types=layer_types,
            mixes_sliding_and_full=mixes_sliding_and_full(text, layer_types),
            text=text,
        )


def language_model_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level fields overlaid with ``text_config`` (or ``language_config``/``llm_config``)."""
    merged = dict(config)
    for key in ("text_config", "language_config", "llm_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            merged.update(nested)
            break
    return merged


def trained_with_thinking(
    config: Mapping[str, Any], dflash: Mapping[str, Any], name: str | None
) -> tuple[bool | None, str | None]:
    """Whether the drafter was trained with thinking, and what that answer rests on.

    An explicit boolean field wins (``reference.THINKING_FIELDS``, dflash_config first); then
    the list of published drafters documented as non-thinking, matched by name; otherwise
    unknown (None): most drafter configs do not say.
    """
    for where, source in (("dflash_config.", dflash), ("", config)):
        for key in THINKING_FIELDS:
            if isinstance(source.get(key), bool):
                return source[
                    key
                ], f"{where}{key} = {str(source[key]).lower()} in the drafter config"
    for candidate in (name, _str(config.get("_name_or_path"))):
        if candidate and _basename(candidate) in NON_THINKING_DRAFTERS:
            return False, f"{_basename(candidate)} is published as a non-thinking drafter"
    return None, None


def mixes_sliding_and_full(text: Mapping[str, Any], layer_types: tuple[str, ...]) -> bool:
    """True when some layers use sliding-window attention and others full attention.

    ``layer_types`` says it directly; older Qwen-style configs say it with
    ``use_sliding_window`` plus ``max_window_layers`` below the layer count.
    """
    if layer_types:
        return "sliding_attention" in layer_types and "full_attention" in layer_types
    layers = _int(text.get("num_hidden_layers"))
    window_layers = _int(text.get("max_window_layers"))
    return bool(
        text.get("use_sliding_window") is True
        and layers is not None
        and window_layers is not None
        and 0 < window_layers < layers
    )


def _basename(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
