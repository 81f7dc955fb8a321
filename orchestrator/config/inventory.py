"""hosts.yaml: the GPU hosts, their defaults and groups, resolved into `HostConfig` records.

Precedence is defaults < groups (in the order they are declared) < the host itself; scalars
override, ``env`` and ``tags`` merge. A group's name is also a tag of its members, so a playbook
can select ``hosts: [lab]`` whether ``lab`` is a tag or a group.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from orchestrator.config.errors import did_you_mean, show, validate
from orchestrator.config.hostconfig import DEFAULT_PYTHON, DEFAULT_WORKDIR, GpuSpec, HostConfig
from orchestrator.config.yamlload import Document, Loc, Mark, load_yaml
from orchestrator.errors import ConfigError

DEFAULT_SSH_CONFIG = "~/.ssh/config"


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must never be silently ignored); no inf/nan numbers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


_NAME = re.compile(r"[A-Za-z0-9._-]+")


def name_check(kind: str) -> Callable[[str], str]:
    """Names end up in file names and result folders: keep them to a safe alphabet."""

    def check(value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"{kind} names may only contain letters, digits, '.', '_' and '-'; found {value!r}"
            )
        if value in (".", ".."):  # as a path part it would leave the folder it names
            raise ValueError(f"{kind} name {value!r} is not allowed: it names a directory")
        if value.startswith("-"):  # would read as an option in a command line
            raise ValueError(f"{kind} names may not start with '-'; found {value!r}")
        return value

    return check


def _number_to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(
            f"environment variable names are letters, digits and '_', not starting with a digit; "
            f"found {value!r}"
        )
    return value


# A string that may be written as a bare number in YAML (OMP_NUM_THREADS: 4, --max-num-seqs 8).
ScalarStr = Annotated[
    str, BeforeValidator(_number_to_str), WithJsonSchema({"type": ["string", "number"]})
]
EnvDict = Annotated[
    dict[Annotated[str, AfterValidator(_env_name)], ScalarStr],
    Field(
        description="Environment variables; values may reference the controller's environment as ${VAR}."
    ),
]
Selectors = Annotated[
    list[str],
    BeforeValidator(_one_or_many),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
]
HostName = Annotated[str, AfterValidator(name_check("host"))]
GroupName = Annotated[str, AfterValidator(name_check("group"))]


class GpuModel(StrictModel):
    """The GPUs a host is expected to have."""

    count: int = Field(ge=1, description="Number of GPUs.")
    model: str | None = Field(
        None, description="GPU model as nvidia-smi names it, e.g. 'RTX A6000'."
    )


_GPUS = re.compile(r"\s*(\d+)\s*(?:[xX×*]\s*(\S.*?))?\s*")


def parse_gpus(value: Any) -> Any:
    """``"2 x RTX A6000"``, ``"2xA6000"``, ``2`` or ``{count, model}``."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return {"count": value}
    if isinstance(value, str) and (m := _GPUS.fullmatch(value)):
        return {"count": int(m[1]), "model": m[2]}
    raise ValueError(
        f"expected '<count> x <model>' (e.g. '2 x RTX A6000'), a count, or {{count, model}}; "
        f"found {show(value)}"
    )


Gpus = Annotated[
    GpuModel | None,
    BeforeValidator(parse_gpus),
    WithJsonSchema(
        {
            "description": "Expected GPUs: '2 x RTX A6000', '2xA6000', 2 or {count: 2, model: RTX A6000}.",
            "anyOf": [
                {"type": "string", "pattern": r"^\s*\d+\s*([xX×*]\s*\S.*)?$"},
                {"type": "integer", "minimum": 1},
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
        "Embedded hosts default to orch's own interpreter and ignore the one in `defaults`.",
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
        description="'ssh' (default) or 'embedded': an in-process SSH server with simulated GPUs.",
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

    model_config = ConfigDict(title="orch hosts.yaml")

    defaults: HostFields | None = Field(
        None, description="Settings every host gets unless it overrides them."
    )
    groups: dict[GroupName, GroupFields] | None = Field(
        None, description="Groups, applied in declaration order."
    )
    hosts: Annotated[dict[HostName, HostFields | None], Field(min_length=1)] = Field(
        description="The hosts, keyed by name."
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

    @property
    def tags(self) -> list[str]:
        """Every tag (group names included), in order of first appearance."""
        return list(dict.fromkeys(tag for host in self.hosts.values() for tag in host.tags))

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
        written (one mark, or one per selector), so that an unknown one is reported there.
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
            if not matched:
                if isinstance(origin, Mark) or origin is None:
                    mark = origin
                else:
                    mark = origin[i] if i < len(origin) else None
                raise self._unknown(selector, mark)
            chosen.update(matched)
        return [host for name, host in self.hosts.items() if name in chosen]

    def _unknown(self, selector: str, origin: Mark | None) -> ConfigError:
        names, tags = list(self.hosts), self.tags
        message = (
            f"unknown host or tag {selector!r}{did_you_mean(selector, names + tags)}; "
            f"hosts: {', '.join(names)}; tags: {', '.join(tags) or '(none)'}"
        )
        hint = f"add it to {self.source_path or 'hosts.yaml'} or pick one of the names above"
        if origin is not None:
            return origin.error(message, hint=hint)
        return ConfigError(
            message, file=str(self.source_path) if self.source_path else None, hint=hint
        )


def load_inventory(path: str | Path) -> Inventory:
    doc = load_yaml(path)
    spec = validate(InventoryFile, doc.data, doc, doc.root)
    groups = spec.groups or {}
    _check_groups(doc, groups, spec.hosts)
    hosts: dict[str, HostConfig] = {}
    for name, fields in spec.hosts.items():
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
        gpus=GpuSpec(gpus.count, gpus.model) if gpus else None,
        tags=tuple(dict.fromkeys(tags)),
        transport=transport,
        # None when hosts.yaml does not set it: the connection pool's default applies then,
        # while a value the user wrote (15 included) always wins (ConnectionPool.timeout_for)
        connect_timeout=values.get("connect_timeout"),
        agent_timeout_s=values.get("agent_timeout_s"),
        source=f"{doc.file}:{line}",
        env_marks=env_marks,
    )
