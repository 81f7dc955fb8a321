"""The agent's GPU telemetry: nvidia-smi's output parsed (a real H200's, the simulator's), and
NVML read through ctypes from a real shared library (a stand-in built here with the system's C
compiler: a GPU's library needs a GPU), sampled on a schedule."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from orchestrator.remote.telemetry import (
    SMI_QUERY,
    GpuSample,
    NvmlReader,
    Sampler,
    SmiReader,
    TelemetryUnavailable,
    open_reader,
    parse_smi_csv,
    reason_names,
)
from tests.fixtures.nvml import build_fake_nvml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200 = FIXTURES / "gpu_samples" / "h200-driver-580"


def h200_power_fields() -> str:
    """The header and line of the power/clock query a real H200 answered (queries.txt)."""
    text = (H200 / "queries.txt").read_text()
    block = text.split("=== power fields\n", 1)[1].split("\n===", 1)[0]
    return block


def test_a_real_h200_line_parses_by_its_header() -> None:
    [sample] = parse_smi_csv(h200_power_fields(), t=12.5)
    # nvidia-smi's own timestamp (local time, to the ms), not the time it was read
    assert time.localtime(sample.t)[:6] == (2026, 12, 4, 13, 30, 4)
    assert sample.t % 1 == pytest.approx(0.836, abs=1e-6)
    assert sample == GpuSample(
        t=sample.t,
        gpu=0,
        energy_mj=None,
        power_w=84.88,
        sm_mhz=345,
        mem_mhz=3201,
        mem_used_mib=0,
        util_pct=0,
        temp_c=34,
        reasons=1,
    )
    assert reason_names(sample.reasons or 0) == ["gpu_idle"]


def test_placeholders_and_broken_lines() -> None:
    text = (
        "index, power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz], "
        "memory.used [MiB], utilization.gpu [%], temperature.gpu, clocks_event_reasons.active\n"
        "0, 287.40, 1740, 8001, 20480, 97, 61, 0x0000000000000024\n"
        "1, [N/A], [Not Supported], 8001, 512, 0, 34, [N/A]\n"
        "Unable to determine the device handle for GPU 0000:02:00.0: Unknown Error\n"
    )
    first, second = parse_smi_csv(text, t=1.0)
    assert (first.gpu, first.power_w, first.sm_mhz, first.reasons) == (0, 287.4, 1740, 0x24)
    assert reason_names(0x24) == ["sw_power_cap", "sw_thermal"]
    assert (second.gpu, second.power_w, second.sm_mhz, second.reasons) == (1, None, None, None)
    assert parse_smi_csv("", t=0.0) == []
    assert reason_names(0x1000 | 0x4) == ["sw_power_cap", "0x1000"]


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The stand-in library, built twice: a current driver's and an old one's."""
    out = tmp_path_factory.mktemp("nvml")
    return {"current": build_fake_nvml(out), "old": build_fake_nvml(out, old_driver=True)}


def test_nvml_reads_every_field(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_POWER_MW", "250000")
    monkeypatch.setenv("FAKE_NVML_REASONS", "0x40")
    reader = NvmlReader([0, 1], str(fake_nvml["current"]))
    before = time.time()
    first, second = reader.read()
    assert before <= first.t == second.t <= time.time()
    assert (first.gpu, second.gpu) == (0, 1)
    assert first.power_w == 250.0 and first.sm_mhz == 1740 and second.sm_mhz == 1741
    assert (first.mem_mhz, first.mem_used_mib, first.util_pct, first.temp_c) == (
        8001,
        20480,
        97,
        71,
    )
    assert reason_names(first.reasons or 0) == ["hw_thermal"]
    assert first.energy_mj is not None and first.energy_mj >= 0
    assert reader.power_limit_w(1) == 300.0
    reader.close()


def test_an_old_driver_has_no_counter_and_the_older_reasons_name(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_REASONS", "0x4")
    [sample] = NvmlReader([0], str(fake_nvml["old"])).read()
    assert sample.energy_mj is None and sample.power_w == 200.0
    assert reason_names(sample.reasons or 0) == ["sw_power_cap"]


def test_no_driver_and_no_gpu_are_said(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(
        TelemetryUnavailable,
        match=r"GPU 5: nvmlDeviceGetHandleByIndex_v2 failed: Invalid Argument \(2\)",
    ):
        NvmlReader([5], str(fake_nvml["current"]))
    monkeypatch.setenv("FAKE_NVML_INIT_FAIL", "1")
    with pytest.raises(TelemetryUnavailable, match=r"nvmlInit_v2 failed: Driver Not Loaded \(9\)"):
        NvmlReader([0], str(fake_nvml["current"]))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    with pytest.raises(TelemetryUnavailable) as raised:
        open_reader([0], str(fake_nvml["current"]))
    assert "Driver Not Loaded" in str(raised.value)
    assert "nvidia-smi not found on PATH" in str(raised.value)
    with pytest.raises(TelemetryUnavailable, match="cannot load"):
        NvmlReader([0], str(tmp_path / "libnvidia-ml.so.1"))


def test_the_sampler_keeps_its_schedule_and_the_counter_matches_the_power(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_POWER_MW", "300000")
    sampler = Sampler(NvmlReader([0], str(fake_nvml["current"])), interval_s=0.05).start()
    time.sleep(1.0)
    samples = sampler.stop()
    assert sampler.errors == []
    times = [s.t for s in samples]
    assert times == sorted(times)
    span = times[-1] - times[0]
    # a read every 50 ms on schedule: about span / 0.05 + 1 of them (a busy machine may skip
    # some, never add any)
    assert 0.5 * (span / 0.05) <= len(samples) <= span / 0.05 + 2
    energy = (samples[-1].energy_mj or 0) - (samples[0].energy_mj or 0)
    assert energy / 1000.0 == pytest.approx(300.0 * span, rel=0.05)
    # the sampler's own CPU: a small share of the time it ran
    assert sampler.cpu_s < 0.2 * span


def test_nvidia_smi_is_the_fallback_on_the_simulators_gpus(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The simulated host's nvidia-smi answers the same looping query a real one does: one
    process, a line per GPU every interval, each with its own timestamp."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\nfrom orchestrator.sim.nvidia_smi import main\n"
        "raise SystemExit(main())\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    monkeypatch.setenv("ORCH_SIM_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("FAKE_NVML_INIT_FAIL", "1")
    reader = open_reader([0, 1], str(fake_nvml["current"]), interval_s=0.1)
    try:
        assert isinstance(reader, SmiReader) and reader.source == "nvidia-smi"
        assert reader.argv[1:3] == SMI_QUERY and reader.argv[-3:] == ["--id=0,1", "-lms", "500"]
        assert reader.interval_s == 0.5  # power.draw is a 1 s average: twice a second is enough
        sampler = Sampler(reader, interval_s=0.1).start()
        time.sleep(1.6)
        samples = sampler.stop()
    finally:
        reader.close()
    assert sampler.errors == []
    assert {s.gpu for s in samples} == {0, 1}
    first = samples[0]
    assert first.energy_mj is None and first.power_w == 22.51
    assert (first.sm_mhz, first.mem_mhz) == (210, 405)
    assert reason_names(first.reasons or 0) == ["gpu_idle"]
    times = sorted({s.t for s in samples})
    assert len(times) >= 3  # a line a GPU every 0.5 s
    assert all(abs(t - time.time()) < 5 for t in times)


def test_no_nvidia_smi_lines_is_no_fallback(
    fake_nvml: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An nvidia-smi that fails before its first line (no driver) is no fallback."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_NVML_INIT_FAIL", "1")
    with pytest.raises(
        TelemetryUnavailable, match="nvidia-smi exited with status 9 before its first sample"
    ):
        open_reader([0], str(fake_nvml["current"]))


def test_the_live_read_takes_each_gpus_newest_sample() -> None:
    """nvidia-smi's GPU 0 line of the next read may come before GPU 1's: the live figure adds
    GPU 0's newest and GPU 1's newest, never GPU 0 twice."""
    sampler = Sampler.__new__(Sampler)
    sampler.samples = [
        GpuSample(1.0, 0, None, 200.0, 1740, None, None, None, None, None),
        GpuSample(1.0, 1, None, 100.0, 1740, None, None, None, None, None),
        GpuSample(1.5, 0, None, 210.0, 1410, None, None, None, None, None),
    ]
    assert sampler.latest(2) == (310.0, 1575)
    assert Sampler.latest(sampler, 0) == (None, None)
