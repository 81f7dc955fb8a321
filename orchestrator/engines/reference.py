"""The shapes of the published facts each engine object carries (the values live in
``vllm.py`` and ``sglang.py``, next to the argv they describe).

When an engine release disagrees with a value, the engine wins: fix the value there and add the
case to ``tests/unit/test_engine_registry.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class MethodSupport:
    """Which engine releases run a method.

    ``min_version``: first release known to have it (older ones are refused). When the first
    release is not known, ``confirmed_version`` is a release known to have it: newer ones pass,
    older ones get a warning rather than a guess.
    """

    min_version: str | None
    confirmed_version: str | None
    source: str


@dataclass(frozen=True)
class DflashBlock:
    """How the engine fits ``num_draft_tokens`` N into a DFlash drafter's block of B tokens.

    ``exact``: the engine verifies whole blocks, so N + 1 must equal B (SGLang); otherwise any
    N up to B - 1 fits (vLLM). ``setting`` names the engine's own setting in the message.
    """

    exact: bool
    setting: str

    def problem(self, num_draft_tokens: int, block: int) -> str | None:
        """Why ``num_draft_tokens`` does not fit ``block`` on this engine (None: it fits)."""
        if self.exact and num_draft_tokens + 1 != block:
            return (
                f"{self.setting} (num_draft_tokens + 1 = {num_draft_tokens + 1}) must equal "
                f"the drafter's block_size {block}. Fix: set speculative.num_draft_tokens "
                f"to {block - 1}."
            )
        if not self.exact and num_draft_tokens > block - 1:
            return (
                f"num_draft_tokens {num_draft_tokens} does not fit the drafter's block of "
                f"{block}: {self.setting} must be <= block_size - 1 = {block - 1}. "
                f"Fix: set speculative.num_draft_tokens to {block - 1} or less."
            )
        return None


@dataclass(frozen=True)
class DflashLaunch:
    """Launch settings a healthy DFlash drafter needs on this engine to accept as trained.

    ``attention_flag`` / ``attention_env``: where the attention backend is chosen (the env
    variable is older releases' spelling); ``backend``: the one DFlash runs with;
    ``runner_env``: the variable (set to "1") drafters mixing sliding-window and full
    attention layers need, None when the engine needs none.
    """

    attention_flag: str
    attention_env: str | None
    backend: str
    runner_env: str | None


@dataclass(frozen=True)
class DoctorFacts:
    """What the doctor compares a run against on this engine.

    ``layer_shift``: DFlash captures the hidden state after layer ``id`` at index ``id + shift``
    (vLLM: 1, index 0 being the embedding output), so an id of L - 1 overflows when shift > 0.
    ``method_support`` is keyed by the doctor's canonical method names (``reference.py`` of
    the doctor), which include methods orch cannot launch yet (``draft_model``, ``suffix``).
    ``drafter_architectures``: the drafter classes the engine loads for a method; a method not
    listed is matched by keyword (any architecture containing "eagle3" for eagle3).
    ``dflash_block``: the block-size rule; ``dflash_launch``: settings the doctor checks before
    a DFlash launch (None: the engine has none); ``attention_fix``: what to do when a collapse
    points at the attention backend.
    """

    layer_shift: int
    default_memory_fraction: float
    dflash_block: DflashBlock
    attention_fix: str
    dflash_launch: DflashLaunch | None = None
    method_support: Mapping[str, MethodSupport] = field(default_factory=dict)
    drafter_architectures: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class StatsInterval:
    """How often the engine logs the stats lines orch reads acceptance from.

    ``setting`` is an environment variable (``source="env"``) or a flag of the engine
    (``source="flag"``); ``default`` is what applies when the run sets neither.
    """

    setting: str
    default: float
    unit: str
    source: Literal["env", "flag"]
    line: str = "stats line"  # what the line is, in the engine's words (notes name it)

    def in_effect(self, *, env: Mapping[str, str], flag_value: str | None) -> str:
        """The interval the engine runs with, as written (``flag_value``: the flag's value)."""
        given = env.get(self.setting) if self.source == "env" else flag_value
        return given or f"{self.default:g}"
