"""The GPU device check keeps working where there is no GPU: against the stand-in NVML library
it samples, compares the counter with the power integral and writes its files (marked a dry run,
never collected); without NVML it says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.collect import collect
from tests.fixtures.benchsmoke import ROOT
from tests.fixtures.nvml import build_fake_nvml


def gpu_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_dry_run_on_the_stand_in_library(tmp_path: Path) -> None:
    lib = build_fake_nvml(tmp_path)
    done = gpu_check(
        *("--library", str(lib), "--no-load", "--idle-s", "0.3", "--load-s", "0.6"),
        *("--out", str(tmp_path)),
        env={"FAKE_NVML_POWER_MW": "180000"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert data["smoke"] is True  # --no-load: a dry run
    whole, loaded = data["rows"]
    assert whole[0] == "whole run" and loaded[0] == "loaded part"
    # 180 W for the ~1.2 s sampled: the counter, and the integral beside it
    assert 150 < whole[1] < 300 and abs(whole[2] - whole[1]) / whole[1] < 0.01
    assert loaded[1] < whole[1] and whole[4] < 0.5
    assert [t["met"] for t in data["targets"]] == [True, True]
    assert "## GPU telemetry on a real GPU\n\nNot measured yet." in collect(tmp_path)


def test_no_gpu_is_one_line(tmp_path: Path) -> None:
    done = gpu_check("--library", str(tmp_path / "libnvidia-ml.so.1"), "--out", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith("gpu_check: cannot load")
    assert "is this a machine with an NVIDIA GPU" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.glob("gpu_check.*"))
