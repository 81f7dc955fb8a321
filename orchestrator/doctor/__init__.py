"""The doctor: pure checks of (target config, drafter config, run spec, host facts) -> findings.

Before a run it catches the speculative-decoding mistakes no engine reports (a wrong DFlash
mask id or layer ids make acceptance collapse silently); after a run it recognises a collapse
and ranks its likely causes. Everything here is pure; reading files is the caller's job
(``orchestrator.remote.modelfiles`` on a host, ``orchestrator.cli.doctor`` locally).
"""

from __future__ import annotations

from orchestrator.doctor.checks import run_checks
from orchestrator.doctor.collapse import (
    Cause,
    Collapse,
    acceptance_floor,
    detect_collapse,
    rank_causes,
)
from orchestrator.doctor.enginelog import RequestedSettings, engine_silent_changes
from orchestrator.doctor.findings import Finding, has_errors, problems, to_json
from orchestrator.doctor.host import HostProbe, estimate_parameters, run_host_checks
from orchestrator.doctor.launch import launch_checks
from orchestrator.doctor.modelconfig import ModelConfig
from orchestrator.doctor.reference import reference_layer_ids
from orchestrator.doctor.runspec import causes_for_run, check_run, model_from_agent, planned_port

__all__ = [
    "Cause",
    "Collapse",
    "Finding",
    "HostProbe",
    "ModelConfig",
    "RequestedSettings",
    "acceptance_floor",
    "causes_for_run",
    "check_run",
    "detect_collapse",
    "engine_silent_changes",
    "estimate_parameters",
    "has_errors",
    "launch_checks",
    "model_from_agent",
    "planned_port",
    "problems",
    "rank_causes",
    "reference_layer_ids",
    "run_checks",
    "run_host_checks",
    "to_json",
]
