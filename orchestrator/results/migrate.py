"""Older summary.json files, brought to the current schema before the result model reads them.

Version 1 (no ``schema_version`` key; orch before the typed result model) kept the run's
identity and speculative settings flat at the top level, its start and end times twice, the
log's line range inside ``acceptance`` and the doctor's findings twice (again inside
``collapse``). It did not record the workload or the tensor parallel size: the manifest.json
beside it did, so it fills them when given. This module is the one place that reads a summary
by its keys: each version's shape is written down here once, and a key it does not know is
left in place for the model to reject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from orchestrator.results.manifest import MANIFEST_FILE, Manifest

__all__ = ["MANIFEST_FILE", "SCHEMA_VERSION", "migrate", "schema_version"]
SCHEMA_VERSION: Final = 5  # the version this orch writes
V1_IDENTITY = (
    "run",
    "host",
    "folder",
    "order",
    "run_id",
    "engine",
    "model",
    "method",
    "draft_model",
    "num_draft_tokens",
    "started_at",
    "ended_at",
)
WORKLOAD_KEYS = (
    "prompts",
    "num_prompts",
    "duration_s",
    "request_rate",
    "burstiness",
    "max_tokens",
    "input_len",
    "ignore_eos",
    "warmup",
    "api",
    "temperature",
    "seed",
)


def schema_version(obj: Mapping[str, object]) -> int:
    version = obj.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"schema_version must be an integer, found {version!r}")
    return version


def migrate(obj: dict[str, object], *, manifest: Manifest | None = None) -> dict[str, object]:
    """``obj`` in the current schema (a new dict for an older one; ``obj`` itself if current)."""
    version = schema_version(obj)
    if version == SCHEMA_VERSION:
        return obj
    if version == 1:
        return v4_to_v5(v3_to_v4(v2_to_v3(v1_to_v2(obj, manifest))))
    if version == 2:
        return v4_to_v5(v3_to_v4(v2_to_v3(obj)))
    if version == 3:
        return v4_to_v5(v3_to_v4(obj))
    if version == 4:
        return v4_to_v5(obj)
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version} was written by a newer orch; this one reads 1 to {SCHEMA_VERSION}"
        )
    raise ValueError(f"schema_version {version} is unknown (this orch reads 1 to {SCHEMA_VERSION})")


def _mapping(value: object) -> dict[str, object] | None:
    return dict(value) if isinstance(value, Mapping) else None


def v1_to_v2(v1: Mapping[str, object], manifest: Manifest | None) -> dict[str, object]:
    rest = {k: v for k, v in v1.items() if k not in V1_IDENTITY}
    name, host = v1.get("run"), v1.get("host")
    out: dict[str, object] = {
        "schema_version": 2,
        "run": {
            "name": name,
            "key": f"{name}@{host}",
            "host": host,
            "folder": v1.get("folder"),
            "order": v1.get("order", 0),
            "run_id": v1.get("run_id"),
        },
        "settings": _v1_settings(v1, manifest),
    }
    acceptance = _mapping(rest.pop("acceptance", None))
    log_lines = acceptance.pop("log_lines", None) if acceptance is not None else None
    collapse = _mapping(rest.pop("collapse", None))
    if collapse is not None:
        collapse.pop("findings", None)  # the top-level "doctor" list, once more
    out.update(rest)
    out.update(acceptance=acceptance, collapse=collapse)
    out["provenance"] = {
        "orch_version": manifest.orch_version if manifest else None,
        "engine_version": manifest.engine_version if manifest else None,
        "log_lines": log_lines,
        "migrated_from": 1,
    }
    return out


def v2_to_v3(v2: Mapping[str, object]) -> dict[str, object]:
    """Version 2 measured one load point per run: the point is the workload's own (a closed
    loop's concurrency, an open loop's rate), measured once."""
    out = dict(v2)
    out["schema_version"] = 3
    provenance = _mapping(out.get("provenance")) or {}
    provenance.setdefault("migrated_from", 2)
    out["provenance"] = provenance
    settings = _mapping(out.get("settings"))
    workload = _mapping(settings.get("workload")) if settings else None
    if workload is None:
        return out
    rate, concurrency = workload.get("request_rate"), workload.get("concurrency")
    if rate is not None:
        out["point"] = {"kind": "request_rate", "value": rate}
    elif concurrency is not None:
        out["point"] = {"kind": "concurrency", "value": concurrency}
    return out


# Versions 1 to 3 wrote warnings as text; these openings (client_warnings' and the failed
# requests' sentences of those versions) name the kind such a warning has now.
V3_WARNING_KINDS = (
    ("client saturated", "client_saturated"),
    ("the load generator never marked its measured window", "log_window_unmarked"),
    ("log: no ", "acceptance_log_missing"),
    ("short measuring window", "short_log_window"),
    ("prefix cache not reset", "cache_not_reset"),
)


def v3_to_v4(v3: Mapping[str, object]) -> dict[str, object]:
    """Version 3 kept its warnings as sentences: each becomes a typed warning, its kind read
    from the sentence's opening (``note`` when none is known). The verdict is not judged
    again: a result keeps the one it was written with."""
    out = dict(v3)
    out["schema_version"] = 4
    provenance = _mapping(out.get("provenance")) or {}
    provenance.setdefault("migrated_from", 3)
    out["provenance"] = provenance
    warnings = out.get("warnings")
    if isinstance(warnings, list):
        out["warnings"] = [_v3_warning(w) for w in warnings]
    return out


def v4_to_v5(v4: Mapping[str, object]) -> dict[str, object]:
    """Version 5 added the GPU telemetry (``energy``, and ``loadgen.telemetry``): a version-4
    result simply has none."""
    out = dict(v4)
    out["schema_version"] = 5
    provenance = _mapping(out.get("provenance")) or {}
    if provenance.get("migrated_from") is None:  # version 4 wrote the key, as null
        provenance["migrated_from"] = 4
    out["provenance"] = provenance
    return out


def _v3_warning(text: object) -> object:
    if not isinstance(text, str):
        return text  # not a version-3 warning: the model says what is wrong with it
    kind = next((k for opening, k in V3_WARNING_KINDS if text.startswith(opening)), "note")
    if " measured requests failed: the figures cover only" in text:
        kind = "requests_failed"
    elif text.startswith("the connection to ") and "dropped while measuring" in text:
        kind = "connection_dropped"
    return {"kind": kind, "message": text, "details": {}}


def _v1_settings(v1: Mapping[str, object], manifest: Manifest | None) -> dict[str, object]:
    settings: dict[str, object] = {
        "engine": v1.get("engine"),
        "model": v1.get("model"),
        "speculative": {
            "method": v1.get("method") or "none",
            "draft_model": v1.get("draft_model"),
            "num_draft_tokens": v1.get("num_draft_tokens"),
        },
    }
    spec = _mapping(manifest.run) if manifest else None
    if spec is None:
        return settings
    settings.update(
        tensor_parallel=spec.get("tensor_parallel"), max_model_len=spec.get("max_model_len")
    )
    workload = _mapping(spec.get("workload"))
    if workload is not None:
        settings["workload"] = {
            **{k: workload[k] for k in WORKLOAD_KEYS if k in workload},
            "concurrency": _v1_concurrency(workload, _mapping(v1.get("loadgen"))),
        }
    return settings


def _v1_concurrency(workload: Mapping[str, object], loadgen: Mapping[str, object] | None) -> object:
    """A closed loop's concurrency; an open loop's cap as the load generator ran it (the spec's
    dump cannot tell a written cap from a default one)."""
    if workload.get("request_rate") is None:
        return workload.get("concurrency")
    return loadgen.get("concurrency") if loadgen else None
