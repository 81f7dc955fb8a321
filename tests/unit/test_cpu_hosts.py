"""CPU hosts (``gpus: none``): hosts.yaml's spellings and schema, `orch hosts check`'s GPU
comparison, the doctor's host checks and the plan-time refusal of a multi-device run.

A CPU host runs a real vLLM CPU build: no driver, no GPU, one server at a time. Each test
pairs the CPU case with the GPU host's, which must read as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from orchestrator.agent.facts import compare_gpus, gpu_warnings
from orchestrator.commands.run import plan_run
from orchestrator.config import GpuSpec, load_inventory
from orchestrator.config.inventory import Gpus
from orchestrator.config.schema import json_schema
from orchestrator.doctor.host import HostProbe, run_host_checks
from orchestrator.engines.parallel import Parallelism
from orchestrator.errors import ConfigError
from orchestrator.remote.wire import GpuInfo

A6000 = "NVIDIA RTX A6000"
NO_SMI = "nvidia-smi not found on PATH"


# -- hosts.yaml -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written", ["none", "None", "NONE", " none ", "cpu", "CPU", 0, "0", {"count": 0}]
)
def test_every_cpu_spelling_reads_as_a_cpu_host(written: object) -> None:
    parsed = TypeAdapter(Gpus).validate_python(written)
    assert parsed is not None and (parsed.count, parsed.model) == (0, None)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("0 x A100", "0 GPUs of model 'A100': a CPU host is written `gpus: none`"),
        ({"count": 0, "model": "L4"}, "0 GPUs of model 'L4'"),
        (-1, "greater than or equal to 0"),
        ("no", "a count, {count, model}, or none (a CPU host); found 'no'"),
    ],
)
def test_cpu_spellings_that_are_mistakes_are_refused(written: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        TypeAdapter(Gpus).validate_python(written)


def test_the_canonical_spelling_is_none() -> None:
    assert str(GpuSpec.none()) == "none" and GpuSpec.none() == GpuSpec(0)
    assert GpuSpec.none().cpu_only and not GpuSpec(2, "RTX A6000").cpu_only
    assert str(GpuSpec(2, "RTX A6000")) == "2 x RTX A6000"  # GPU hosts print as before


HOSTS = """\
defaults:
  gpus: 2 x RTX A6000
hosts:
  gpu-1: {address: 10.0.0.1}
  cpu-1: {address: 10.0.0.2, gpus: none}
  cpu-2: {address: 10.0.0.3, gpus: 0}
  cpu-3: {address: 10.0.0.4, gpus: CPU}
"""


def test_a_host_declared_none_overrides_the_defaults_gpus(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    hosts = load_inventory(tmp_path / "hosts.yaml").hosts
    assert {name: (str(h.gpus), h.cpu_only) for name, h in hosts.items()} == {
        "gpu-1": ("2 x RTX A6000", False),
        "cpu-1": ("none", True),
        "cpu-2": ("none", True),
        "cpu-3": ("none", True),
    }


def test_a_cpu_host_with_a_gpu_model_is_a_config_error_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  cpu-1:\n    gpus: 0 x A100\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path / "hosts.yaml")
    assert (info.value.line, info.value.path) == (3, "hosts.cpu-1.gpus")
    assert "a CPU host is written `gpus: none`" in info.value.message


def test_orch_schema_hosts_offers_the_cpu_spellings() -> None:
    gpus = json_schema("hosts")["$defs"]["HostFields"]["properties"]["gpus"]
    assert "`none` (also `cpu` or 0) for a CPU host" in gpus["description"]
    strings = [alt["pattern"] for alt in gpus["anyOf"] if alt.get("type") == "string"]
    accepted = {w: [bool(re.search(p, w)) for p in strings] for w in ("none", "CPU", "0", "2xL4")}
    assert accepted == {
        "none": [False, True],
        "CPU": [False, True],
        "0": [True, False],  # a count of 0
        "2xL4": [True, False],
    }
    assert {"type": "integer", "minimum": 0} in gpus["anyOf"]


# -- orch hosts check: declared against nvidia-smi --------------------------------------------


def gpus(count: int, name: str = A6000, used_mib: int = 0) -> list[GpuInfo]:
    return [GpuInfo(i, name, 49140, used_mib, None) for i in range(count)]


def test_a_cpu_host_without_nvidia_smi_is_fine() -> None:
    assert compare_gpus(GpuSpec.none(), [], nvidia_smi_error=NO_SMI) == []
    assert gpu_warnings(GpuSpec.none(), nvidia_smi_error=NO_SMI) == []
    # a GPU host without nvidia-smi is still a problem, an undeclared one a warning
    assert compare_gpus(GpuSpec(2), [], nvidia_smi_error=NO_SMI) == [
        f"expected 2 GPUs, but nvidia-smi is not available: {NO_SMI}"
    ]
    assert gpu_warnings(None, nvidia_smi_error=NO_SMI) == [f"no GPU information: {NO_SMI}"]


def test_gpus_on_a_host_declared_none_are_a_warning_not_a_problem() -> None:
    found = gpus(2)
    assert compare_gpus(GpuSpec.none(), found) == []
    assert gpu_warnings(GpuSpec.none(), nvidia_smi_error=None, gpus=found) == [
        "hosts.yaml declares `gpus: none` (a CPU host) but nvidia-smi shows 2 GPUs "
        f"({A6000}): orch runs no GPU here; declare `gpus: 2 x {A6000}` if the engine "
        "should use them"
    ]
    unparsed = ["unparsed nvidia-smi line: 'x'"]
    assert gpu_warnings(GpuSpec.none(), nvidia_smi_error=None, smi_warnings=unparsed) == unparsed


# -- the doctor -------------------------------------------------------------------------------


def cpu_probe(**fields: object) -> HostProbe:
    values: dict[str, object] = {
        "engines": {"vllm": "0.32.0"},
        "free_ports": {8000},
        "checked_ports": {8000},
        "cpu_only": True,
        "name": "cpu-1",
    }
    return HostProbe(**{**values, **fields})  # type: ignore[arg-type]


def verdicts(host: HostProbe, **kw: object) -> dict[str, str]:
    found = run_host_checks(host=host, engine="vllm", method=None, port=8000, **kw)  # type: ignore[arg-type]
    return {f.check: f.severity for f in found}


def test_the_doctor_asks_a_cpu_host_for_no_driver_and_no_gpu() -> None:
    findings = run_host_checks(host=cpu_probe(), engine="vllm", method=None, port=8000)
    assert [(f.check, f.severity) for f in findings] == [
        ("driver", "ok"),
        ("gpu_count", "ok"),
        ("gpu_model", "ok"),
        ("gpu_memory", "ok"),
        ("engine_version", "ok"),
        ("port", "ok"),
    ]
    by_check = {f.check: f for f in findings}
    assert by_check["driver"].message == "CPU host (gpus: none): no NVIDIA driver needed."
    assert by_check["gpu_count"].message == "CPU host (gpus: none): one server on the CPU."
    assert by_check["gpu_memory"].message.startswith("CPU host (gpus: none): GPU memory not")
    assert all(by_check[c].details["cpu_only"] is True for c in ("driver", "gpu_memory"))
    # the same probe of a GPU host: no driver is an error, no GPU too
    gpu_host = cpu_probe(cpu_only=False)
    assert verdicts(gpu_host)["driver"] == verdicts(gpu_host)["gpu_count"] == "error"


def test_the_gpu_memory_fraction_check_is_skipped_on_a_cpu_host() -> None:
    """Full GPUs that nvidia-smi shows on a host declared none are not the run's concern."""
    full = gpus(1, used_mib=49140)
    kw = {"memory_fraction": 0.95}
    assert verdicts(cpu_probe(gpus=full, driver_version="580.1"), **kw)["gpu_memory"] == "ok"
    gpu_host = cpu_probe(gpus=full, driver_version="580.1", cpu_only=False)
    assert verdicts(gpu_host, **kw)["gpu_memory"] == "error"


@pytest.mark.parametrize(
    ("sizes", "need", "described"),
    [
        (Parallelism(tensor=2), 2, "tensor_parallel 2"),
        (Parallelism(pipeline=2), 2, "tensor_parallel 1 x pipeline 2"),
        (Parallelism(tensor=2, data=2), 4, "tensor_parallel 2 x data 2"),
    ],
)
def test_more_than_one_device_on_a_cpu_host_is_an_error_naming_host_and_fix(
    sizes: Parallelism, need: int, described: str
) -> None:
    findings = run_host_checks(host=cpu_probe(), engine="vllm", method=None, parallelism=sizes)
    count = next(f for f in findings if f.check == "gpu_count")
    assert count.severity == "error"
    assert count.message == (
        f"CPU host (gpus: none): the run needs {need} devices ({described}) but host cpu-1 "
        "serves each run on its CPU, one device. Fix: set tensor_parallel (and the pipeline "
        "and data parallel sizes in extra_args) to 1, or send the run to a GPU host (its "
        "`hosts:`); if host cpu-1 does have GPUs, declare them in hosts.yaml."
    )
    assert (count.details["needed"], count.details["found"]) == (need, 0)


# -- orch run's plan --------------------------------------------------------------------------

PLAYBOOK = """name: cpu
hosts: [cpu-1]
runs:
  - name: tiny
    engine: vllm
    model: Qwen/Qwen3-8B
    tensor_parallel: {tp}
    workload: {{num_prompts: 2}}
"""


def write(tmp_path: Path, tp: int) -> tuple[Path, Path]:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  cpu-1:\n    gpus: none\n")
    (tmp_path / "play.yaml").write_text(PLAYBOOK.format(tp=tp))
    return tmp_path / "play.yaml", tmp_path / "hosts.yaml"


def test_a_multi_device_run_on_a_cpu_host_is_refused_at_plan_time(tmp_path: Path) -> None:
    """Without share_gpus too: nothing is touched, the error points at tensor_parallel."""
    play, hosts = write(tmp_path, tp=2)
    with pytest.raises(ConfigError) as info:
        plan_run(play, hosts, None)
    error = info.value
    assert (error.file, error.line, error.path) == (str(play), 7, "runs[0].tensor_parallel")
    assert error.message == (
        "run 'tiny' needs 2 devices (tensor_parallel 2) but host cpu-1 is a CPU host "
        "(hosts.yaml: gpus: none), where a server runs on one device, the CPU"
    )
    assert error.hint is not None and "extra_args) to 1 or less" in error.hint
    play, hosts = write(tmp_path, tp=1)
    (plan,) = plan_run(play, hosts, None).plans
    assert (plan.host.cpu_only, plan.gpus) == (True, 1)
