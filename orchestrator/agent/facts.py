"""Host facts for people and the GPU check against hosts.yaml, built from the probe result.

The probe's answer is parsed once, by ``ProbeResult.from_json`` (the wire contract); this module
only derives from that typed value, so ``orch hosts check`` and the doctor (``HostProbe``) read
the same facts. Everything here is pure and tested with tables.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.config.hostconfig import GpuSpec
from orchestrator.engines import engine_packages
from orchestrator.remote.wire import GpuInfo, GpuProcess, OsInfo, ProbeResult

__all__ = [
    "GpuInfo",
    "GpuProcess",
    "HostFacts",
    "compare_gpus",
    "cpu_host_warnings",
    "gpu_warnings",
    "model_matches",
]


@dataclass(frozen=True)
class HostFacts:
    """The probe result with the few values people read about a host worked out once."""

    probe: ProbeResult
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
    def from_probe(cls, probe: ProbeResult) -> HostFacts:
        smi = probe.nvidia_smi
        return cls(
            probe=probe,
            python_version=probe.python.version,
            python_executable=probe.python.executable,
            os=_describe_os(probe.os),
            hostname=probe.hostname,
            cpu_count=probe.cpu_count,
            memory_total_mib=probe.memory.total_mib,
            memory_available_mib=probe.memory.available_mib,
            disk_free_gib=probe.disk.free_gib,
            driver_version=probe.driver_version,
            gpus=list(probe.gpus),
            engines={
                name: probe.packages.get(package) for name, package in engine_packages().items()
            },
            packages=dict(probe.packages),
            free_ports=list(probe.ports.free),
            checked_ports=list(probe.ports.checked),
            nvidia_smi_error=None if smi.available else (smi.error or "unavailable"),
            warnings=list(smi.warnings),
        )

    def gpu_problems(self, declared: GpuSpec | None) -> list[str]:
        return compare_gpus(declared, self.gpus, nvidia_smi_error=self.nvidia_smi_error)

    def gpu_warnings(self, declared: GpuSpec | None) -> list[str]:
        return gpu_warnings(
            declared,
            nvidia_smi_error=self.nvidia_smi_error,
            smi_warnings=self.warnings,
            gpus=self.gpus,
        )


def _describe_os(raw: OsInfo) -> str:
    distro = raw.distro
    kernel = " ".join(x for x in (raw.system, raw.kernel) if x)
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
    """Problems with ``gpus`` against what hosts.yaml declares (empty list: all good). A CPU
    host (``gpus: none``) has none: it needs no nvidia-smi, and GPUs it does show are only a
    warning (``gpu_warnings``)."""
    if declared is None or declared.cpu_only:
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
    declared: GpuSpec | None,
    *,
    nvidia_smi_error: str | None,
    smi_warnings: Sequence[str] = (),
    gpus: Sequence[GpuInfo] = (),
) -> list[str]:
    """What nvidia-smi could not tell, when no declared GPU count makes it a problem.

    A host without nvidia-smi and no ``gpus`` in hosts.yaml would otherwise read "none, ok":
    it is reported as such instead (issue 2). With GPUs declared ``compare_gpus`` already
    names it, as a problem; saying it twice would only be noise. A CPU host (``gpus: none``)
    expects no nvidia-smi; one that answers with GPUs there makes the declaration suspect.
    """
    if declared is not None and declared.cpu_only:
        return [*cpu_host_warnings(gpus), *smi_warnings]
    found = (
        []
        if nvidia_smi_error is None or declared is not None
        else [f"no GPU information: {nvidia_smi_error}"]
    )
    return [*found, *smi_warnings]


def cpu_host_warnings(gpus: Sequence[GpuInfo]) -> list[str]:
    """A host declared ``gpus: none`` whose nvidia-smi shows GPUs: probably a wrong
    declaration (orch would run its engines on the CPU and leave the GPUs idle)."""
    if not gpus:
        return []
    names = ", ".join(sorted({g.name or "unnamed" for g in gpus}))
    return [
        f"hosts.yaml declares `gpus: none` (a CPU host) but nvidia-smi shows "
        f"{_gpus(len(gpus))} ({names}): orch runs no GPU here; declare `gpus: "
        f"{len(gpus)} x {gpus[0].name or '<model>'}` if the engine should use them"
    ]


def _describe(declared: GpuSpec) -> str:
    return str(declared) if declared.model else _gpus(declared.count)


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"
