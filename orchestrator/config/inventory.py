"""hosts.yaml: the GPU hosts, their defaults and groups, resolved into `HostConfig` records.

Precedence is defaults < groups (in the order they are declared) < the host itself; scalars
override, ``env`` and ``tags`` merge. A group's name is also a tag of its members, so a playbook
can select ``hosts: [lab]`` whether ``lab`` is a tag or a group.

Slurm clusters (``clusters:``, see `cluster.py`) sit beside hosts and are selected the same way,
by name or tag; defaults and groups apply to hosts only. A file needs at least one of the two.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from yaml.nodes import MappingNode, ScalarNode

from orchestrator.config.cluster import ClusterFields, cluster_config
from orchestrator.config.errors import did_you_mean, show, validate
from orchestrator.config.fields import (
    ClusterName,
    EnvDict,
    GroupName,
    HostName,
    ScalarStr,
    Selectors,
    StrictModel,
    name_check,
)
from orchestrator.config.hostconfig import (
    DEFAULT_PYTHON,
    DEFAULT_WORKDIR,
    ClusterConfig,
    GpuSpec,
    HostConfig,
)
from orchestrator.config.yamlload import STR_TAG, Document, Loc, Mark, load_yaml
from orchestrator.errors import ConfigError

DEFAULT_SSH_CONFIG = "~/.ssh/config"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"

# The shared field types are re-exported: playbook.py builds its models on them.
__all__ = [
    "DEFAULT_SSH_CONFIG",
    "EnvDict",
    "Gpus",
    "Inventory",
    "InventoryFile",
    "ScalarStr",
    "Selectors",
    "StrictModel",
    "load_inventory",
    "name_check",
    "parse_gpus",
]


class GpuModel(StrictModel):
    """The GPUs a host is expected to have; ``count`` 0 is a CPU host (``gpus: none``)."""

    count: int = Field(ge=0, description="Number of GPUs; 0: a CPU host (`gpus: none`).")
    model: str | None = Field(
        None, description="GPU model as nvidia-smi names it, e.g. 'RTX A6000'."
    )
    bandwidth_gb_s: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Peak memory bandwidth of one GPU in GB/s, for the % of roofline "
        "(default: orch's table of GPU models, e.g. RTX A6000 768).",
    )

    @model_validator(mode="after")
    def _cpu_has_no_model(self) -> GpuModel:
        if self.count == 0 and self.model:
            raise ValueError(
                f"0 GPUs of model {self.model!r}: a CPU host is written `gpus: none`, "
                "a GPU host as '<count> x <model>'"
            )
        return self


_GPUS = re.compile(r"\s*(\d+)\s*(?:[xX×*]\s*(\S.*?))?\s*")
# A CPU host: `gpus: none` (the spelling the docs use), `cpu` or 0, in any case.
CPU_WORDS = ("none", "cpu")
_CPU_PATTERN = r"^\s*([Nn][Oo][Nn][Ee]|[Cc][Pp][Uu])\s*$"


def parse_gpus(value: Any) -> Any:
    """``"2 x RTX A6000"``, ``"2xA6000"``, ``2`` or ``{count, model}``; ``none``, ``cpu`` or
    ``0`` for a CPU host (count 0)."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return {"count": value}
    if isinstance(value, str) and value.strip().lower() in CPU_WORDS:
        return {"count": 0}
    if isinstance(value, str) and (m := _GPUS.fullmatch(value)):
        return {"count": int(m[1]), "model": m[2]}
    raise ValueError(
        f"expected '<count> x <model>' (e.g. '2 x RTX A6000'), a count, {{count, model}}, or "
        f"none (a CPU host); found {show(value)}"
    )


Gpus = Annotated[
    GpuModel | None,
    BeforeValidator(parse_gpus),
    WithJsonSchema(
        {
            "description": "Expected GPUs: '2 x RTX A6000', '2xA6000', 2 or {count: 2, model: "
            "RTX A6000}; `none` (also `cpu` or 0) for a CPU host: no GPU, no NVIDIA driver, the "
            "engine runs on the CPU, one server at a time.",
            "anyOf": [
                {"type": "string", "pattern": r"^\s*\d+\s*([xX×*]\s*\S.*)?$"},
                {"type": "string", "pattern": _CPU_PATTERN, "description": "a CPU host"},
                {"type": "integer", "minimum": 0},
                GpuModel.model_json_schema(),
                {"type": "null"},
            ],
        }
    ),
]


class HostFields(StrictModel):
    """Settings of one host; the same keys serve as defaults and group settings."""

    model_config = ConfigDict(title="Host")

    address: str | None = Field(
        None,
        description="IP or DNS name; an alias from ~/.ssh/config works too. Default: the host's name.",
    )
    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="SSH port (default 22 or ~/.ssh/config)."
    )
    user: str | None = Field(
        None, description="SSH user (default: ~/.ssh/config or the local user)."
    )
    identity_file: str | None = Field(
        None, description="Private key file, e.g. ~/.ssh/lab_ed25519."
    )
    proxy_jump: str | None = Field(None, description="Jump host, as OpenSSH's ProxyJump.")
    python: str | None = Field(
        None,
        description="Remote interpreter (typically the engine's venv), e.g. /opt/venvs/vllm/bin/python. "
        "Embedded hosts default to orch's own interpreter (the engine simulator) and ignore the one "
        "in `defaults`; another one (a real engine's venv) runs its real engine.",
    )
    workdir: str | None = Field(
        None, description=f"Remote working directory (default {DEFAULT_WORKDIR})."
    )
    env: EnvDict | None = None
    gpus: Gpus = None
    tags: list[str] | None = Field(
        None, description="Labels for selecting hosts (playbook `hosts:`, --only)."
    )
    transport: Literal["ssh", "embedded"] | None = Field(
        None,
        description="'ssh' (default) or 'embedded': an in-process SSH server on this machine, with "
        "the engine simulator and simulated GPUs unless `python` or `gpus: none` say otherwise.",
    )
    connect_timeout: Annotated[float, Field(gt=0)] | None = Field(
        None, description="Seconds to wait for SSH to connect (default 15)."
    )
    agent_timeout_s: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Seconds a quick agent call (probe, status, launch, a file over SFTP) may "
        "take on this host before it is reported as blocked (defaults: 60-180 per call).",
    )


class GroupFields(HostFields):
    """A named set of hosts sharing settings; the group's name is also a tag of its members."""

    model_config = ConfigDict(title="Group")

    hosts: list[str] = Field(default_factory=list, description="Names of the hosts in this group.")


class InventoryFile(StrictModel):
    """orch inventory (hosts.yaml): the GPU hosts orch may use."""

    model_config = ConfigDict(
        title="orch hosts.yaml",
        json_schema_extra={"anyOf": [{"required": ["hosts"]}, {"required": ["clusters"]}]},
    )

    defaults: HostFields | None = Field(
        None, description="Settings every host gets unless it overrides them."
    )
    groups: dict[GroupName, GroupFields] | None = Field(
        None, description="Groups, applied in declaration order."
    )
    hosts: dict[HostName, HostFields | None] | None = Field(
        None, description="The hosts, keyed by name (may be left out when clusters are given)."
    )
    clusters: dict[ClusterName, ClusterFields] | None = Field(
        None, description="Slurm clusters, keyed by name, reached through their login nodes."
    )
    known_hosts: str | None = Field(
        None, description="known_hosts file to verify host keys against."
    )
    ssh_config: str = Field(
        DEFAULT_SSH_CONFIG,
        description="OpenSSH client config to honour (Host aliases, HostName, User, Port, IdentityFile, ProxyJump).",
    )


_SCALARS = (
    "address",
    "port",
    "user",
    "identity_file",
    "proxy_jump",
    "python",
    "workdir",
    "gpus",
    "transport",
    "connect_timeout",
    "agent_timeout_s",
)


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, HostConfig]
    groups: dict[str, tuple[str, ...]]
    known_hosts: Path | None = None
    ssh_config: Path | None = None
    source_path: Path | None = None
    clusters: dict[str, ClusterConfig] = field(default_factory=dict)

    @property
    def tags(self) -> list[str]:
        """Every tag (group names included), in order of first appearance."""
        return list(dict.fromkeys(tag for host in self.hosts.values() for tag in host.tags))

    @property
    def cluster_tags(self) -> list[str]:
        """Every tag of a cluster, in order of first appearance."""
        return list(dict.fromkeys(tag for c in self.clusters.values() for tag in c.tags))

    def __getitem__(self, name: str) -> HostConfig:
        return self.hosts[name]

    def select(
        self,
        selectors: Sequence[str] | str | None = None,
        *,
        origin: Mark | Sequence[Mark] | None = None,
    ) -> list[HostConfig]:
        """Hosts matching any selector (a host name, tag or group), in inventory order.

        ``None``, ``[]`` or ``"all"`` select every host. ``origin`` is where the selectors were
        written (one mark, or one per selector), so that an unknown one is reported there. A
        selector naming a cluster (or a tag only clusters have) selects no host and is no error:
        `select_clusters` takes it.
        """
        if isinstance(selectors, str):
            selectors = [selectors]
        if not selectors or "all" in selectors:
            return list(self.hosts.values())
        chosen: set[str] = set()
        for i, selector in enumerate(selectors):
            matched = [
                h.name for h in self.hosts.values() if selector == h.name or selector in h.tags
            ]
            if not matched and not self._cluster_names(selector):
                if isinstance(origin, Mark) or origin is None:
                    mark = origin
                else:
                    mark = origin[i] if i < len(origin) else None
                raise self._unknown(selector, mark)
            chosen.update(matched)
        return [host for name, host in self.hosts.items() if name in chosen]

    def select_clusters(self, selectors: Sequence[str] | str | None = None) -> list[ClusterConfig]:
        """Clusters matching any selector (a cluster name or tag), in inventory order.

        ``None``, ``[]`` or ``"all"`` select every cluster, as `select` does hosts. A selector
        that names no cluster is skipped: it names hosts, and `select` reports unknown ones.
        """
        if isinstance(selectors, str):
            selectors = [selectors]
        if not selectors or "all" in selectors:
            return list(self.clusters.values())
        chosen = {name for selector in selectors for name in self._cluster_names(selector)}
        return [cluster for name, cluster in self.clusters.items() if name in chosen]

    def _cluster_names(self, selector: str) -> list[str]:
        return [c.name for c in self.clusters.values() if selector == c.name or selector in c.tags]

    def _unknown(self, selector: str, origin: Mark | None) -> ConfigError:
        names, tags = list(self.hosts), list(dict.fromkeys(self.tags + self.cluster_tags))
        clusters = list(self.clusters)
        what = "host, cluster or tag" if clusters else "host or tag"
        listing = f"; clusters: {', '.join(clusters)}" if clusters else ""
        message = (
            f"unknown {what} {selector!r}{did_you_mean(selector, names + clusters + tags)}; "
            f"hosts: {', '.join(names) or '(none)'}{listing}; tags: {', '.join(tags) or '(none)'}"
        )
        hint = f"add it to {self.source_path or 'hosts.yaml'} or pick one of the names above"
        if origin is not None:
            return origin.error(message, hint=hint)
        return ConfigError(
            message, file=str(self.source_path) if self.source_path else None, hint=hint
        )


def load_inventory(path: str | Path) -> Inventory:
    doc = load_yaml(path)
    _time_limits_as_written(doc)
    spec = validate(InventoryFile, doc.data, doc, doc.root)
    _check_not_empty(doc, spec)
    groups = spec.groups or {}
    host_specs = spec.hosts or {}
    _check_groups(doc, groups, host_specs)
    _check_cluster_names(doc, spec.clusters or {}, host_specs, groups)
    hosts: dict[str, HostConfig] = {}
    for name, fields in host_specs.items():
        layers: list[tuple[Loc, HostFields, str | None]] = []
        if spec.defaults is not None:
            layers.append((("defaults",), spec.defaults, None))
        layers += [(("groups", g), group, g) for g, group in groups.items() if name in group.hosts]
        layers.append((("hosts", name), fields or HostFields.model_validate({}), None))
        hosts[name] = _resolve(doc, name, layers)
    base = Path(path).resolve().parent
    return Inventory(
        hosts=hosts,
        groups={g: tuple(dict.fromkeys(group.hosts)) for g, group in groups.items()},
        known_hosts=_local_path(spec.known_hosts, base) if spec.known_hosts else None,
        ssh_config=_local_path(spec.ssh_config, base),
        source_path=Path(path),
        clusters={
            name: _resolve_cluster(doc, name, fields)
            for name, fields in (spec.clusters or {}).items()
        },
    )


def _local_path(value: str, base: Path) -> Path:
    """A controller-side path: ``~`` expanded, relative paths taken from the inventory's folder."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _check_groups(doc: Document, groups: dict[str, GroupFields], hosts: dict[str, Any]) -> None:
    for group, fields in groups.items():
        if group in hosts:
            _, key, _ = doc.locate(doc.root, ("groups", group))
            raise doc.mark(key or doc.root).error(
                f"group {group!r} has the same name as a host", hint="rename the group or the host"
            )
        for i, member in enumerate(fields.hosts):
            if member not in hosts:
                node, _, _ = doc.locate(doc.root, ("groups", group, "hosts", i))
                raise doc.mark(node).error(
                    f"group {group!r} lists unknown host {member!r}{did_you_mean(member, hosts)}; "
                    f"hosts: {', '.join(hosts)}",
                    hint="declare it under `hosts:` or remove it from the group",
                )


def _resolve(
    doc: Document, name: str, layers: list[tuple[Loc, HostFields, str | None]]
) -> HostConfig:
    values: dict[str, Any] = {}
    env: dict[str, str] = {}
    env_marks: dict[str, Mark] = {}
    tags: list[str] = []
    own_python: str | None = None  # set by a group or the host itself, not by defaults
    for loc, fields, group in layers:
        if group:
            tags.append(group)
        for key, value in (fields.env or {}).items():
            env[key] = value
            env_marks[key] = doc.mark(doc.locate(doc.root, (*loc, "env", key))[0])
        tags.extend(fields.tags or ())
        values.update({f: getattr(fields, f) for f in _SCALARS if getattr(fields, f) is not None})
        if loc[0] != "defaults" and fields.python is not None:
            own_python = fields.python
    transport = values.get("transport", "ssh")
    if transport == "embedded":
        # An embedded host runs here: the defaults' python describes the real hosts' venvs.
        values["python"] = own_python or sys.executable
    gpus: GpuModel | None = values.get("gpus")
    _, key_node, _ = doc.locate(doc.root, ("hosts", name))
    line = key_node.start_mark.line + 1 if key_node is not None else 1
    return HostConfig(
        name=name,
        address=values.get("address"),
        port=values.get("port"),
        user=values.get("user"),
        identity_file=values.get("identity_file"),
        proxy_jump=values.get("proxy_jump"),
        python=values.get("python", DEFAULT_PYTHON),
        workdir=values.get("workdir", DEFAULT_WORKDIR),
        env=env,
        gpus=GpuSpec(gpus.count, gpus.model, gpus.bandwidth_gb_s) if gpus else None,
        tags=tuple(dict.fromkeys(tags)),
        transport=transport,
        # None when hosts.yaml does not set it: the connection pool's default applies then,
        # while a value the user wrote (15 included) always wins (ConnectionPool.timeout_for)
        connect_timeout=values.get("connect_timeout"),
        agent_timeout_s=values.get("agent_timeout_s"),
        source=f"{doc.file}:{line}",
        env_marks=env_marks,
    )


def _time_limits_as_written(doc: Document) -> None:
    """A time limit as the user typed it: YAML 1.1 reads an unquoted ``2:00:00`` as the base-60
    integer 7200, which Slurm would take as 7200 minutes. Its node is made a string node."""
    clusters, _, depth = doc.locate(doc.root, ("clusters",))
    if depth != 1 or not isinstance(clusters, MappingNode):
        return
    for key, _value in clusters.value:
        node, _, found = doc.locate(clusters, (key.value, "time_limit"))
        plain = found == 2 and isinstance(node, ScalarNode) and node.style is None
        if plain and node.tag in (INT_TAG, FLOAT_TAG):
            node.tag = STR_TAG


def _check_not_empty(doc: Document, spec: InventoryFile) -> None:
    if spec.hosts or spec.clusters:
        return
    node, _, depth = doc.locate(doc.root, ("hosts",))
    raise doc.mark(node if depth == 1 else doc.root).error(
        "no hosts and no clusters: orch needs at least one of them",
        path="hosts",
        hint="declare a host under `hosts:` or a Slurm cluster under `clusters:` "
        "(see README: 'Describe your hosts')",
    )


def _check_cluster_names(
    doc: Document, clusters: dict[str, ClusterFields], hosts: dict[str, Any], groups: dict[str, Any]
) -> None:
    """A cluster is selected by name like a host or group: one name must mean one thing."""
    for name in clusters:
        clash = "host" if name in hosts else "group" if name in groups else None
        if clash:
            _, key, _ = doc.locate(doc.root, ("clusters", name))
            raise doc.mark(key or doc.root).error(
                f"cluster {name!r} has the same name as a {clash}",
                hint=f"rename the cluster or the {clash}: playbooks select both by name",
            )


def _resolve_cluster(doc: Document, name: str, fields: ClusterFields) -> ClusterConfig:
    _, key_node, _ = doc.locate(doc.root, ("clusters", name))
    line = key_node.start_mark.line + 1 if key_node is not None else 1

    def marks(loc: Loc, env: dict[str, str] | None) -> dict[str, Mark]:
        return {k: doc.mark(doc.locate(doc.root, (*loc, "env", k))[0]) for k in env or {}}

    return cluster_config(
        name,
        fields,
        source=f"{doc.file}:{line}",
        env_marks=marks(("clusters", name), fields.env),
        login_env_marks=marks(("clusters", name, "login"), fields.login.env),
    )
