"""Engine adapters, keyed by the name users write in playbooks (``engine: vllm``).

The adapters load on first use: ``orchestrator.engines.flags`` (the engines' real flags) is also
read by the simulator, which must not pay for the config models at every start.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from orchestrator.errors import SpecError

if TYPE_CHECKING:
    from orchestrator.engines.base import EngineAdapter


@cache
def _registry() -> dict[str, EngineAdapter]:
    from orchestrator.engines.sglang import SglangAdapter
    from orchestrator.engines.vllm import VllmAdapter

    return {VllmAdapter.name: VllmAdapter(), SglangAdapter.name: SglangAdapter()}


def adapter_for(run) -> EngineAdapter:  # type: ignore[no-untyped-def]
    """The adapter of ``run.engine``; SpecError naming the run for an engine orch lacks."""
    engines = _registry()
    try:
        return engines[run.engine]
    except KeyError:
        raise SpecError(
            f"engine {run.engine!r} is not supported (known: {', '.join(sorted(engines))})",
            run=run.name,
        ) from None


def __getattr__(name: str) -> Any:
    if name == "ENGINES":
        return _registry()
    if name == "EngineAdapter":
        from orchestrator.engines.base import EngineAdapter

        return EngineAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENGINES", "EngineAdapter", "adapter_for"]
