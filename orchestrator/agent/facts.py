"""Typed host facts built from the agent's ``probe`` result, and the GPU check against hosts.yaml.

Everything here is pure: the probe result is plain JSON, the comparison only looks at values,
so both are tested with tables and reused by ``orch hosts check`` and the doctor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.hostconfig import GpuSpec

ENGINE_PACKAGES = ("vllm", "sglang")


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    process_name: str | None
    used_memory_mib: int | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    utilization_pct: int | None
    uuid: str | None
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass(frozen=True)
class HostFacts:
    python_version: str
    os: str  # "Ubuntu 22.04.4 LTS (Linux 5.15.0-105-generic)"
    cpu_count: int | None
    memory_total_mib: int | None
    disk_free_gib: float | None
    driver_version: str | None
    gpus: list[GpuInfo]
    engines: dict[str, str | None]  # vllm / sglang -> version, None when not installed
    packages: dict[str, str | None]  # every package asked about, engines included
    free_ports: list[int]
    nvidia_smi_error: str | None  # None when nvidia-smi answered
    python_executable: str | None = None
    hostname: str | None = None
    memory_available_mib: int | None = None
    checked_ports: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_probe(cls, data: dict[str, Any]) -> HostFacts:
        """Build from the probe verb's result data (KeyError/TypeError when it is not one)."""
        smi = data["nvidia_smi"]
        packages = dict(data["packages"])
        memory = data.get("memory") or {}
        ports = data.get("ports") or {}
        return cls(
            python_version=data["python"]["version"],
            python_executable=data["python"].get("executable"),
            os=_describe_os(data.get("os") or {}),
            hostname=data.get("hostname"),
            cpu_count=data.get("cpu_count"),
            memory_total_mib=memory.get("total_mib"),
            memory_available_mib=memory.get("available_mib"),
            disk_free_gib=(data.get("disk") or {}).get("free_gib"),
            driver_version=data.get("driver_version"),
            gpus=[_gpu(g) for g in data["gpus"]],
            engines={name: packages.get(name) for name in ENGINE_PACKAGES},
            packages=packages,
            free_ports=list(ports.get("free", [])),
            checked_ports=list(ports.get("checked", [])),
            nvidia_smi_error=None if smi.get("available") else (smi.get("error") or "unavailable"),
            warnings=list(smi.get("warnings") or []),
        )

    def gpu_problems(self, declared: GpuSpec | None) -> list[str]:
        return compare_gpus(declared, self.gpus, nvidia_smi_error=self.nvidia_smi_error)

    def gpu_warnings(self, declared: GpuSpec | None) -> list[str]:
        return gpu_warnings(declared, nvidia_smi_error=self.nvidia_smi_error,
                            smi_warnings=self.warnings)


def _gpu(raw: dict[str, Any]) -> GpuInfo:
    return GpuInfo(
        index=raw["index"],
        name=raw.get("name"),
        memory_total_mib=raw.get("memory_total_mib"),
        memory_used_mib=raw.get("memory_used_mib"),
        utilization_pct=raw.get("utilization_pct"),
        uuid=raw.get("uuid"),
        processes=[
            GpuProcess(p.get("pid"), p.get("process_name"), p.get("used_memory_mib"))
            for p in raw.get("processes") or []
        ],
    )


def _describe_os(raw: dict[str, Any]) -> str:
    distro = raw.get("distro")
    kernel = " ".join(x for x in (raw.get("system"), raw.get("kernel")) if x)
    if distro and kernel:
        return f"{distro} ({kernel})"
    return distro or kernel or "unknown"


def normalize_model(name: str) -> str:
    """``"NVIDIA RTX  A6000"`` -> ``"rtx a6000"``: case, spacing and the vendor prefix ignored."""
    words = name.lower().split()
    if words and words[0] == "nvidia":
        words = words[1:]
    return " ".join(words)


def model_matches(declared: str, actual: str) -> bool:
    """Whether a GPU named ``actual`` is the ``declared`` model.

    Equal after normalising, or the declared name is a whole-word part of the real one
    (``A100`` matches ``NVIDIA A100-SXM4-80GB``), because people write the short name.
    """
    want, have = normalize_model(declared), normalize_model(actual)
    if not want:
        return True
    pattern = r"(?:^|[\s\-_])" + re.escape(want) + r"(?:$|[\s\-_])"
    return want == have or re.search(pattern, have) is not None


def compare_gpus(
    declared: GpuSpec | None, gpus: list[GpuInfo], *, nvidia_smi_error: str | None = None
) -> list[str]:
    """Problems with ``gpus`` against what hosts.yaml declares (empty list: all good)."""
    if declared is None:
        return []
    if nvidia_smi_error is not None:
        return [
            f"expected {_describe(declared)}, but nvidia-smi is not available: {nvidia_smi_error}"
        ]
    problems: list[str] = []
    if len(gpus) != declared.count:
        problems.append(f"expected {_describe(declared)}, found {_gpus(len(gpus))}")
    if declared.model:
        for gpu in gpus:
            if not model_matches(declared.model, gpu.name or ""):
                problems.append(
                    f"GPU {gpu.index} is {gpu.name or 'unnamed'}, expected {declared.model}"
                )
    return problems


def gpu_warnings(
    declared: GpuSpec | None, *, nvidia_smi_error: str | None, smi_warnings: Sequence[str] = ()
) -> list[str]:
    """What nvidia-smi could not tell, when no declared GPU count makes it a problem.

    A host without nvidia-smi and no ``gpus`` in hosts.yaml would otherwise read "none, ok":
    it is reported as such instead (issue 2). With GPUs declared ``compare_gpus`` already
    names it, as a problem; saying it twice would only be noise.
    """
    found = [] if nvidia_smi_error is None or declared is not None else [
        f"no GPU information: {nvidia_smi_error}"]
    return [*found, *smi_warnings]


def _describe(declared: GpuSpec) -> str:
    return str(declared) if declared.model else _gpus(declared.count)


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"
