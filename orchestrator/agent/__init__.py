"""Controller side of the remote agent: bundle it, push it, call its verbs, type its answers."""

from __future__ import annotations

from orchestrator.agent.bundle import AgentBundle, build_bundle
from orchestrator.agent.client import Agent, AgentClient
from orchestrator.agent.facts import GpuInfo, GpuProcess, HostFacts, compare_gpus

__all__ = [
    "Agent",
    "AgentClient",
    "AgentBundle",
    "GpuInfo",
    "GpuProcess",
    "HostFacts",
    "build_bundle",
    "compare_gpus",
]
