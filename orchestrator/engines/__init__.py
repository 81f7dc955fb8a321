"""Engine adapters, keyed by the name users write in playbooks (``engine: vllm``)."""

from __future__ import annotations

from orchestrator.engines.base import EngineAdapter
from orchestrator.engines.sglang import SglangAdapter
from orchestrator.engines.vllm import VllmAdapter
from orchestrator.errors import SpecError

ENGINES: dict[str, EngineAdapter] = {
    VllmAdapter.name: VllmAdapter(),
    SglangAdapter.name: SglangAdapter(),
}


def adapter_for(run) -> EngineAdapter:  # type: ignore[no-untyped-def]
    """The adapter of ``run.engine``; SpecError naming the run for an engine orch lacks."""
    try:
        return ENGINES[run.engine]
    except KeyError:
        raise SpecError(
            f"engine {run.engine!r} is not supported (known: {', '.join(sorted(ENGINES))})",
            run=run.name,
        ) from None


__all__ = ["ENGINES", "EngineAdapter", "adapter_for"]
