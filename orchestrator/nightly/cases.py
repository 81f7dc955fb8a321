"""What a nightly compares: a case (``CaseKey``) and the attributes of a night (``NightAttributes``).

A case is what must stay equal for two nights' figures to be comparable: the engine, the model,
the speculative method and its settings, the tensor-parallel size, the GPU model and count, the
workload (prompts, lengths, the load point) and the client that measured it. Renaming a run, or
moving it to another host with the same GPUs, keeps its history; changing any of these starts a
new one. Prompts are keyed on their content (``prompts_sha256``, the SHA-256 of the file or
built-in set read), not their name: a prompt file rewritten under the same name starts a new
case. Results written before the content was recorded have no hash; their cases keep their
ids, and the first night that records it starts a new case, which ``content_notes`` names.

The client is orch's own version, major.minor only (``client_version``): a patch release fixes
bugs and keeps the way requests are timed, so a history survives it; a minor release may change
how a figure is measured (what TTFT counts from, how tokens are counted), so its figures start
a new case rather than raise a false regression.

What a nightly watches is not part of the key: the engine version, the model revision, the GPU
driver and the hosts of each night (``NightAttributes``, read from each run's manifest.json).
When a regression is called, ``changed_attributes`` says which of them changed between the last
good night and the first bad one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.results.manifest import MANIFEST_FILE, Manifest, load_manifest
from orchestrator.results.model import RunResult

__all__ = [
    "CaseKey",
    "Change",
    "NightAttributes",
    "attributes_of",
    "case_of",
    "changed_attributes",
    "client_version",
    "content_notes",
    "read_manifest",
]


@dataclass(frozen=True)
class CaseKey:
    """What must stay equal to compare two nights (see the module docstring)."""

    engine: str
    model: str
    method: str  # speculative method, "none" without
    draft_model: str | None
    num_draft_tokens: int | None
    tensor_parallel: int | None
    gpu_name: str | None
    gpu_count: int | None
    prompts: str
    num_prompts: int  # a p99 over 10 requests is not one over 1000
    duration_s: float | None  # measured for this long instead of num_prompts requests
    input_len: int | None
    max_tokens: int
    ignore_eos: bool
    api: str
    temperature: float
    load_kind: str  # concurrency or request_rate
    load_value: float
    client_version: str  # orch major.minor
    # added after the first histories: they enter the id only away from these defaults, so a
    # case recorded before keeps its id
    burstiness: float = 1.0  # the arrivals' gamma shape under request_rate
    cap: int | None = None  # the open loop's cap on requests in flight under request_rate
    seed: int = 0  # the workload's seed: which prompts, which arrival times
    prompts_sha256: str | None = None  # the prompts' content; None: not recorded (older orch)

    @functools.cached_property
    def id(self) -> str:
        """A stable short id: the first 12 hex digits of the SHA-256 of the key's fields."""
        fields = dataclasses.asdict(self)
        for name, default in _LATER_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    @property
    def label(self) -> str:
        """``vllm dflash (z-lab/drafter, k=15) · Qwen/Qwen3-8B · TP2 · 2 × NVIDIA RTX A6000 ·
        builtin:mixed out=160 ignore_eos · c=8``: what a person reads in a report."""
        config = self.engine if self.method == "none" else f"{self.engine} {self.method}"
        drafter = [d for d in (self.draft_model,) if d]
        if self.num_draft_tokens is not None:
            drafter.append(f"k={self.num_draft_tokens}")
        if drafter:
            config += f" ({', '.join(drafter)})"
        gpus = f"{self.gpu_count if self.gpu_count is not None else '?'} × {self.gpu_name or 'GPU'}"
        load = f"{'c' if self.load_kind == 'concurrency' else 'rate'}={self.load_value:g}"
        workload = self.prompts
        if self.prompts_sha256:
            workload += f"#{self.prompts_sha256[:8]}"
        workload += f" in={self.input_len}" if self.input_len else ""
        workload += f" out={self.max_tokens}" + (" ignore_eos" if self.ignore_eos else "")
        if self.api != "chat":
            workload += f" {self.api}"
        if self.temperature:
            workload += f" T={self.temperature:g}"
        tp = f"TP{self.tensor_parallel}" if self.tensor_parallel is not None else "TP?"
        return " · ".join((config, self.model, tp, gpus, workload, load))


_LATER_FIELDS: dict[str, object] = {
    "burstiness": 1.0,
    "cap": None,
    "seed": 0,
    "prompts_sha256": None,
}


def client_version(version: str | None) -> str:
    """orch's version as a case keeps it: major.minor ("0.1.0" -> "0.1"); "unknown" if none."""
    if not version:
        return "unknown"
    parts = version.split(".")
    return ".".join(parts[:2])


def case_of(result: RunResult) -> CaseKey:
    """The case a measurement belongs to. OrchError for a result that does not record its
    workload or load point (written by an orch older than sweeps)."""
    settings, workload, point = result.settings, result.settings.workload, result.point
    if workload is None or point is None:
        raise OrchError(
            f"{result.run.folder}: the result does not record its workload or load point",
            hint="a nightly compares results written by orch 0.1 or later; run the playbook again",
        )
    spec = settings.speculative
    return CaseKey(
        engine=settings.engine,
        model=settings.model,
        method=spec.method,
        draft_model=spec.draft_model,
        num_draft_tokens=spec.num_draft_tokens,
        tensor_parallel=settings.tensor_parallel,
        gpu_name=settings.gpu_name,
        gpu_count=settings.gpu_count,
        prompts=workload.prompts,
        num_prompts=workload.num_prompts,
        duration_s=None if workload.duration_s is None else float(workload.duration_s),
        input_len=workload.input_len,
        max_tokens=workload.max_tokens,
        ignore_eos=workload.ignore_eos,
        api=workload.api,
        temperature=float(workload.temperature),
        load_kind=point.kind,
        load_value=float(point.value),
        client_version=client_version(result.provenance.orch_version),
        burstiness=float(workload.burstiness) if point.kind == "request_rate" else 1.0,
        cap=workload.concurrency if point.kind == "request_rate" else None,
        seed=workload.seed,
        prompts_sha256=workload.prompts_sha256,
    )


@dataclass(frozen=True)
class NightAttributes:
    """What may change from one night to the next without changing the case. A value from
    several runs (a case measured on two hosts) is their distinct values, sorted, joined by
    ", "; None when no run recorded it."""

    engine_version: str | None = None
    model_revision: str | None = None  # the engine's --revision, when the run gave one
    driver_version: str | None = None
    hosts: tuple[str, ...] = ()  # inventory names
    hostnames: tuple[str, ...] = ()  # the machines' own names, as they reported them
    orch_version: str | None = None
    playbook_commit: str | None = None
    playbook_dirty: bool | None = None
    # the GPUs' operating mode over the measured windows (issue 23): what a night may differ
    # in without anything of the software changing
    sm_clock_mhz: float | None = None  # busy SM clock, the mean of the measurements'
    power_limit_w: float | None = None  # the lowest board limit of the case's GPUs
    throttled_pct: float | None = None  # % of the window under a throttling reason, the most
    throttle_reasons: str | None = None  # those reasons, the longest first

    @classmethod
    def merge(cls, many: Sequence[NightAttributes]) -> NightAttributes:
        """One night's attributes of a case measured by several runs."""

        def joined(values: Iterable[str | None]) -> str | None:
            found = sorted({v for v in values if v})
            return ", ".join(found) if found else None

        def known(values: Iterable[float | None]) -> list[float]:
            return [v for v in values if v is not None]

        dirty = [a.playbook_dirty for a in many if a.playbook_dirty is not None]
        clocks = known(a.sm_clock_mhz for a in many)
        limits = known(a.power_limit_w for a in many)
        throttled = known(a.throttled_pct for a in many)
        reasons = [r for a in many for r in (a.throttle_reasons or "").split(", ") if r]
        return cls(
            engine_version=joined(a.engine_version for a in many),
            model_revision=joined(a.model_revision for a in many),
            driver_version=joined(a.driver_version for a in many),
            hosts=tuple(sorted({h for a in many for h in a.hosts})),
            hostnames=tuple(sorted({h for a in many for h in a.hostnames})),
            orch_version=joined(a.orch_version for a in many),
            playbook_commit=joined(a.playbook_commit for a in many),
            playbook_dirty=any(dirty) if dirty else None,
            sm_clock_mhz=float(round(sum(clocks) / len(clocks))) if clocks else None,
            power_limit_w=min(limits) if limits else None,
            throttled_pct=max(throttled) if throttled else None,
            throttle_reasons=", ".join(dict.fromkeys(reasons)) or None,
        )

    @property
    def mode(self) -> str | None:
        """The GPUs' operating mode in words when they ran throttled: a night to name."""
        if not self.throttled_pct or self.throttled_pct < THROTTLE_NOTE_PCT:
            return None
        why = f" ({self.throttle_reasons})" if self.throttle_reasons else ""
        clock = f", SM clock {self.sm_clock_mhz:.0f} MHz" if self.sm_clock_mhz else ""
        return f"GPUs throttled {self.throttled_pct:.0f}% of the window{why}{clock}"


@dataclass(frozen=True)
class Change:
    """An attribute that differs between the last good night and the first bad one."""

    name: str
    before: str | None
    after: str | None

    @property
    def text(self) -> str:
        label, unit = _LABELS.get(self.name, (self.name, ""))
        return f"{label} {self.before or '-'} → {self.after or '-'}{unit}"


# How a change of the GPUs' operating mode reads: "SM clock 1740 → 1410 MHz".
_LABELS = {
    "sm_clock_mhz": ("SM clock", " MHz"),
    "power_limit_w": ("power limit", " W"),
    "throttled_pct": ("throttled", "% of the window"),
    "throttle_reasons": ("throttle reasons", ""),
}


# Measured attributes differ a little every night: a change is named past these (relative for
# the clock, in points of the window for throttling, in W for the limit).
CLOCK_CHANGE = 0.03
THROTTLE_CHANGE_PCT = 5.0
POWER_LIMIT_CHANGE_W = 1.0
THROTTLE_NOTE_PCT = 5.0  # a night throttled this much of its window is named as such


def _differ(name: str, before: object, after: object) -> bool:
    if before is None or after is None or name not in _MEASURED:
        return before != after
    assert isinstance(before, int | float) and isinstance(after, int | float)
    if name == "sm_clock_mhz":
        return abs(after - before) > CLOCK_CHANGE * abs(before)
    return abs(after - before) > _MEASURED[name]


_MEASURED = {
    "sm_clock_mhz": CLOCK_CHANGE,
    "throttled_pct": THROTTLE_CHANGE_PCT,
    "power_limit_w": POWER_LIMIT_CHANGE_W,
}


def changed_attributes(last_good: NightAttributes, first_bad: NightAttributes) -> list[Change]:
    """The attributes that changed, in the order of ``NightAttributes``' fields (a measured
    one only past its tolerance; a throttling share below THROTTLE_NOTE_PCT on both nights is
    no change)."""
    changes = []
    for field in dataclasses.fields(NightAttributes):
        before, after = getattr(last_good, field.name), getattr(first_bad, field.name)
        if field.name == "throttle_reasons" and not (last_good.mode or first_bad.mode):
            continue
        if field.name == "throttled_pct" and max(before or 0.0, after or 0.0) < THROTTLE_NOTE_PCT:
            continue
        if _differ(field.name, before, after):
            changes.append(Change(field.name, _text(before), _text(after)))
    return changes


MODE_FIELDS = ("sm_clock_mhz", "power_limit_w")  # the GPUs' operating mode, as measured


def same_mode(a: NightAttributes, b: NightAttributes) -> bool:
    """Whether two nights ran the GPUs in one operating mode: their busy SM clock and power
    limit within the tolerances a change is named past (unknown on either night: the same)."""
    for name in MODE_FIELDS:
        before, after = getattr(a, name), getattr(b, name)
        if before is not None and after is not None and _differ(name, before, after):
            return False
    return True


def mode_changes(a: NightAttributes, b: NightAttributes) -> list[Change]:
    """The operating-mode attributes that differ from ``a`` to ``b``."""
    return [c for c in changed_attributes(a, b) if c.name in MODE_FIELDS]


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or None
    if isinstance(value, float):
        return f"{value:.0f}"
    return str(value)


def _str(obj: object) -> str | None:
    return obj if isinstance(obj, str) and obj else None


def _revision(args: object) -> str | None:
    """The value of ``--revision`` in a run's extra_args (``--revision X`` or ``--revision=X``)."""
    if not isinstance(args, list):
        return None
    items = [a for a in args if isinstance(a, str)]
    for i, arg in enumerate(items):
        if arg.startswith("--revision="):
            return arg.split("=", 1)[1] or None
        if arg == "--revision" and i + 1 < len(items):
            return items[i + 1]
    return None


def read_manifest(run_folder: Path) -> Manifest | None:
    """A run's manifest.json (``results.manifest``), None if it has none (or is `orch
    loadgen`'s); ``ManifestError`` naming the file if it is there but no manifest."""
    found = load_manifest(run_folder / MANIFEST_FILE)
    return found if isinstance(found, Manifest) else None


def attributes_of(result: RunResult, manifest: Manifest | None) -> NightAttributes:
    """One measurement's night attributes, from its run's manifest (and the result where the
    manifest lacks a value)."""
    facts = manifest.host_facts if manifest else None
    git = manifest.playbook.git if manifest and manifest.playbook else None
    hostname = _str(facts.hostname) if facts else None
    return NightAttributes(
        engine_version=_str(manifest.engine_version if manifest else None)
        or result.provenance.engine_version,
        model_revision=_revision(manifest.spec("extra_args") if manifest else None),
        driver_version=_str(facts.driver_version) if facts else None,
        hosts=(result.run.host,),
        hostnames=(hostname,) if hostname else (),
        orch_version=result.provenance.orch_version
        or _str(manifest.orch_version if manifest else None),
        playbook_commit=git.commit if git else None,
        playbook_dirty=git.dirty if git else None,
        **_gpu_mode(result),
    )


def _gpu_mode(result: RunResult) -> dict[str, Any]:
    """The operating-mode attributes from the measurement's GPU samples (none without them)."""
    energy, loadgen = result.energy, result.loadgen
    limits = loadgen.telemetry.power_limit_w if loadgen and loadgen.telemetry else {}
    share = energy.throttled_share if energy else None
    return {
        "sm_clock_mhz": float(round(energy.sm_mhz_busy)) if energy and energy.sm_mhz_busy else None,
        "power_limit_w": min(limits.values()) if limits else None,
        "throttled_pct": round(100 * share, 1) if share is not None else None,
        "throttle_reasons": ", ".join(energy.throttle_reasons) or None if energy else None,
    }


def content_notes(past: Mapping[CaseKey, int], tonight: Iterable[CaseKey]) -> list[str]:
    """Why a case of tonight has no history though one like it has (``past``: each recorded
    case and its number of nights): its prompts' content differs, or was not recorded before
    (results of an orch before ``prompts_sha256``). Said, so no history ends without a word."""
    notes = []
    for case in dict.fromkeys(tonight):
        if case in past:
            continue
        same = dataclasses.replace(case, prompts_sha256=None)
        for before, nights in past.items():
            if before.prompts_sha256 == case.prompts_sha256:
                continue
            if dataclasses.replace(before, prompts_sha256=None) != same:
                continue
            if before.prompts_sha256 is None:
                why = (
                    "did not record the prompts' content, so they cannot be known to be the "
                    "same workload"
                )
            else:
                why = (
                    f"were measured on other content of {case.prompts} (SHA-256 "
                    f"{before.prompts_sha256[:12]}…, now {(case.prompts_sha256 or '-')[:12]}…)"
                )
            notes.append(
                f"case {case.id} ({case.label}) starts a new history tonight: its {nights} "
                f"earlier night(s), case {before.id}, {why}; they are not its baseline"
            )
    return notes
