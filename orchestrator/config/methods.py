"""The names a playbook may write for an engine and a speculative method.

Dependency-free on purpose, and in config/ because the playbook model (``config/playbook.py``)
types its fields with these literals; the engines (a layer above) check against the same
tuples, so the two lists cannot drift apart. Each engine says which of the methods it serves
(``Engine.speculative_methods``), how it spells them on its command line, and the other names
people write for them (``Engine.method_aliases``).
"""

from __future__ import annotations

from typing import Literal, get_args

EngineName = Literal["vllm", "sglang"]
SpeculativeMethod = Literal["none", "dflash", "mtp", "eagle", "eagle3", "ngram", "draft_model"]

ENGINE_NAMES: tuple[EngineName, ...] = get_args(EngineName)
SPECULATIVE_METHODS: tuple[SpeculativeMethod, ...] = get_args(SpeculativeMethod)

# Methods drafting with a separate checkpoint (speculative.draft_model is required).
NEEDS_DRAFT_MODEL: frozenset[SpeculativeMethod] = frozenset(
    {"dflash", "eagle", "eagle3", "draft_model"}
)
# Methods drafting a chain step by step (an EAGLE-style head, or SGLang's STANDALONE draft
# model, which runs on its EAGLE worker): SGLang gives them num-steps and a top-k.
CHAIN_METHODS: frozenset[SpeculativeMethod] = frozenset({"mtp", "eagle", "eagle3", "draft_model"})

# Methods some engine serves that a playbook cannot ask for yet: the doctor still knows them.
DOCTOR_ONLY_METHODS: tuple[str, ...] = ("suffix", "dspark")
# Every speculative method orch knows by its canonical name (what aliases resolve to).
KNOWN_METHODS: tuple[str, ...] = (
    *(m for m in SPECULATIVE_METHODS if m != "none"),
    *DOCTOR_ONLY_METHODS,
)
# Methods that need a separate drafter checkpoint, and those with no model at all.
DRAFTER_METHODS: frozenset[str] = NEEDS_DRAFT_MODEL | {"dspark"}
MODEL_FREE_METHODS: frozenset[str] = frozenset({"ngram", "suffix"})

# What people read for each method (plot legends, tables).
METHOD_DISPLAY_NAMES: dict[str, str] = {
    "dflash": "DFlash",
    "mtp": "MTP",
    "eagle": "EAGLE",
    "eagle3": "EAGLE-3",
    "ngram": "n-gram",
    "draft_model": "draft model",
    "suffix": "suffix",
    "dspark": "dspark",
}


def display_name(method: str) -> str:
    """``eagle3`` -> ``EAGLE-3``; a method without a display name is shown as written."""
    return METHOD_DISPLAY_NAMES.get(method, method)
