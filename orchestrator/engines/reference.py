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
class DoctorFacts:
    """What the doctor compares a run against on this engine.

    ``layer_shift``: DFlash captures the hidden state after layer ``id`` at index ``id + shift``
    (vLLM: 1, index 0 being the embedding output), so an id of L - 1 overflows when shift > 0.
    ``method_support`` is keyed by the doctor's canonical method names (``reference.py`` of
    the doctor), which include methods orch cannot launch yet (``draft_model``, ``suffix``).
    ``drafter_architectures``: the drafter classes the engine loads for a method; a method not
    listed is matched by keyword (any architecture containing "eagle3" for eagle3).
    """

    layer_shift: int
    default_memory_fraction: float
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

    def in_effect(self, *, env: Mapping[str, str], flag_value: str | None) -> str:
        """The interval the engine runs with, as written (``flag_value``: the flag's value)."""
        given = env.get(self.setting) if self.source == "env" else flag_value
        return given or f"{self.default:g}"
