"""The names a playbook may write for an engine and a speculative method.

Dependency-free on purpose: the playbook model (``config/playbook.py``) types its fields with
these literals, and the engines (which import the config package) check against the same
tuples, so the two lists cannot drift apart. Each engine says which of the methods it serves
(``Engine.speculative_methods``) and how it spells them on its command line.
"""

from __future__ import annotations

from typing import Literal, get_args

EngineName = Literal["vllm", "sglang"]
SpeculativeMethod = Literal["none", "dflash", "mtp", "eagle", "eagle3", "ngram"]

ENGINE_NAMES: tuple[EngineName, ...] = get_args(EngineName)
SPECULATIVE_METHODS: tuple[SpeculativeMethod, ...] = get_args(SpeculativeMethod)

# Methods drafting with a separate checkpoint (speculative.draft_model is required).
NEEDS_DRAFT_MODEL: frozenset[SpeculativeMethod] = frozenset({"dflash", "eagle", "eagle3"})
# Methods drafting a chain with an EAGLE-style head: SGLang gives them num-steps and a top-k.
CHAIN_METHODS: frozenset[SpeculativeMethod] = frozenset({"mtp", "eagle", "eagle3"})
