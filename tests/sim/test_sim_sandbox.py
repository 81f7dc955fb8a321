"""The sandbox makes the engines look installed for its own processes, and only for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.sim.models import ModelNotFound, resolve_model
from orchestrator.sim.sandbox import prepare_sandbox, shipped_models
from orchestrator.sim.versions import SGLANG_VERSION, VLLM_VERSION


def test_layout_env_and_idempotence(tmp_path: Path) -> None:
    box = prepare_sandbox(tmp_path / "box", gpus=4, gpu_name="NVIDIA L40S", gpu_memory_mib=46068)
    assert box.env() == {
        "PATH": f"{box.bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(box.pythonpath),
        "HF_HOME": str(box.hf_home),
        "HOME": str(box.home),
        "ORCH_SIM_STATE": str(box.state_dir),
        "LD_LIBRARY_PATH": str(box.root / "lib"),  # the simulated GPUs' libnvidia-ml.so.1
    }
    assert box.env("/opt/bin")["PATH"] == f"{box.bin_dir}:/opt/bin"
    assert json.loads((box.state_dir / "gpus.json").read_text())["count"] == 4
    for name in ("vllm", "nvidia-smi", "python"):
        assert os.access(box.bin_dir / name, os.X_OK)
    assert (box.bin_dir / "vllm").read_text().startswith(f"#!{sys.executable}\n")
    before = {p: p.stat().st_mtime_ns for p in box.root.rglob("*") if p.is_file()}
    again = prepare_sandbox(tmp_path / "box", gpus=4, gpu_name="NVIDIA L40S", gpu_memory_mib=46068)
    assert again == box
    assert {p: p.stat().st_mtime_ns for p in box.root.rglob("*") if p.is_file()} == before


def test_hf_cache_layout_resolves_every_shipped_model(tmp_path: Path) -> None:
    box = prepare_sandbox(tmp_path / "box")
    models = shipped_models()
    assert set(models) >= {"Qwen/Qwen3.6-27B", "Qwen/Qwen3-8B", "z-lab/Qwen3.6-27B-DFlash",
                           "z-lab/Qwen3-8B-DFlash", "orch-demo/Qwen3.6-27B-DFlash-broken"}  # fmt: skip
    env = box.env()
    for repo, src in models.items():
        repo_dir = box.hf_home / "hub" / ("models--" + repo.replace("/", "--"))
        revision = (repo_dir / "refs" / "main").read_text()
        snap = resolve_model(repo, env)
        assert snap == repo_dir / "snapshots" / revision
        assert (
            snap / "config.json"
        ).is_symlink()  # into ../../blobs/<sha256>, as huggingface_hub does
        assert json.loads((snap / "config.json").read_text()) == json.loads(
            (src / "config.json").read_text()
        )
    assert resolve_model(str(models["Qwen/Qwen3-8B"]), env) == models["Qwen/Qwen3-8B"]
    try:
        resolve_model("Qwen/Qwen9-1T", env)
    except ModelNotFound:
        pass
    else:
        raise AssertionError("a model that is not cached must not resolve")


def test_engines_are_installed_for_sandbox_processes_only(tmp_path: Path) -> None:
    box = prepare_sandbox(tmp_path / "box")
    probe = (
        "import importlib.metadata as m, shutil, sglang, vllm;"
        "print(m.version('vllm'), m.version('sglang'), vllm.__version__, sglang.__version__);"
        "print(shutil.which('vllm'), shutil.which('nvidia-smi'))"
    )
    done = subprocess.run(
        ["python", "-c", probe], env=box.env(), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    versions, paths = done.stdout.splitlines()
    assert versions.split() == [VLLM_VERSION, SGLANG_VERSION, VLLM_VERSION, SGLANG_VERSION]
    assert paths.split() == [str(box.bin_dir / "vllm"), str(box.bin_dir / "nvidia-smi")]
    outside = subprocess.run([sys.executable, "-c", "import sglang"], capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, timeout=30)  # fmt: skip
    assert outside.returncode != 0
    version = subprocess.run(
        ["vllm", "--version"], env=box.env(), capture_output=True, text=True, timeout=30
    )
    assert version.stdout.strip() == VLLM_VERSION
