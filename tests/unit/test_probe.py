"""Probe: nvidia-smi / procfs parsers on real output, the verb run locally, and HostFacts."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.bundle import build_bundle
from orchestrator.agent.facts import GpuInfo, HostFacts, compare_gpus, gpu_warnings, model_matches
from orchestrator.config.hostconfig import GpuSpec
from orchestrator.doctor.host import HostProbe
from orchestrator.remote.gpus import (
    na,
    parse_compute_apps_csv,
    parse_gpu_csv,
    parse_gpu_id_csv,
    split_fields,
)
from orchestrator.remote.probe import parse_meminfo, parse_os_release
from orchestrator.remote.procs import mask_argv
from orchestrator.remote.wire import CONTRACT_VERSION, ProbeResult

UUID0 = "GPU-5c5f0b7b-6a0e-7e6b-4c1e-0c8f3b1f9d2a"
UUID1 = "GPU-9a1d2e3f-1b2c-3d4e-5f60-718293a4b5c6"

# ---------------------------------------------------------------------------------------------
# Pure parsers


@pytest.mark.parametrize(
    ("text", "rows", "bad"),
    [
        (
            "0, NVIDIA RTX A6000, 49140, 1, 0\n1, NVIDIA RTX A6000, 49140, 45869, 100\n",
            [
                {
                    "index": 0,
                    "name": "NVIDIA RTX A6000",
                    "memory_total_mib": 49140,
                    "memory_used_mib": 1,
                    "utilization_pct": 0,
                },
                {
                    "index": 1,
                    "name": "NVIDIA RTX A6000",
                    "memory_total_mib": 49140,
                    "memory_used_mib": 45869,
                    "utilization_pct": 100,
                },
            ],
            [],
        ),
        (
            "0, NVIDIA A100-SXM4-80GB, 81920, 0, [N/A]\n",  # MIG mode: no utilization
            [
                {
                    "index": 0,
                    "name": "NVIDIA A100-SXM4-80GB",
                    "memory_total_mib": 81920,
                    "memory_used_mib": 0,
                    "utilization_pct": None,
                }
            ],
            [],
        ),
        (
            "0, NVIDIA GeForce GTX 1050, 4096, [Not Supported], [Not Supported]\n",
            [
                {
                    "index": 0,
                    "name": "NVIDIA GeForce GTX 1050",
                    "memory_total_mib": 4096,
                    "memory_used_mib": None,
                    "utilization_pct": None,
                }
            ],
            [],
        ),
        (
            "0, Tesla T4, 15360, 3, 0\r\n\r\n",
            [
                {
                    "index": 0,
                    "name": "Tesla T4",
                    "memory_total_mib": 15360,
                    "memory_used_mib": 3,
                    "utilization_pct": 0,
                }
            ],
            [],
        ),
        ("", [], []),
        ("No devices were found\n", [], ["No devices were found"]),
        ("0, NVIDIA H100 80GB HBM3, 81559\n", [], ["0, NVIDIA H100 80GB HBM3, 81559"]),
    ],
)
def test_parse_gpu_csv(text: str, rows: list[dict[str, Any]], bad: list[str]) -> None:
    assert parse_gpu_csv(text) == (rows, bad)


@pytest.mark.parametrize(
    ("text", "rows", "bad"),
    [
        (
            f"0, {UUID0}, 535.183.01\n1, {UUID1}, 535.183.01\n",
            [
                {"index": 0, "uuid": UUID0, "driver_version": "535.183.01"},
                {"index": 1, "uuid": UUID1, "driver_version": "535.183.01"},
            ],
            [],
        ),
        ("0, [N/A], [N/A]\n", [{"index": 0, "uuid": None, "driver_version": None}], []),
        ("garbage\n", [], ["garbage"]),
    ],
)
def test_parse_gpu_id_csv(text: str, rows: list[dict[str, Any]], bad: list[str]) -> None:
    assert parse_gpu_id_csv(text) == (rows, bad)


@pytest.mark.parametrize(
    ("text", "rows", "bad"),
    [
        (
            f"{UUID0}, 12345, /opt/venvs/vllm/bin/python3, 45812\n{UUID1}, 12399, python3, 45812\n",
            [
                {
                    "gpu_uuid": UUID0,
                    "pid": 12345,
                    "process_name": "/opt/venvs/vllm/bin/python3",
                    "used_memory_mib": 45812,
                },
                {
                    "gpu_uuid": UUID1,
                    "pid": 12399,
                    "process_name": "python3",
                    "used_memory_mib": 45812,
                },
            ],
            [],
        ),
        (  # WDDM / some container setups: no per-process memory
            f"{UUID0}, 4242, C:\\Python\\python.exe, [N/A]\n",
            [
                {
                    "gpu_uuid": UUID0,
                    "pid": 4242,
                    "process_name": "C:\\Python\\python.exe",
                    "used_memory_mib": None,
                }
            ],
            [],
        ),
        (  # a comma inside the process path stays in the name
            f"{UUID0}, 77, /srv/my,app/python, 1024\n",
            [
                {
                    "gpu_uuid": UUID0,
                    "pid": 77,
                    "process_name": "/srv/my,app/python",
                    "used_memory_mib": 1024,
                }
            ],
            [],
        ),
        ("", [], []),
        ("No running processes found\n", [], ["No running processes found"]),
    ],
)
def test_parse_compute_apps_csv(text: str, rows: list[dict[str, Any]], bad: list[str]) -> None:
    assert parse_compute_apps_csv(text) == (rows, bad)


@pytest.mark.parametrize(
    ("line", "count", "text_at", "fields"),
    [
        ("a, b, c", 3, 1, ["a", "b", "c"]),
        ("a, b, x, c", 3, 1, ["a", "b, x", "c"]),
        ("a, b", 3, 1, None),
        ("u, 1, n,a,me, 5", 4, 2, ["u", "1", "n,a,me", "5"]),
    ],
)
def test_split_fields(line: str, count: int, text_at: int, fields: list[str] | None) -> None:
    assert split_fields(line, count, text_at) == fields


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (" 42 ", "42"),
        ("[N/A]", None),
        ("N/A", None),
        ("[Not Supported]", None),
        ("", None),
        (" x y ", "x y"),
    ],
)
def test_na(raw: str, value: str | None) -> None:
    assert na(raw) == value


MEMINFO = """\
MemTotal:       263939608 kB
MemFree:        12345678 kB
MemAvailable:   250123456 kB
Buffers:          123456 kB
HugePages_Total:       0
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (MEMINFO, {"total_mib": 257753, "available_mib": 244261}),
        ("MemTotal: 2048 kB\n", {"total_mib": 2, "available_mib": None}),
        ("", {"total_mib": None, "available_mib": None}),
    ],
)
def test_parse_meminfo(text: str, expected: dict[str, int | None]) -> None:
    assert parse_meminfo(text) == expected


def test_parse_os_release() -> None:
    text = (
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
        'ID=ubuntu\n# comment\n\nID_LIKE=debian\nQUOTED=\'single q\'\nESC="a \\"b\\" \\$c"\n'
    )
    assert parse_os_release(text) == {
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS",
        "NAME": "Ubuntu",
        "VERSION_ID": "22.04",
        "ID": "ubuntu",
        "ID_LIKE": "debian",
        "QUOTED": "single q",
        "ESC": 'a "b" $c',
    }


# ---------------------------------------------------------------------------------------------
# The verb, run as on a host (python agent.pyz probe spec.json) with a fake nvidia-smi on PATH

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"
FAKE_SMI = f"""#!/bin/sh
case "$*" in
  *--query-gpu=index,name,*)
    echo "0, NVIDIA RTX A6000, 49140, 45869, 97"
    echo "1, NVIDIA RTX A6000, 49140, 1, [N/A]" ;;
  *--query-gpu=index,uuid,driver_version*)
    echo "0, {UUID0}, 535.183.01"
    echo "1, {UUID1}, 535.183.01" ;;
  *--query-compute-apps=*)
    echo "{UUID0}, 4321, /opt/venvs/vllm/bin/python3, 45812" ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

BROKEN_SMI = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
exit 9
"""

MISMATCH_SMI = """#!/bin/sh
echo "Failed to initialize NVML: Driver/library version mismatch"
echo "NVML library version: 535.183"
exit 18
"""


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = build_bundle()
    path = tmp_path_factory.mktemp("agent") / bundle.filename
    path.write_bytes(bundle.data)
    return path


def fake_bin(tmp_path: Path, script: str | None) -> Path:
    """A directory to use as the whole PATH, with ``nvidia-smi`` in it when ``script`` is set."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if script is not None:
        smi = bindir / "nvidia-smi"
        smi.write_text(script)
        smi.chmod(0o755)
    return bindir


def probe(pyz: Path, tmp_path: Path, spec: dict[str, Any], smi: str | None) -> dict[str, Any]:
    spec_path = tmp_path / "probe.json"
    spec_path.write_text(json.dumps({"v": CONTRACT_VERSION, **spec}))
    bindir = fake_bin(tmp_path, smi)
    # Without a fake, PATH is only the empty dir: a real nvidia-smi in /usr/bin must not count.
    env = {"PATH": f"{bindir}:/usr/bin:/bin" if smi else str(bindir), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(pyz), "probe", str(spec_path)],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [event] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert (event["v"], event["event"]) == (CONTRACT_VERSION, "result")
    return event["data"]


def test_probe_with_two_gpus(pyz: Path, tmp_path: Path) -> None:
    data = probe(pyz, tmp_path, {"workdir": str(tmp_path / "not" / "made"), "ports": []}, FAKE_SMI)
    assert data["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA RTX A6000",
            "memory_total_mib": 49140,
            "memory_used_mib": 45869,
            "utilization_pct": 97,
            "uuid": UUID0,
            "driver_version": "535.183.01",
            "processes": [
                {
                    "pid": 4321,
                    "process_name": "/opt/venvs/vllm/bin/python3",
                    "used_memory_mib": 45812,
                }
            ],
        },
        {
            "index": 1,
            "name": "NVIDIA RTX A6000",
            "memory_total_mib": 49140,
            "memory_used_mib": 1,
            "utilization_pct": None,
            "uuid": UUID1,
            "driver_version": "535.183.01",
            "processes": [],
        },
    ]
    assert data["driver_version"] == "535.183.01"
    assert data["nvidia_smi"] == {"available": True, "error": None, "warnings": []}
    assert data["disk"]["path"] == str(tmp_path)  # nearest existing parent of the workdir
    assert data["disk"]["free_gib"] > 0


def test_probe_host_facts(pyz: Path, tmp_path: Path) -> None:
    data = probe(
        pyz,
        tmp_path,
        {"workdir": str(tmp_path), "packages": ["pytest", "vllm", "no-such-dist"]},
        None,
    )
    assert data["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert data["python"]["executable"] == sys.executable
    assert data["cpu_count"] == os.cpu_count()
    assert data["hostname"] == socket.gethostname()
    assert data["packages"] == {
        "pytest": metadata.version("pytest"),
        "vllm": None,
        "no-such-dist": None,
    }
    meminfo = parse_meminfo(Path("/proc/meminfo").read_text())
    assert data["memory"]["total_mib"] == meminfo["total_mib"]
    assert 0 < data["memory"]["available_mib"] <= data["memory"]["total_mib"]
    assert data["os"]["kernel"] == os.uname().release


def test_probe_without_nvidia_smi(pyz: Path, tmp_path: Path) -> None:
    data = probe(pyz, tmp_path, {"workdir": str(tmp_path)}, None)
    assert data["gpus"] == []
    assert data["driver_version"] is None
    assert data["nvidia_smi"] == {
        "available": False,
        "error": "nvidia-smi not found on PATH",
        "warnings": [],
    }


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (
            BROKEN_SMI,
            "exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        ),
        (
            MISMATCH_SMI,
            "exited with status 18: Failed to initialize NVML: Driver/library version mismatch",
        ),
    ],
)
def test_probe_with_failing_nvidia_smi(pyz: Path, tmp_path: Path, script: str, error: str) -> None:
    data = probe(pyz, tmp_path, {"workdir": str(tmp_path)}, script)
    assert data["gpus"] == []
    assert data["nvidia_smi"]["available"] is False
    assert data["nvidia_smi"]["error"].startswith(str(tmp_path / "bin" / "nvidia-smi") + " ")
    assert error in data["nvidia_smi"]["error"]


def test_probe_reports_free_and_busy_ports(pyz: Path, tmp_path: Path) -> None:
    with socket.socket() as busy, socket.socket() as spare:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        spare.bind(("127.0.0.1", 0))
        free_port = spare.getsockname()[1]
        spare.close()  # now unbound: free
        busy_port = busy.getsockname()[1]
        data = probe(
            pyz, tmp_path, {"workdir": str(tmp_path), "ports": [busy_port, free_port]}, None
        )
    holders = data["ports"].pop("holders")
    assert data["ports"] == {
        "checked": [busy_port, free_port],
        "free": [free_port],
        "bind_host": "127.0.0.1",
    }
    # the taken port's holder is named: this test's process, its user, no orch run
    assert [(h["pid"], h["port"], h["run_id"]) for h in holders] == [(os.getpid(), busy_port, None)]
    assert holders[0]["user"] == pwd.getpwuid(os.getuid()).pw_name
    # its command line as /proc says it, masked and cut as the probe does (under xdist a worker's
    # command line is `python -u -c ...`, not pytest's)
    argv = [part for part in Path("/proc/self/cmdline").read_text().split("\0") if part]
    own = " ".join(" ".join(part.split()) for part in mask_argv(argv))[:160]
    assert own and holders[0]["cmdline"] == own


# ---------------------------------------------------------------------------------------------
# HostFacts and the GPU check


def test_host_facts_from_probe(pyz: Path, tmp_path: Path) -> None:
    data = probe(pyz, tmp_path, {"workdir": str(tmp_path), "ports": [1]}, FAKE_SMI)
    facts = HostFacts.from_probe(ProbeResult.from_json(data))
    assert facts.python_version == data["python"]["version"]
    assert facts.driver_version == "535.183.01"
    assert [(g.index, g.name, g.memory_used_mib, g.uuid) for g in facts.gpus] == [
        (0, "NVIDIA RTX A6000", 45869, UUID0),
        (1, "NVIDIA RTX A6000", 1, UUID1),
    ]
    assert [(p.pid, p.used_memory_mib) for p in facts.gpus[0].processes] == [(4321, 45812)]
    assert facts.engines == {"vllm": data["packages"]["vllm"], "sglang": data["packages"]["sglang"]}
    assert facts.nvidia_smi_error is None
    assert facts.checked_ports == [1]
    assert facts.memory_total_mib == data["memory"]["total_mib"]
    assert facts.gpu_problems(GpuSpec(2, "RTX A6000")) == []
    assert facts.gpu_problems(GpuSpec(4, "RTX A6000")) == ["expected 4 x RTX A6000, found 2 GPUs"]


def test_hosts_check_and_the_doctor_read_the_same_probe(pyz: Path, tmp_path: Path) -> None:
    """Issue 8: two parsers disagreed, the doctor seeing no probed port (so never checking it)
    when built from the host facts production hands it. Now one typed result feeds both."""
    raw = probe(pyz, tmp_path, {"workdir": str(tmp_path), "ports": [8000]}, FAKE_SMI)
    result = ProbeResult.from_json(raw)
    facts = HostFacts.from_probe(result)
    assert facts.probe is result
    assert HostProbe.from_probe(result).checked_ports == {8000}
    assert HostProbe.from_probe(facts.probe).checked_ports == {8000}  # the production path
    assert HostProbe.from_probe(facts.probe) == HostProbe.from_probe(result)
    assert facts.checked_ports == [8000]
    assert result.to_json() == raw  # nothing the agent said is lost on the way


def test_the_doctor_finds_an_engine_whose_package_has_another_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe reports versions by Python package; the doctor asks by engine name. With a
    package named unlike its engine (a vendor build), the version must still be found."""
    from dataclasses import replace

    from orchestrator.doctor.host import check_engine_version
    from orchestrator.engines.vllm import VllmEngine

    monkeypatch.setattr(VllmEngine, "package", "vllm-cu128")
    golden = json.loads((GOLDEN / "probe.result.json").read_text())
    result = replace(
        ProbeResult.from_json(golden), packages={"vllm-cu128": "0.33.0", "torch": "2.9.0"}
    )
    host = HostProbe.from_probe(result)
    assert host.engines == {"vllm": "0.33.0", "sglang": None}
    found = check_engine_version(host, engine="vllm", method="dflash")
    assert (found.severity, found.message) == ("ok", "vllm 0.33.0 supports 'dflash'.")


def test_host_facts_without_nvidia_smi(pyz: Path, tmp_path: Path) -> None:
    facts = HostFacts.from_probe(
        ProbeResult.from_json(probe(pyz, tmp_path, {"workdir": str(tmp_path)}, None))
    )
    assert facts.gpus == []
    assert facts.nvidia_smi_error == "nvidia-smi not found on PATH"
    assert facts.gpu_problems(None) == []
    assert facts.gpu_problems(GpuSpec(2, "RTX A6000")) == [
        "expected 2 x RTX A6000, but nvidia-smi is not available: nvidia-smi not found on PATH"
    ]
    # no GPUs declared: not a problem, but never silent (issue 2: "reported as such")
    assert facts.gpu_warnings(None) == ["no GPU information: nvidia-smi not found on PATH"]
    assert facts.gpu_warnings(GpuSpec(2, "RTX A6000")) == []  # gpu_problems says it already


def test_host_facts_with_nvidia_smi_have_no_gpu_warning(pyz: Path, tmp_path: Path) -> None:
    facts = HostFacts.from_probe(
        ProbeResult.from_json(probe(pyz, tmp_path, {"workdir": str(tmp_path)}, FAKE_SMI))
    )
    assert facts.gpu_warnings(None) == []
    assert facts.gpu_warnings(GpuSpec(2, "RTX A6000")) == []


@pytest.mark.parametrize(
    ("declared", "smi_error", "smi_warnings", "warnings"),
    [
        (None, None, [], []),
        (GpuSpec(2, "RTX A6000"), None, [], []),
        (
            None,
            "nvidia-smi not found on PATH",
            [],
            ["no GPU information: nvidia-smi not found on PATH"],
        ),
        (
            None,
            "nvidia-smi exited with status 9: NVIDIA-SMI has failed",
            [],
            ["no GPU information: nvidia-smi exited with status 9: NVIDIA-SMI has failed"],
        ),
        (GpuSpec(1), "nvidia-smi not found on PATH", [], []),
        (
            None,
            None,
            ["compute-apps query failed: nvidia-smi exited with status 2"],
            ["compute-apps query failed: nvidia-smi exited with status 2"],
        ),
        (
            GpuSpec(2),
            None,
            ["unparsed nvidia-smi line: 'x, y'"],
            ["unparsed nvidia-smi line: 'x, y'"],
        ),
    ],
)
def test_gpu_warnings(
    declared: GpuSpec | None, smi_error: str | None, smi_warnings: list[str], warnings: list[str]
) -> None:
    assert gpu_warnings(declared, nvidia_smi_error=smi_error, smi_warnings=smi_warnings) == warnings


def gpu(index: int, name: str) -> GpuInfo:
    return GpuInfo(index, name, 49140, 0, 0, f"GPU-{index}")


A6000 = "NVIDIA RTX A6000"


@pytest.mark.parametrize(
    ("declared", "gpus", "smi_error", "problems"),
    [
        (None, [], None, []),
        (None, [gpu(0, A6000)], "nvidia-smi not found on PATH", []),
        (GpuSpec(2, "RTX A6000"), [gpu(0, A6000), gpu(1, A6000)], None, []),
        (GpuSpec(2, "rtx a6000"), [gpu(0, A6000), gpu(1, A6000)], None, []),
        (GpuSpec(2, "NVIDIA RTX A6000"), [gpu(0, A6000), gpu(1, A6000)], None, []),
        (GpuSpec(2), [gpu(0, A6000), gpu(1, "NVIDIA A100-SXM4-80GB")], None, []),
        (GpuSpec(1, "A100"), [gpu(0, "NVIDIA A100-SXM4-80GB")], None, []),
        (GpuSpec(2, "RTX A6000"), [gpu(0, A6000)], None, ["expected 2 x RTX A6000, found 1 GPU"]),
        (GpuSpec(1), [gpu(0, A6000), gpu(1, A6000)], None, ["expected 1 GPU, found 2 GPUs"]),
        (GpuSpec(2, "RTX A6000"), [], None, ["expected 2 x RTX A6000, found 0 GPUs"]),
        (
            GpuSpec(2, "RTX A6000"),
            [gpu(0, A6000), gpu(1, "NVIDIA RTX 6000 Ada Generation")],
            None,
            ["GPU 1 is NVIDIA RTX 6000 Ada Generation, expected RTX A6000"],
        ),
        (
            GpuSpec(2, "H100"),
            [gpu(0, A6000)],
            None,
            ["expected 2 x H100, found 1 GPU", "GPU 0 is NVIDIA RTX A6000, expected H100"],
        ),
        (
            GpuSpec(2, "RTX A6000"),
            [],
            "nvidia-smi exited with status 9: NVIDIA-SMI has failed",
            [
                "expected 2 x RTX A6000, but nvidia-smi is not available: nvidia-smi exited with status 9: NVIDIA-SMI has failed"
            ],
        ),
        (
            GpuSpec(1),
            [],
            "nvidia-smi not found on PATH",
            ["expected 1 GPU, but nvidia-smi is not available: nvidia-smi not found on PATH"],
        ),
    ],
)
def test_compare_gpus(
    declared: GpuSpec | None, gpus: list[GpuInfo], smi_error: str | None, problems: list[str]
) -> None:
    assert compare_gpus(declared, gpus, nvidia_smi_error=smi_error) == problems


@pytest.mark.parametrize(
    ("declared", "actual", "matches"),
    [
        ("RTX A6000", "NVIDIA RTX A6000", True),
        ("nvidia rtx  a6000", "NVIDIA RTX A6000", True),
        ("A6000", "NVIDIA RTX A6000", True),
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("A100 80GB", "NVIDIA A100 80GB PCIe", True),
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("A10", "NVIDIA A100-SXM4-80GB", False),
        ("RTX A6000", "NVIDIA RTX 6000 Ada Generation", False),
        ("RTX 6000", "NVIDIA RTX A6000", False),
        ("T4", "Tesla T4", True),
        ("L4", "NVIDIA L40S", False),
    ],
)
def test_model_matches(declared: str, actual: str, matches: bool) -> None:
    assert model_matches(declared, actual) is matches
