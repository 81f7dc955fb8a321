"""A run's ``manifest.json`` as one typed, versioned record: what was asked for and where.

``runner/manifest.py`` (``orch run``) and ``commands/loadgen.py`` (``orch loadgen``) build it,
``runner/execute.py`` writes it, and every reader (reports, nightly, resume, the migration of
old summaries) reads it through ``load_manifest``, never by key, so a renamed field is a
validation error here, not a silent "-" somewhere else. Facts that have a record of their own
are that record: the host's facts are ``agent.facts.HostFacts``, a doctor finding is
``doctor.findings.Finding``. The run spec is kept as its masked dump: secrets are ``***`` in it,
which the spec itself would refuse.

``manifest_version`` 1 is the first versioned manifest; one without it (written before it was
recorded) is version 0, migrated on load (``_MIGRATIONS``) like ``results/migrate.py`` does
for summaries. A change to the shape bumps ``MANIFEST_VERSION`` and adds a step there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from orchestrator.agent.facts import HostFacts
from orchestrator.doctor.findings import Finding
from orchestrator.errors import OrchError

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION: Final = 1

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_VERSION",
    "AnyManifest",
    "GitCommit",
    "HostAddress",
    "LoadgenManifest",
    "Manifest",
    "ManifestError",
    "PlaybookSource",
    "PromptsRead",
    "SlurmJob",
    "load_manifest",
    "parse_manifest",
]


class ManifestError(OrchError):
    """A manifest.json that is not a manifest this orch can read."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostAddress(_Frozen):
    """Where the run's host is, as hosts.yaml said (its key files and secrets left out)."""

    address: str | None = None
    port: int | None = None
    user: str | None = None
    python: str | None = None
    workdir: str | None = None
    transport: str | None = None
    gpus: str | None = None  # the declared GPUs ("2 x RTX A6000"), None when not declared


class GitCommit(_Frozen):
    commit: str
    dirty: bool


class PlaybookSource(_Frozen):
    name: str | None = None
    path: str | None = None
    git: GitCommit | None = None  # None: the playbook is in no git checkout


class PromptsRead(_Frozen):
    """The prompts the run sent: counted and hashed, not copied."""

    source: str
    sha256: str | None = None  # the content read (None: random prompts)
    count: int = 0
    skipped: int = 0
    input_len: int | None = None


class SlurmJob(_Frozen):
    """The Slurm job a cluster run ran in, and what it was given."""

    cluster: str
    partition: str
    account: str | None = None
    qos: str | None = None
    job_id: int | None = None
    nodes: list[str] = Field(default_factory=list)
    gpus: list[int] = Field(default_factory=list)
    cpus: int | None = None
    memory_mib: int | None = None


# written only for the runs they concern: a shared host's, a cluster's, a moved port's
_ONLY_WHEN_SET = ("gpu_ids", "slurm", "port_planned")


class Manifest(_Frozen):
    """An ``orch run`` run's manifest. Every field but the version has a default: manifests
    written before one was recorded (and version-1 results' trimmed fixtures) still read."""

    manifest_version: Literal[1] = MANIFEST_VERSION
    run: dict[str, JsonValue] | None = None  # the resolved RunSpec's dump, secrets masked
    run_id: str | None = None
    host: str | None = None
    host_config: HostAddress | None = None
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)  # masked
    port: int | None = None
    port_planned: int | None = None  # a cluster run moved off its planned port
    parallelism: dict[str, int] | None = None  # tensor, pipeline, data, expert, gpus
    host_facts: HostFacts | None = None
    engine_version: str | None = None
    orch_version: str | None = None
    playbook: PlaybookSource | None = None
    doctor: list[Finding] = Field(default_factory=list)
    prompts: PromptsRead | None = None
    gpu_ids: list[int] | None = None  # the GPUs orch gave the run on a shared host
    slurm: SlurmJob | None = None
    created_at: str | None = None  # when the file was written (ISO 8601, UTC)
    started_at: str | None = None
    session: int | None = None  # the server session (a resumed run's second is 2)

    def spec(self, *keys: str) -> JsonValue:
        """A value of the run spec's dump (``spec("workload", "slo", "targets")``), None when
        it has none: the spec of any orch version, read as written."""
        value: JsonValue = self.run
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def to_json(self) -> dict[str, JsonValue]:
        """What manifest.json holds: every field (null where unknown), but those only some
        runs have (``_ONLY_WHEN_SET``), as the file always had it."""
        absent = {name for name in _ONLY_WHEN_SET if getattr(self, name) is None}
        return self.model_dump(mode="json", exclude=absent)


class LoadgenManifest(_Frozen):
    """``orch loadgen``'s manifest: the command line and the spec the load generator ran."""

    manifest_version: Literal[1] = MANIFEST_VERSION
    command: str | None = None
    url: str | None = None
    model: str | None = None
    loadgen_spec: dict[str, JsonValue]  # the API key as ***, the prompts counted
    prompts: PromptsRead
    orch_version: str | None = None
    python: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")


AnyManifest = Manifest | LoadgenManifest


def _v0_to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (no manifest_version): the same keys, unversioned."""
    return {"manifest_version": 1, **obj}


# version -> the step that brings a manifest of that version to the next one
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _v0_to_v1}


def parse_manifest(obj: object, *, where: str = MANIFEST_FILE) -> AnyManifest:
    """A manifest from manifest.json's object, of any version this orch knows; one clear
    ``ManifestError`` naming ``where`` when it is not one."""
    try:
        if not isinstance(obj, Mapping):
            raise ValueError("not a JSON object")
        data = dict(obj)
        version = data.get("manifest_version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError(f"manifest_version {version!r} is not a version number")
        if version > MANIFEST_VERSION:
            raise ValueError(
                f"manifest_version {version} is newer than this orch reads ({MANIFEST_VERSION})"
            )
        while version < MANIFEST_VERSION:
            data = _MIGRATIONS[version](data)
            version += 1
        if "loadgen_spec" in data:
            return LoadgenManifest.model_validate(data)
        return Manifest.model_validate(data)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ManifestError(
            f"{where}: not a run manifest: {exc}",
            hint="manifest.json files are written by `orch run` and `orch loadgen`",
        ) from exc


def load_manifest(path: Path) -> AnyManifest | None:
    """The manifest at ``path``, None when there is no such file; ``ManifestError`` naming the
    file when it is there but not a manifest (not JSON, or of another shape)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the manifest: {exc}") from exc
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{path}: not a run manifest: not JSON: {exc}") from exc
    return parse_manifest(obj, where=str(path))
