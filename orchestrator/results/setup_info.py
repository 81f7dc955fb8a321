"""What a report says about the set-up: hosts, GPUs, engine versions, models and drafters, the
playbook and its git commit, read from each run's ``manifest.json`` and the results frame.

A manifest is written once when its run starts (``runner/manifest.py``) and read through its
model (``results/manifest.py``), which migrates older ones: a part it does not have shows as
"-"; a file that is no manifest stops the report with an error naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator.agent.facts import HostFacts as AgentFacts
from orchestrator.results.document import Section, Table, Value
from orchestrator.results.manifest import MANIFEST_FILE, AnyManifest, Manifest, load_manifest


@dataclass(frozen=True)
class PlaybookSource:
    name: str | None = None
    path: str | None = None
    commit: str | None = None
    dirty: bool | None = None

    @property
    def text(self) -> str:
        if self.name is None and self.path is None:
            return "-"
        return f"{self.name or '-'}" + (f" ({self.path})" if self.path else "")

    @property
    def commit_text(self) -> str:
        if self.commit is None:
            return "-"
        return self.commit[:12] + (" (with uncommitted changes)" if self.dirty else "")


@dataclass(frozen=True)
class HostFacts:
    host: str
    gpus: str = "-"  # "2 × NVIDIA RTX A6000 (48 GiB)"
    driver: str = "-"
    engines: str = "-"  # "sglang 0.5.23, vllm 0.33.0"
    os: str = "-"


@dataclass(frozen=True)
class RunManifest:
    """What a report needs of one run's manifest.json."""

    playbook: PlaybookSource
    host: HostFacts
    workload: str  # "builtin:mixed, max_tokens 96, 8 s a measurement, warm-up 2"
    slo_targets: tuple[str, ...]
    gpu_ids: tuple[int, ...] = ()  # the GPUs orch gave the run on a shared host


def _gpus(facts: AgentFacts) -> str:
    if not facts.gpus:
        return "-"
    names: dict[str, int] = {}
    for gpu in facts.gpus:
        name = gpu.name or "GPU"
        if gpu.memory_total_mib:
            name += f" ({gpu.memory_total_mib / 1024:.0f} GiB)"
        names[name] = names.get(name, 0) + 1
    return ", ".join(f"{n} × {name}" for name, n in names.items())


def _engines(facts: AgentFacts) -> str:
    found = [f"{k} {v}" for k, v in sorted(facts.engines.items()) if v]
    return ", ".join(found) or "-"


def _workload(workload: object) -> str:
    """The spec's workload as written (any orch version's): "-" for what it lacks."""
    if not isinstance(workload, Mapping):
        return "-"
    parts = [str(workload.get("prompts") or "-")]
    if workload.get("input_len"):
        parts.append(f"input_len {workload['input_len']}")
    parts.append(f"max_tokens {workload.get('max_tokens', '-')}")
    if workload.get("ignore_eos"):
        parts.append("ignore_eos")
    duration = workload.get("duration_s")
    if isinstance(duration, int | float) and duration > 0:
        parts.append(f"{duration:g} s a measurement")
    else:
        parts.append(f"{workload.get('num_prompts', '-')} requests a measurement")
    parts.append(f"warm-up {workload.get('warmup', 0)}")
    return ", ".join(parts)


def _text(obj: object) -> str | None:
    return obj if isinstance(obj, str) and obj else None


def parse_manifest(manifest: AnyManifest, host: str) -> RunManifest:
    """What a report shows of a manifest (`orch loadgen`'s has no playbook, host or spec)."""
    if not isinstance(manifest, Manifest):
        return RunManifest(PlaybookSource(), HostFacts(host=host), "-", ())
    book = manifest.playbook
    git = book.git if book else None
    facts = manifest.host_facts
    declared = manifest.host_config.gpus if manifest.host_config else None
    targets = manifest.spec("workload", "slo", "targets")
    return RunManifest(
        playbook=PlaybookSource(
            name=book.name if book else None,
            path=book.path if book else None,
            commit=git.commit if git else None,
            dirty=git.dirty if git else None,
        ),
        host=HostFacts(
            host=host,
            gpus=_gpus(facts) if facts else declared or "-",
            driver=(facts.driver_version if facts else None) or "-",
            engines=_engines(facts) if facts else "-",
            os=(facts.os if facts else None) or "-",
        ),
        workload=_workload(manifest.spec("workload")),
        slo_targets=tuple(t for t in targets if isinstance(t, str))
        if isinstance(targets, list)
        else (),
        gpu_ids=tuple(manifest.gpu_ids or ()),
    )


def read_manifest(run_folder: Path, host: str) -> RunManifest | None:
    """The run's manifest, None when it has none; ``ManifestError`` naming the file when it is
    there but no manifest."""
    found = load_manifest(run_folder / MANIFEST_FILE)
    return None if found is None else parse_manifest(found, host)


def run_folder(results_dir: str, folder: str) -> Path:
    """A measurement's run folder: the first part of its folder (``run/points/03-c8-r2``)."""
    parts = Path(folder).parts
    return Path(results_dir) / (parts[0] if parts else folder)


def manifests(frame: pd.DataFrame) -> dict[tuple[str, str], RunManifest]:
    """(results_dir, key) -> the run's manifest, for the runs that have one."""
    found: dict[tuple[str, str], RunManifest] = {}
    for (where, key), group in frame.groupby(["results_dir", "key"], sort=False):
        first = group.iloc[0]
        manifest = read_manifest(run_folder(where, first["folder"]), first["host"])
        if manifest is not None:
            found[(where, key)] = manifest
    return found


def _unique(values: Iterable[str]) -> str:
    found = [v for v in dict.fromkeys(values) if v != "-"]
    return "; ".join(found) or "-"


def _points(group: pd.DataFrame) -> str:
    labels = []
    for kind, value in dict.fromkeys(zip(group["load_kind"], group["load_value"], strict=True)):
        if isinstance(kind, str) and pd.notna(value):
            labels.append(f"{'c' if kind == 'concurrency' else 'rate'}={value:g}")
    return ", ".join(labels) or "-"


def _cell(value: object) -> Value:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return Value("-")
    return Value(str(value))


def runs_table(
    frame: pd.DataFrame, found: Mapping[tuple[str, str], RunManifest], *, workload: bool
) -> Table:
    """A row per run; ``workload``: with a column for it (when the runs' workloads differ)."""
    rows = []
    for (where, key), group in frame.groupby(["results_dir", "key"], sort=False):
        r = group.iloc[0]
        manifest = found.get((where, key))
        gpus = "-" if pd.isna(r["gpu_count"]) else f"{r['gpu_count']}"
        if isinstance(r["gpu_name"], str):
            gpus += f" × {r['gpu_name']}"
        if manifest and manifest.gpu_ids:
            gpus += f" (GPU {', '.join(map(str, manifest.gpu_ids))})"
        engine = r["engine"] + (f" {r['engine_version']}" if r["engine_version"] else "")
        repeats = "-" if pd.isna(r["repeats"]) else str(int(group["repeats"].max()))
        rows.append(
            (
                Value(r["run"]),
                Value(r["host"]),
                Value(engine),
                Value(r["method"]),
                _cell(r["draft_model"]),
                _cell(r["num_draft_tokens"]),
                Value(r["model"]),
                Value(gpus),
                Value(_points(group)),
                Value(repeats),
                *((Value(manifest.workload if manifest else "-"),) if workload else ()),
            )
        )
    columns = ("run", "host", "engine", "method", "drafter", "draft tokens", "model", "GPUs")
    return Table(
        "Runs",
        (*columns, "load points", "repeats", *(("workload",) if workload else ())),
        tuple(rows),
        caption="GPUs: the GPUs the server used (its tensor-parallel size; on a shared host, "
        "which ones).",
    )


def hosts_table(found: Mapping[tuple[str, str], RunManifest]) -> Table:
    hosts = {m.host.host: m.host for m in found.values()}
    rows = tuple(
        (Value(h.host), Value(h.gpus), Value(h.driver), Value(h.engines), Value(h.os))
        for h in hosts.values()
    )
    return Table("Hosts", ("host", "GPUs", "driver", "engines installed", "OS"), rows)


def setup_section(frame: pd.DataFrame, heading: str = "Setup") -> Section:
    """The set-up of the measurements in ``frame`` (one results folder, or several)."""
    found = manifests(frame)
    sources = [m.playbook for m in found.values()]
    targets = [t for m in found.values() for t in m.slo_targets]
    started = frame["started_at"].dropna()
    workloads = list(dict.fromkeys(m.workload for m in found.values()))
    facts = [
        ("results", ", ".join(Path(d).name for d in dict.fromkeys(frame["results_dir"]))),
        ("playbook", _unique(s.text for s in sources)),
        ("git commit", _unique(s.commit_text for s in sources)),
        ("orch", _unique(str(v) for v in frame["orch_version"].dropna())),
        ("model", _unique(frame["model"].dropna())),
        ("SLO targets", ", ".join(dict.fromkeys(targets)) or "none"),
    ]
    if len(workloads) == 1:
        facts.append(("workload", workloads[0]))
    if len(started):
        facts.append(("started", started.min().strftime("%Y-%m-%d %H:%M:%S UTC")))
    tables = [hosts_table(found)] if found else []
    runs = runs_table(frame, found, workload=len(workloads) > 1)
    return Section(heading, facts=tuple(facts), tables=(*tables, runs))
