"""Published facts the checks compare against that belong to no one engine (tokenizer
families, method names, checkpoint conventions), kept in one place so they can be audited.

What differs by engine (layer-id shift, releases per method, drafter architectures, memory
default, block-size rule, DFlash launch settings, method spellings) is on the engine object: ``get_engine(name).doctor`` (``orchestrator.engines``).
Every table says where its values come from. When an engine or a checkpoint disagrees with a
value here, the engine/checkpoint wins: fix the table and add the case to the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from orchestrator.config.methods import KNOWN_METHODS
from orchestrator.engines import ENGINES

# --- DFlash target layer choice -----------------------------------------------------------------


def reference_layer_ids(num_target_layers: int, captures: int) -> list[int]:
    """The layer ids DFlash's training code picks for a target of ``num_target_layers``.

    Same rule as z-lab's ``build_target_layer_ids`` (mirrored by SGLang and vLLM): one capture
    takes the middle layer; otherwise ``captures`` ids spread from layer 1 to layer L - 3 with
    Python's round (half to even). 36 layers, 5 captures -> [1, 9, 17, 25, 33].
    """
    if num_target_layers <= 0 or captures <= 0:
        raise ValueError(
            f"need positive layer and capture counts, got {num_target_layers}, {captures}"
        )
    if captures == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (captures - 1)) for i in range(captures)]


# --- Tokenizer families -------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerFamily:
    """A tokenizer family and the DFlash mask ids published for it.

    ``first_added_id``: ids below it are BPE text tokens. ``length``: one past the last token
    the tokenizer defines (``len(tokenizer)``); ids from there up to ``vocab_size`` - 1 are
    unused embedding rows.
    """

    name: str
    vocab_size: int
    first_added_id: int
    length: int
    dflash_mask_ids: tuple[int, ...]


# Qwen3: added tokens 151643 (<|endoftext|>) .. 151668 (</think>), embedding rows 151936;
# z-lab's Qwen3 drafters (e.g. Qwen3-4B/8B-DFlash-b16) use 151669, the first unused id.
# Qwen3.5 / Qwen3.6: added tokens 248044 (<|endoftext|>) .. 248076 (<|audio_pad|>), so
# len(tokenizer) = 248077 and 248070 is <|audio_start|>; z-lab's Qwen3.6-27B-DFlash uses 248070,
# its Qwen3.5-122B-A10B-DFlash uses 248077. Embedding rows 248320.
TOKENIZER_FAMILIES: tuple[TokenizerFamily, ...] = (
    TokenizerFamily("Qwen3", 151936, 151643, 151669, (151669,)),
    TokenizerFamily("Qwen3.5/3.6", 248320, 248044, 248077, (248070, 248077)),
)


def family_for_vocab(vocab_size: int | None) -> TokenizerFamily | None:
    for family in TOKENIZER_FAMILIES:
        if family.vocab_size == vocab_size:
            return family
    return None


def families_using_mask_id(mask_id: int) -> list[TokenizerFamily]:
    return [f for f in TOKENIZER_FAMILIES if mask_id in f.dflash_mask_ids]


# --- Methods, architectures, versions -----------------------------------------------------------

# The playbook's way of saying "no speculative decoding" (a plain run: nothing to check). The
# methods themselves and their classes (drafter, model-free) are ``config/methods.py``'s.
NO_SPECULATION = frozenset({"none"})


@cache
def method_aliases() -> dict[str, str]:
    """Every name people write for a method -> its canonical name: the canonical names
    themselves, then each engine's own spellings (``Engine.method_aliases``: SGLang's
    algorithm names such as NEXTN, vLLM's deprecated per-family MTP names)."""
    aliases = {method: method for method in KNOWN_METHODS}
    for engine in ENGINES.values():
        aliases.update({alias.lower(): method for alias, method in engine.method_aliases.items()})
    return aliases


def known_method_names() -> frozenset[str]:
    """What ``--method`` and the checks accept: every alias, and "none"."""
    return frozenset(method_aliases()) | NO_SPECULATION


def canonical_method(method: str | None) -> str | None:
    if method is None:
        return None
    key = method.strip().lower()
    return method_aliases().get(key, key)


# Drafter architectures for methods whose checkpoints no engine lists by class name
# (``Engine.doctor.drafter_architectures`` lists the others). EAGLE-3 checkpoints name
# themselves in several ways (LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM, Eagle3Qwen...),
# so any architecture containing "eagle3" is accepted for eagle3; same idea for EAGLE-1/2.
ARCHITECTURE_KEYWORDS: dict[str, tuple[str, ...]] = {
    "eagle3": ("eagle3",),
    "eagle": ("eagle",),
}

# Fields that give a target's number of multi-token-prediction layers, by model family:
# DeepSeek-V3 / GLM-4.5 / MiMo style and Qwen3-Next / Qwen3.5 / Qwen3.6 style.
MTP_LAYER_FIELDS: tuple[str, ...] = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.33.0rc1.dev5+g1a2b' -> (0, 33, 0): release numbers only, enough to order releases."""
    parts: list[int] = []
    for piece in version.strip().lstrip("v").split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


# --- Drafters and thinking ----------------------------------------------------------------------

# Boolean fields a drafter config may use to say whether it was trained on thinking traces,
# looked up inside dflash_config first, then at the top level. No published checkpoint is
# known to carry one yet; a training recipe that writes one is read without code changes.
THINKING_FIELDS: tuple[str, ...] = ("trained_with_thinking", "enable_thinking", "thinking")

# Published drafters documented as trained without thinking (z-lab's model table marks them
# "(non-thinking)"), matched on the last part of the model id or directory name.
NON_THINKING_DRAFTERS: frozenset[str] = frozenset({"qwen3-4b-dflash-b16", "qwen3-8b-dflash-b16"})
