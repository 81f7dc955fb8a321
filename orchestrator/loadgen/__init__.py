"""Controller side of load generation: prompt sources, the ``loadgen`` verb's spec, and typed
records of what it streams back. The load generator itself runs on the hosts
(``orchestrator/remote/loadgen.py``).
"""

from __future__ import annotations

from orchestrator.loadgen.prompts import PromptSet, build_loadgen_spec, load_prompts
from orchestrator.loadgen.records import Chunk, LoadgenResult, RequestRecord

__all__ = [
    "Chunk",
    "LoadgenResult",
    "PromptSet",
    "RequestRecord",
    "build_loadgen_spec",
    "load_prompts",
]
