"""hosts.yaml and playbooks: typed models, YAML loading with exact error locations, JSON Schema."""

from __future__ import annotations

from orchestrator.config.errors import ConfigValidationError, did_you_mean
from orchestrator.config.hostconfig import (
    GpuSpec,
    HostConfig,
    expand_env,
    is_secret_key,
    mask,
    secret_values,
)
from orchestrator.config.inventory import Inventory, load_inventory, parse_gpus
from orchestrator.config.playbook import (
    Playbook,
    RunSpec,
    SpeculativeSpec,
    WorkloadSpec,
    load_playbook,
)
from orchestrator.config.schema import json_schema
from orchestrator.config.yamlload import Mark

__all__ = [
    "ConfigValidationError",
    "GpuSpec",
    "HostConfig",
    "Inventory",
    "Mark",
    "Playbook",
    "RunSpec",
    "SpeculativeSpec",
    "WorkloadSpec",
    "did_you_mean",
    "expand_env",
    "is_secret_key",
    "json_schema",
    "load_inventory",
    "load_playbook",
    "mask",
    "parse_gpus",
    "secret_values",
]
