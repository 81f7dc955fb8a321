"""Checks of a (target, drafter, engine, method) combination, as pure functions -> findings.

A wrong mask id or wrong layer ids raise no error anywhere: the engine runs and acceptance
quietly falls to a few percent. These checks catch that from the JSON files alone. Each check
returns exactly one finding (``ok`` when it passes) so the report shows what was verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.config.methods import DRAFTER_METHODS, MODEL_FREE_METHODS
from orchestrator.doctor.findings import Finding, error, ok, warning
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.doctor.reference import (
    ARCHITECTURE_KEYWORDS,
    MTP_LAYER_FIELDS,
    NO_SPECULATION,
    TokenizerFamily,
    canonical_method,
    families_using_mask_id,
    family_for_vocab,
    reference_layer_ids,
)
from orchestrator.doctor.tokenizers import TokenIdClass, classify_id, thinking_requested
from orchestrator.engines import get_engine


def run_checks(
    *,
    target: ModelConfig,
    drafter: ModelConfig | None,
    engine: str,
    method: str,
    num_draft_tokens: int | None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Every check that applies to ``method``, in a fixed order.

    ``num_draft_tokens`` is the playbook's: tokens drafted per step (vLLM's
    num_speculative_tokens; SGLang's DFLASH block is num_draft_tokens + 1).
    """
    engine = engine.strip().lower()
    canonical = canonical_method(method) or ""
    if canonical in NO_SPECULATION:
        return [
            ok(
                "method",
                "no speculative decoding (method 'none'): no drafter to check.",
                method=method,
            )
        ]
    if canonical in MODEL_FREE_METHODS:
        return [ok("method", f"method {method!r} drafts from the prompt itself: no model to check")]
    if canonical == "mtp":
        return [check_mtp(target)]
    if canonical not in DRAFTER_METHODS:
        return [
            warning(
                "method",
                f"method {method!r} is unknown to the doctor: nothing checked",
                method=method,
            )
        ]
    if drafter is None:
        return [
            error(
                "drafter",
                f"method {method!r} needs a drafter checkpoint but none was given. "
                "Fix: set speculative.draft_model to the drafter's path or model id.",
            )
        ]
    findings: list[Finding] = []
    if canonical == "dflash":
        findings += [
            check_target_layer_ids(target, drafter, engine=engine),
            check_num_target_layers(target, drafter),
            check_mask_token_id(target, drafter),
        ]
    findings.append(check_vocab_size(target, drafter))
    if canonical != "draft_model":  # an independent draft model may be narrower
        findings.append(check_hidden_size(target, drafter))
    if canonical == "dflash":
        findings.append(check_block_size(drafter, engine=engine, num_draft_tokens=num_draft_tokens))
    findings.append(check_architecture(drafter, engine=engine, method=canonical))
    findings.append(check_thinking(target, drafter, chat_template_kwargs=chat_template_kwargs))
    return findings


# --- target_layer_ids / num_target_layers -------------------------------------------------------


def check_target_layer_ids(target: ModelConfig, drafter: ModelConfig, *, engine: str) -> Finding:
    name = "target_layer_ids"
    layers = target.num_layers
    ids = drafter.target_layer_ids
    if layers is None:
        return warning(
            name,
            "the target config has no num_hidden_layers (nor text_config."
            "num_hidden_layers): target_layer_ids cannot be checked.",
        )
    if ids is None:
        depth = drafter.num_layers
        expected = reference_layer_ids(layers, depth) if depth else None
        return error(
            name,
            "dflash_config.target_layer_ids is missing from the drafter config. Expected the ids "
            f"the drafter was trained with; the reference choice for a {layers}-layer target with "
            f"{depth} captures is {expected}. Fix: add dflash_config.target_layer_ids from the "
            "drafter's published config.",
            found=None,
            expected=expected,
            num_target_layers=layers,
        )
    if not _int_list(ids) or not ids:
        return error(
            name,
            f"dflash_config.target_layer_ids must be a non-empty list of integers, "
            f"found {ids!r}. Fix: write the ids as a JSON list, e.g. "
            f"{reference_layer_ids(layers, 5)}.",
            found=ids,
            num_target_layers=layers,
        )
    expected = reference_layer_ids(layers, len(ids))
    problems = _layer_id_problems(ids, layers, engine)
    if ids != expected:
        problems.append(f"not the reference choice for {layers} layers and {len(ids)} captures")
    details = {
        "found": ids,
        "expected": expected,
        "num_target_layers": layers,
        "captures": len(ids),
        "engine": engine,
    }
    if problems:
        return error(
            name,
            f"target_layer_ids {ids} do not fit the {layers}-layer target: {'; '.join(problems)}. "
            f"Expected {expected}. Fix: set dflash_config.target_layer_ids to the ids the drafter "
            f"was trained with (its published config; the reference choice is {expected}).",
            problems=problems,
            **details,
        )
    return ok(
        name,
        f"target_layer_ids {ids} are the reference choice for a {layers}-layer target "
        f"with {len(ids)} captures.",
        **details,
    )


def _layer_id_problems(ids: list[int], layers: int, engine: str) -> list[str]:
    problems: list[str] = []
    if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        problems.append("not strictly increasing")
    outside = [i for i in ids if i < 0 or i >= layers]
    if outside:
        problems.append(f"{_join(outside)} outside the target's layers 0..{layers - 1}")
    found = get_engine(engine)
    shift = found.doctor.layer_shift
    overflow = [i for i in ids if 0 <= i < layers and i + shift >= layers]
    if shift and overflow:
        problems.append(
            f"{_join(overflow)} overflows on {found.display_name} (it reads layer id "
            f"+ {shift}, past the last layer {layers - 1})"
        )
    return problems


def check_num_target_layers(target: ModelConfig, drafter: ModelConfig) -> Finding:
    name = "num_target_layers"
    found, layers = drafter.num_target_layers, target.num_layers
    if found is None:
        return ok(
            name,
            "the drafter config does not set num_target_layers (only used when "
            "target_layer_ids is absent).",
            found=None,
            target_layers=layers,
        )
    if layers is None:
        return warning(
            name,
            "the target config has no num_hidden_layers: num_target_layers "
            f"{found!r} cannot be checked.",
            found=found,
        )
    if not _is_int(found) or found != layers:
        return error(
            name,
            f"the drafter config says num_target_layers {found!r} but the target has {layers} "
            "layers: the drafter was made for another target, or the field was copied from one. "
            f"Expected {layers}. Fix: use the drafter published for this target.",
            found=found,
            expected=layers,
        )
    return ok(
        name,
        f"num_target_layers {found} matches the target's {layers} layers.",
        found=found,
        expected=layers,
    )


# --- mask_token_id ------------------------------------------------------------------------------

_STATUS_TEXT = {
    "text": "an ordinary text token of the target's tokenizer",
    "added_text": "an added token that is not special (it appears in ordinary text)",
    "special": "an added special token of the target's tokenizer",
    "unused": "an unused id past the target tokenizer's last token",
}


def check_mask_token_id(target: ModelConfig, drafter: ModelConfig) -> Finding:
    name = "mask_token_id"
    mask, vocab = drafter.mask_token_id, target.vocab_size
    family = family_for_vocab(vocab)
    published = (
        f"; published {family.name} drafters use {_join(family.dflash_mask_ids)}" if family else ""
    )
    fix = (
        "Fix: set dflash_config.mask_token_id to the id the drafter was trained with (see its "
        "published config.json); a wrong id raises no error, acceptance just collapses."
    )
    if mask is None:
        return error(
            name,
            f"dflash_config.mask_token_id is missing from the drafter config{published}. " + fix,
            found=None,
        )
    if not _is_int(mask):
        return error(name, f"mask_token_id must be an integer, found {mask!r}. " + fix, found=mask)
    if vocab is None:
        return warning(
            name,
            f"the target config has no vocab_size: mask_token_id {mask} cannot be checked.",
            found=mask,
        )
    if not 0 <= mask < vocab:
        return error(
            name,
            f"mask_token_id {mask} is outside the target's vocabulary 0..{vocab - 1}"
            f"{published}. " + fix,
            found=mask,
            vocab_size=vocab,
        )
    where = classify_id(mask, target.added_tokens, family)
    foreign = [f for f in families_using_mask_id(mask) if f.vocab_size != vocab]
    details: dict[str, Any] = {
        "found": mask,
        "vocab_size": vocab,
        "status": where.status,
        "basis": where.basis,
        "token": where.content,
        "target_family": family.name if family else None,
        "known_id_of": [f.name for f in foreign],
    }
    expected = _expected_mask_text(where.length, vocab) + published
    other = _foreign_text(mask, foreign, family, vocab)
    if where.status in ("text", "added_text"):
        return error(
            name,
            f"{other}mask_token_id {mask} is {_STATUS_TEXT[where.status]}: "
            f"{_why_ordinary(mask, where)}. {expected}. " + fix,
            **details,
        )
    if foreign:
        return warning(
            name,
            f"{other}mask_token_id {mask} is {_STATUS_TEXT.get(where.status, 'of unknown kind')} "
            f"here, so it may work, but check it is the id this drafter was trained with"
            f"{published}.",
            **details,
        )
    if where.status == "unknown" and not (family and mask in family.dflash_mask_ids):
        return warning(
            name,
            f"cannot tell whether mask_token_id {mask} is a special token ("
            f"{where.basis}). {expected}. Fix: make tokenizer_config.json of the target "
            "readable, then run the doctor again.",
            **details,
        )
    token = f" {where.content!r}" if where.content else ""
    if where.status == "unused" and where.length is not None:
        token = f" ({where.length - 1})"
    kind = _STATUS_TEXT.get(where.status, "a published mask id of this tokenizer family")
    return ok(name, f"mask_token_id {mask} is {kind}{token}.", **details)


def _why_ordinary(mask: int, where: TokenIdClass) -> str:
    """What makes ``mask`` an ordinary token, stated so it cannot be read as the opposite."""
    source = (
        "in tokenizer_config.json"
        if where.basis.startswith("tokenizer_config.json")
        else f"in the {where.basis}"
    )
    if where.status == "added_text":
        return f'{where.content!r} is marked "special": false {source}'
    first, length = where.first_added_id, where.length
    if first is not None and mask < first:
        return f"it is below the first added token id {first} {source}"
    span = f" ({first}..{length - 1})" if first is not None and length is not None else ""
    return f"it is inside the added-token range{span} {source} but is not one of the added tokens"


def _expected_mask_text(length: int | None, vocab: int) -> str:
    unused = (
        f", or an unused id in {length}..{vocab - 1}"
        if length is not None and length < vocab
        else ""
    )
    return f"Expected an added special token{unused}"


def _foreign_text(
    mask: int, foreign: list[TokenizerFamily], family: TokenizerFamily | None, vocab: int
) -> str:
    if not foreign:
        return ""
    names = " / ".join(f"{f.name} (vocab {f.vocab_size})" for f in foreign)
    target = f"{family.name} (vocab {vocab})" if family else f"a vocab of {vocab}"
    return (
        f"mask_token_id {mask} is the DFlash mask id of {names} tokenizers, but the target's "
        f"tokenizer is {target}. "
    )


# --- vocab_size / hidden_size / block_size / architecture ---------------------------------------


def check_vocab_size(target: ModelConfig, drafter: ModelConfig) -> Finding:
    return _same_size(
        "vocab_size",
        target.vocab_size,
        drafter.vocab_size,
        "the drafter predicts ids of another tokenizer",
    )


def check_hidden_size(target: ModelConfig, drafter: ModelConfig) -> Finding:
    return _same_size(
        "hidden_size",
        target.hidden_size,
        drafter.hidden_size,
        "the drafter reads the target's hidden states, so the widths must agree",
    )


def _same_size(name: str, target: int | None, drafter: int | None, why: str) -> Finding:
    details = {"target": target, "drafter": drafter}
    if target is None or drafter is None:
        missing = "target" if target is None else "drafter"
        return warning(name, f"the {missing} config has no {name}: not checked.", **details)
    if target != drafter:
        return error(
            name,
            f"the drafter's {name} is {drafter} but the target's is {target}: {why}. "
            f"Expected {target}. Fix: use the drafter published for this target.",
            **details,
        )
    return ok(name, f"{name} {target} matches.", **details)


def check_block_size(drafter: ModelConfig, *, engine: str, num_draft_tokens: int | None) -> Finding:
    name = "block_size"
    block = drafter.block_size
    if block is None:
        return warning(
            name,
            "the drafter config has no block_size (top level or in dflash_config): "
            "engines fall back to 16. Fix: add the block size the drafter was trained with.",
        )
    if not _is_int(block) or block < 2:
        return error(
            name, f"block_size must be an integer of at least 2, found {block!r}.", found=block
        )
    details = {
        "block_size": block,
        "field": drafter.block_size_field,
        "num_draft_tokens": num_draft_tokens,
        "engine": engine,
    }
    if num_draft_tokens is None:
        return ok(
            name,
            f"block_size {block}: num_draft_tokens is not set, so {block - 1} tokens "
            "per step will be drafted.",
            **details,
        )
    if num_draft_tokens < 1:
        return error(
            name, f"num_draft_tokens must be at least 1, found {num_draft_tokens}.", **details
        )
    problem = get_engine(engine).doctor.dflash_block.problem(num_draft_tokens, block)
    if problem is not None:
        return error(name, problem, **details)
    return ok(
        name,
        f"{num_draft_tokens} draft tokens per step fit the drafter's block_size {block}.",
        **details,
    )


def check_architecture(drafter: ModelConfig, *, engine: str, method: str) -> Finding:
    name = "architecture"
    archs = list(drafter.architectures)
    details = {"found": archs, "engine": engine, "method": method}
    if method == "draft_model":
        return ok(
            name,
            f"a separate draft model ({_join(archs) or 'no architectures listed'}) "
            "runs as an ordinary causal LM.",
            **details,
        )
    shown = get_engine(engine).display_name
    supported = get_engine(engine).doctor.drafter_architectures.get(method)
    keywords = ARCHITECTURE_KEYWORDS.get(method)
    if supported is None and keywords is None:
        return ok(name, f"no architecture table for {engine} {method}: not checked.", **details)
    if not archs:
        return warning(name, "the drafter config lists no architectures: not checked.", **details)
    if supported is not None:
        matched = [a for a in archs if a in supported]
        wanted = _join(sorted(supported))
    else:
        matched = [a for a in archs if _arch_matches(a, method)]
        wanted = f"an architecture containing {' or '.join(repr(k) for k in keywords or ())}"
    details["expected"] = sorted(supported) if supported else list(keywords or ())
    guess = _method_for_archs(archs)
    if not matched and keywords and guess is None and all(a.endswith("ForCausalLM") for a in archs):
        return warning(
            name,
            f"the drafter's architectures {archs} name a plain causal LM: original "
            f"{method.upper()} checkpoints are named this way and converted by the engine, "
            f"but so is an ordinary model. Expected {wanted}. Fix: make sure this is an "
            f"EAGLE head (one or two layers; this config has num_hidden_layers = "
            f"{drafter.num_layers}).",
            **details,
        )
    if not matched:
        hint = (
            f" This looks like a {guess} drafter: set speculative.method: {guess}." if guess else ""
        )
        return error(
            name,
            f"the drafter's architectures {archs} are not one "
            f"{shown} loads for method {method!r} (expected "
            f"{wanted}). Fix: use a {method} drafter checkpoint.{hint}",
            **details,
        )
    return ok(name, f"{matched[0]} is a {method} drafter {shown} loads.", **details)


def _arch_matches(arch: str, method: str) -> bool:
    lowered = arch.lower()
    if method == "eagle":
        return "eagle" in lowered and "eagle3" not in lowered
    return any(k in lowered for k in ARCHITECTURE_KEYWORDS.get(method, ()))


def _method_for_archs(archs: list[str]) -> str | None:
    lowered = " ".join(archs).lower()
    for keyword, method in (("dflash", "dflash"), ("eagle3", "eagle3"), ("eagle", "eagle")):
        if keyword in lowered:
            return method
    return None


# --- thinking / mtp -----------------------------------------------------------------------------


def check_thinking(
    target: ModelConfig, drafter: ModelConfig, *, chat_template_kwargs: Mapping[str, Any] | None
) -> Finding:
    name = "thinking"
    thinks = thinking_requested(target.thinking_default, chat_template_kwargs)
    details = {
        "drafter_trained_with_thinking": drafter.trained_with_thinking,
        "basis": drafter.thinking_basis,
        "template_default": target.thinking_default,
        "chat_template_kwargs": dict(chat_template_kwargs or {}),
        "requests_think": thinks,
    }
    if drafter.trained_with_thinking is None:
        return ok(
            name,
            "the drafter config does not say whether it was trained with thinking: not checked.",
            **details,
        )
    if drafter.trained_with_thinking:
        return ok(
            name, f"the drafter was trained with thinking ({drafter.thinking_basis}).", **details
        )
    if not thinks:
        why = (
            "the target has no chat template"
            if target.chat_template is None
            else "the chat template does not think"
            if target.thinking_default != "on"
            else "the workload turns thinking off"
        )
        return ok(
            name,
            f"the drafter was trained without thinking and requests will not think ({why}).",
            **details,
        )
    return warning(
        name,
        f"the drafter was trained without thinking ({drafter.thinking_basis}), but the target's "
        "chat template thinks by default and the workload does not turn it off: acceptance drops "
        "on <think> text. Expected enable_thinking: false. Fix: set workload.chat_template_kwargs: "
        "{enable_thinking: false}, or use a drafter trained with thinking.",
        **details,
    )


def check_mtp(target: ModelConfig) -> Finding:
    name = "mtp"
    label = target.name or "the target"
    if not target.mtp_layers:
        found = (
            f"{target.mtp_field} = {target.mtp_layers}"
            if target.mtp_field
            else (f"none of {', '.join(MTP_LAYER_FIELDS)}")
        )
        return error(
            name,
            f"method mtp drafts with the target's own multi-token-prediction "
            f"layers, but {label} has none ({found} in its config; dense Qwen3 models "
            "have none). Fix: pick a target with an MTP head (Qwen3.5/3.6, DeepSeek-V3, "
            "GLM-4.5...) or a drafter method such as eagle3 or dflash.",
            field=target.mtp_field,
            found=target.mtp_layers,
        )
    return ok(
        name,
        f"{label} has {target.mtp_layers} MTP layer(s) ({target.mtp_field}).",
        field=target.mtp_field,
        found=target.mtp_layers,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _join(values: Any) -> str:
    return ", ".join(str(v) for v in values)
