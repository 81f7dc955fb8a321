"""The engines orch drives, one object each, keyed by the name users write (``engine: vllm``).

An ``Engine`` (``base.py``; ``VllmEngine``, ``SglangEngine``) is the one place that says what
orch knows about that engine: its flags and the reader every module uses for them, its argv,
readiness endpoints, prefix-cache reset (``cache_reset``), log parser, Prometheus spec-decode
delta, start-up failure classifier, stats interval, doctor facts, Python package name and
speculative methods.

The engine objects load on first use: ``orchestrator.engines.flags`` (the engines' real flags)
is also read by the simulator, which must not pay for the config models at every start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING

from orchestrator.config.methods import ENGINE_NAMES, EngineName
from orchestrator.errors import SpecError

if TYPE_CHECKING:
    from orchestrator.config.playbook import RunSpec
    from orchestrator.engines.base import Engine


@cache
def _registry() -> dict[str, Engine]:
    from orchestrator.engines.sglang import SglangEngine
    from orchestrator.engines.vllm import VllmEngine

    return {VllmEngine.name: VllmEngine(), SglangEngine.name: SglangEngine()}


def get_engine(name: str, *, run: str | None = None) -> Engine:
    """The engine users call ``name`` (an enum of names works too); SpecError for one orch lacks,
    naming ``run`` when there is one (its ``field`` is ``engine``)."""
    engines = _registry()
    key = str(getattr(name, "value", name)).strip().lower()
    try:
        return engines[key]
    except KeyError:
        raise SpecError(
            f"engine {key!r} is not supported (known: {', '.join(sorted(engines))})",
            run=run,
            field=("engine",),
        ) from None


def engine_for(run: RunSpec) -> Engine:
    """The engine of ``run``."""
    return get_engine(run.engine, run=run.name)


def engine_serving(scrape: str | None) -> EngineName | None:
    """The engine whose /metrics text ``scrape`` is (None: no scrape, or no engine orch knows):
    each engine's Prometheus metrics are namespaced by its name (``vllm:...``, ``sglang:...``)."""
    if not scrape:
        return None
    text = "\n" + scrape
    return next((name for name in ENGINE_NAMES if f"\n{name}:" in text), None)


def engine_packages() -> dict[str, str]:
    """Engine name -> the Python package a host's probe reports its version of."""
    return {name: engine.package for name, engine in _registry().items()}


class _Registry(Mapping[str, "Engine"]):
    """The registry as a typed mapping that loads the engine objects on first use."""

    def __getitem__(self, name: str) -> Engine:
        return _registry()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_registry())

    def __len__(self) -> int:
        return len(_registry())

    def __repr__(self) -> str:
        return f"ENGINES({', '.join(self)})"


# Engine name -> its object, in registry order (vllm first): what enums and columns list.
ENGINES: Mapping[str, Engine] = _Registry()

__all__ = ["ENGINES", "engine_for", "engine_packages", "engine_serving", "get_engine"]
