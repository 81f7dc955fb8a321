"""The inputs a playbook run depends on besides its playbook, pinned in ``plan.json``.

A resume measures the rest of a sweep and sets it beside the points kept, so everything the
points depend on must be what it was: the playbook (pinned by ``PlanRecord.playbook_sha256``),
the content of every prompt file (and built-in set) its runs read, and each hosts.yaml entry
its runs went to. A prompt file rewritten between the two sessions would otherwise put two
workloads in one sweep, read as a load effect. ``pin_inputs`` records them when the run
starts; ``differences`` names what changed since, for the resume to refuse.

A host's entry is pinned as the fields that decide where and how a server runs (address, port,
user, Python, workdir, GPUs, env, its cluster's partition ...), not its line in the file or
its tags. Env values under secret-looking keys are kept as ``***``: plan.json holds no secret.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.config.hostconfig import HostConfig, secret_env_keys
from orchestrator.errors import ConfigError
from orchestrator.loadgen.prompts import PromptSet

MASK = "***"


def _env(env: Mapping[str, str]) -> dict[str, str]:
    secret = secret_env_keys(env)
    return {k: MASK if k in secret else v for k, v in sorted(env.items())}


def host_entry(host: HostConfig) -> dict[str, Any]:
    """The fields of a host's entry that decide where and how its servers run."""
    entry: dict[str, Any] = {
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "proxy_jump": host.proxy_jump,
        "python": host.python,
        "workdir": host.workdir,
        "transport": host.transport,
        "gpus": str(host.gpus) if host.gpus is not None else None,
        "env": _env(host.env),
    }
    cluster = host.cluster
    if cluster is not None:
        entry["cluster"] = {
            "name": cluster.name,
            "partition": cluster.partition,
            "account": cluster.account,
            "qos": cluster.qos,
            "gres": cluster.gres,
            "gpus_per_node": cluster.gpus_per_node,
            "sbatch_options": list(cluster.sbatch_options),
            "python": cluster.python,
            "workdir": cluster.workdir,
            "env": _env(cluster.env),
        }
    return entry


def entry_sha256(entry: Mapping[str, Any]) -> str:
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pin_inputs(prompts: Sequence[PromptSet], hosts: Sequence[HostConfig]) -> dict[str, Any]:
    """``{"prompts": {source: sha256}, "hosts": {name: {"sha256", "entry"}}}`` for plan.json
    (random prompts have no content to pin: their recipe is in the playbook)."""
    pinned_prompts = {p.source: p.sha256 for p in prompts if p.sha256 is not None}
    pinned_hosts = {}
    for host in hosts:
        entry = host_entry(host)
        pinned_hosts[host.name] = {"sha256": entry_sha256(entry), "entry": entry}
    return {
        "prompts": dict(sorted(pinned_prompts.items())),
        "hosts": dict(sorted(pinned_hosts.items())),
    }


def _short(digest: object) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) else "none"


def _source_name(source: str) -> str:
    kind, _, rest = source.partition(":")
    return f"prompt file {rest}" if kind == "file" else f"prompt set {source}"


def differences(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What changed between two ``pin_inputs`` records, one line each (empty: nothing)."""
    out = []
    before_prompts = recorded.get("prompts") or {}
    now_prompts = now.get("prompts") or {}
    for source in sorted(set(before_prompts) | set(now_prompts)):
        was, is_ = before_prompts.get(source), now_prompts.get(source)
        if was != is_:
            out.append(
                f"{_source_name(source)}: content changed (SHA-256 {_short(was)} when the run "
                f"began, {_short(is_)} now)"
            )
    before_hosts = recorded.get("hosts") or {}
    now_hosts = now.get("hosts") or {}
    for name in sorted(set(before_hosts) | set(now_hosts)):
        was, is_ = before_hosts.get(name), now_hosts.get(name)
        if was is None or is_ is None:
            state = "not in the hosts file now" if is_ is None else "not used when the run began"
            out.append(f"host {name}: {state}")
        elif was.get("sha256") != is_.get("sha256"):
            fields = _field_changes(was.get("entry") or {}, is_.get("entry") or {})
            out.append(f"host {name}'s entry changed: {fields or 'its content differs'}")
    return out


def _field_changes(was: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    changes = []
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            changes.append(f"{key} {_text(was.get(key))} → {_text(now.get(key))}")
    return "; ".join(changes)


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


UNPINNED = (
    "{folder} was begun by an orch that did not pin the prompt files' content and the hosts "
    "entries (its plan.json has no `inputs`): the resume could not check that they are as they "
    "were; if either changed since, start a new run instead"
)


def check_resume(
    recorded: Mapping[str, Any] | None, now: Mapping[str, Any], *, folder: str, plan_file: str
) -> list[str]:
    """Warnings for a resume whose inputs can be resumed (``UNPINNED`` for a plan that did not
    pin them); ConfigError naming each change when they differ from ``recorded``."""
    if recorded is None:
        return [UNPINNED.format(folder=folder)]
    changed = differences(recorded, now)
    if changed:
        raise ConfigError(
            f"{folder} cannot be resumed: what its runs depend on changed since they began "
            f"(pinned in {plan_file}):\n  " + "\n  ".join(changed),
            hint="restore the prompt files and hosts entries as they were, or start a new run: "
            "a sweep measured on two workloads reads as a load effect",
        )
    return []
