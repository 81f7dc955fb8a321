"""JSON Schema of hosts.yaml and playbooks, from the same models that validate them.

Editors (VS Code's YAML extension, JetBrains) complete keys and show each field's description
from it: `# yaml-language-server: $schema=...` at the top of a file, or a `yaml.schemas` setting.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from orchestrator.config.errors import did_you_mean
from orchestrator.config.inventory import InventoryFile
from orchestrator.config.playbook import Playbook
from orchestrator.errors import ConfigError

SCHEMAS: dict[str, type[BaseModel]] = {"hosts": InventoryFile, "playbook": Playbook}


def json_schema(kind: Literal["hosts", "playbook"]) -> dict[str, Any]:
    model = SCHEMAS.get(kind)
    if model is None:
        raise ConfigError(
            f"unknown schema {kind!r}{did_you_mean(kind, SCHEMAS)}; allowed: {', '.join(SCHEMAS)}"
        )
    schema = model.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
