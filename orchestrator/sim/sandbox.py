"""Make the simulator look installed on a simulated host, without touching the user's PATH.

A sandbox is a directory that plays the part of a GPU host's engine environment: a ``vllm``
executable, an importable ``sglang`` package (``python -m sglang.launch_server``), installed
package metadata (so a probe reads engine versions the ordinary way), a fake ``nvidia-smi``
and an NVML library (``nvml.py``, where a C compiler can build it) showing the simulated GPUs,
and a Hugging Face cache holding the shipped model directories
under their real ids. Processes started with ``Sandbox.env()`` see all of it; nothing else does.
A host running a real engine leaves the engines out (``engines=False``), and a CPU host the
``nvidia-smi`` (``nvidia_smi=False``): what the sandbox fakes is only what the host lacks.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.sim import nvml
from orchestrator.sim.versions import (
    DRIVER_VERSION,
    SGLANG_VERSION,
    VLLM_VERSION,
)

DEFAULT_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
MODELS_DIR = Path(__file__).resolve().parent / "models"
# The directory that holds the `orchestrator` package: generated scripts put it on sys.path so
# they work whichever interpreter runs them and whatever the current directory is.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Sandbox:
    root: Path
    home: Path
    bin_dir: Path
    pythonpath: Path
    hf_home: Path
    state_dir: Path
    engines: bool = True  # the simulated vllm/sglang are installed (on PATH and PYTHONPATH)
    nvml: bool = False  # lib/libnvidia-ml.so.1 answers for the simulated GPUs (nvml.py)

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    def env(self, base_path: str | None = None) -> dict[str, str]:
        """The variables a host session needs so that the simulated engines are 'installed'.

        Without simulated engines there is no PYTHONPATH: the fake ``vllm`` package would
        shadow the real one of the host's interpreter."""
        env = {
            "PATH": f"{self.bin_dir}:{base_path or DEFAULT_BASE_PATH}",
            "HF_HOME": str(self.hf_home),
            "HOME": str(self.home),
            "ORCH_SIM_STATE": str(self.state_dir),
        }
        if self.engines:
            env["PYTHONPATH"] = str(self.pythonpath)
        if self.nvml:  # where the dynamic loader finds the simulated GPUs' NVML first
            env["LD_LIBRARY_PATH"] = str(self.lib_dir)
        return env


def prepare_sandbox(
    root: Path,
    *,
    python: str = sys.executable,
    gpus: int = 2,
    gpu_name: str = "NVIDIA RTX A6000",
    gpu_memory_mib: int = 49140,
    engines: bool = True,
    nvidia_smi: bool = True,
) -> Sandbox:
    """Create (or refresh) a sandbox under ``root``; cheap to call again on the same root.

    ``python`` is the host's engine interpreter (``python`` on PATH runs it) and runs the
    simulated programs; ``engines``/``nvidia_smi`` False leave those programs out (and remove
    them from an earlier refresh: a host's declaration may change between runs)."""
    root = Path(root).resolve()
    box = Sandbox(
        root=root,
        home=root / "home",
        bin_dir=root / "bin",
        pythonpath=root / "python",
        hf_home=root / "hf",
        state_dir=root / "state",
        engines=engines,
    )
    for path in (box.home, box.bin_dir, box.pythonpath, box.hf_home, box.state_dir):
        path.mkdir(parents=True, exist_ok=True)
    gpu_facts = {
        "count": gpus,
        "name": gpu_name,
        "memory_mib": gpu_memory_mib,
        "driver_version": _installed_driver(box.state_dir / "gpus.json"),
    }
    _write_if_changed(box.state_dir / "gpus.json", json.dumps(gpu_facts, indent=2) + "\n")
    _write_scripts(box, python, engines=engines, nvidia_smi=nvidia_smi)
    if nvidia_smi:  # simulated GPUs: their NVML too, where this machine can build it
        box = replace(box, nvml=nvml.install(box.lib_dir))
    else:
        nvml.remove(box.lib_dir)
    if engines:
        _write_packages(box, python)
    install_models(box.hf_home / "hub")
    return box


def _installed_driver(path: Path) -> str:
    """The driver a refresh keeps: a host's driver is its own state, and a test that
    'upgrades' it (edits gpus.json between two nights) must not see it reset by the next run."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return DRIVER_VERSION
    driver = saved.get("driver_version") if isinstance(saved, dict) else None
    return driver if isinstance(driver, str) and driver else DRIVER_VERSION


def _preamble(box: Sandbox) -> str:
    """Lines every generated script starts with: find orch's source and the sandbox state."""
    return (
        "import os\n"
        "import sys\n"
        f"sys.path.insert(0, {str(_SOURCE_ROOT)!r})\n"
        f"os.environ.setdefault('ORCH_SIM_STATE', {str(box.state_dir)!r})\n"
    )


def _write_scripts(box: Sandbox, python: str, *, engines: bool, nvidia_smi: bool) -> None:
    head = f"#!{python}\n# Generated by orch's engine simulator sandbox.\n"
    vllm = (
        head
        + "# Stands in for vLLM's command-line interface (`vllm serve MODEL ...`).\n"
        + _preamble(box)
        + "from orchestrator.sim.__main__ import main\n"
        "sys.argv[0] = 'vllm'\n"
        "sys.exit(main(['vllm', *sys.argv[1:]]))\n"
    )
    smi = (
        head
        + "# Stands in for nvidia-smi, showing the simulated GPUs.\n"
        + _preamble(box)
        + "from orchestrator.sim.nvidia_smi import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    # An engine venv's `python`: hosts set up for serving have one on PATH.
    py = f'#!/bin/sh\nexec {_sh_quote(python)} "$@"\n'
    wanted = {"vllm": engines, "nvidia-smi": nvidia_smi, "python": True}
    for name, text in (("vllm", vllm), ("nvidia-smi", smi), ("python", py)):
        if wanted[name]:
            _write_if_changed(box.bin_dir / name, text, mode=0o755)
        else:
            (box.bin_dir / name).unlink(missing_ok=True)


def _write_packages(box: Sandbox, python: str) -> None:
    """`sglang` and `vllm` import packages plus dist-info, like a pip-installed engine."""
    sglang = box.pythonpath / "sglang"
    sglang.mkdir(exist_ok=True)
    _write_if_changed(sglang / "__init__.py", f'__version__ = "{SGLANG_VERSION}"\n')
    _write_if_changed(sglang / "version.py", f'__version__ = "{SGLANG_VERSION}"\n')
    launch = (
        '"""Stands in for SGLang\'s `python -m sglang.launch_server` (orch simulator)."""\n'
        + _preamble(box)
        + "\nif __name__ == '__main__':\n"
        "    try:\n"
        "        import aiohttp  # noqa: F401  (the simulator's server needs it)\n"
        "    except ImportError:\n"
        "        if os.environ.get('ORCH_SIM_REEXEC'):\n"
        "            raise\n"
        "        os.environ['ORCH_SIM_REEXEC'] = '1'\n"
        f"        os.execv({python!r}, [{python!r}, '-m', 'sglang.launch_server', *sys.argv[1:]])\n"
        "    from orchestrator.sim.__main__ import main\n"
        "    sys.argv[0] = 'launch_server.py'\n"
        "    sys.exit(main(['sglang', *sys.argv[1:]]))\n"
    )
    _write_if_changed(sglang / "launch_server.py", launch)
    vllm = box.pythonpath / "vllm"
    vllm.mkdir(exist_ok=True)
    _write_if_changed(vllm / "__init__.py", f'__version__ = "{VLLM_VERSION}"\n')
    for name, version in (("vllm", VLLM_VERSION), ("sglang", SGLANG_VERSION)):
        info = box.pythonpath / f"{name}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        _write_if_changed(info / "METADATA", meta)
        _write_if_changed(info / "top_level.txt", f"{name}\n")
        _write_if_changed(info / "INSTALLER", "pip\n")


def shipped_models() -> dict[str, Path]:
    """Repository id (``Qwen/Qwen3.6-27B``) -> shipped model directory."""
    found: dict[str, Path] = {}
    if not MODELS_DIR.is_dir():
        return found
    for org in sorted(p for p in MODELS_DIR.iterdir() if p.is_dir()):
        for model in sorted(p for p in org.iterdir() if p.is_dir()):
            if (model / "config.json").is_file():
                found[f"{org.name}/{model.name}"] = model
    return found


def install_models(hub: Path, models: dict[str, Path] | None = None) -> dict[str, Path]:
    """Lay the models out as huggingface_hub does: blobs, snapshots/<rev> symlinks, refs/main.

    Returns repo id -> snapshot directory. The revision is a hash of the files, so it is fixed
    for a given checkout and changes when a shipped file changes.
    """
    snapshots: dict[str, Path] = {}
    for repo_id, src in (models or shipped_models()).items():
        files = sorted(p for p in src.rglob("*") if p.is_file())
        digest = hashlib.sha1()
        for f in files:
            digest.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes() + b"\0")
        revision = digest.hexdigest()
        repo_dir = hub / ("models--" + repo_id.replace("/", "--"))
        snap = repo_dir / "snapshots" / revision
        for f in files:
            data = f.read_bytes()
            blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.parent.mkdir(parents=True, exist_ok=True)
                _atomic_write(blob, data)
            link = snap / f.relative_to(src)
            target = os.path.relpath(blob, link.parent)
            if not (link.is_symlink() and os.readlink(link) == target):
                link.parent.mkdir(parents=True, exist_ok=True)
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(target)
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        _write_if_changed(repo_dir / "refs" / "main", revision)
        snapshots[repo_id] = snap
    return snapshots


def _write_if_changed(path: Path, text: str, *, mode: int = 0o644) -> None:
    data = text.encode()
    try:
        if path.read_bytes() == data and path.stat().st_mode & 0o777 == mode:
            return
    except OSError:
        pass
    _atomic_write(path, data, mode=mode)


def _atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write then rename: a process running or reading it concurrently never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
