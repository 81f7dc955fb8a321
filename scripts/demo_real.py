"""``make demo-real``: the demo's story on the real vLLM CPU build, for anyone without a GPU.

The model paths are only known once ``scripts/realvllm.py`` has built (or found) the venv and
the tiny models, so the committed ``playbooks/demo-real.yaml`` names them as
``${ORCH_REAL_VLLM_MODELS}/...``. This launcher builds them, writes under ``build/demo-real/``
(git-ignored) a copy of the playbook with that folder filled in and a hosts file (one embedded
host, ``gpus: none``, whose ``python`` is the venv's: it runs the real engine, not the
simulator), then runs ``orch run --fail-on failed`` as ``make demo`` does (the broken drafter
collapses on purpose) and exits with its status. Arguments are passed on to ``orch run``.

    python -m scripts.demo_real [ORCH RUN OPTIONS ...]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

try:
    from scripts import realvllm
except ImportError:  # run as a file: scripts/ itself is on sys.path
    import realvllm  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "demo-real.yaml"
OUT = ROOT / "build" / "demo-real"
PLACEHOLDER = "${ORCH_REAL_VLLM_MODELS}"
MODELS = ("tiny-model", "tiny-draft", "tiny-eagle3")
HOST = "local-cpu"


class DemoError(RuntimeError):
    """The demo cannot start; the message says why."""


def fill_models(node: Any, models: Path) -> Any:
    """``node`` (a loaded playbook) with the placeholder replaced by ``models`` in every string.

    Done on the loaded document, not the text, so that any folder name stays one YAML string."""
    if isinstance(node, str):
        return node.replace(PLACEHOLDER, str(models))
    if isinstance(node, dict):
        return {key: fill_models(value, models) for key, value in node.items()}
    if isinstance(node, list):
        return [fill_models(item, models) for item in node]
    return node


def filled_playbook(text: str, models: Path) -> dict[str, Any]:
    """The committed playbook's text, loaded and filled in; its model folders must exist."""
    if PLACEHOLDER not in text:
        raise DemoError(f"{PLAYBOOK.name} names no {PLACEHOLDER}: nothing to fill in")
    book = fill_models(yaml.safe_load(text), models)
    missing = [name for name in MODELS if not (models / name / "config.json").is_file()]
    if missing:
        raise DemoError(f"{models} lacks {', '.join(missing)}: rebuild with scripts/realvllm.py")
    return book


def hosts_document(python: Path) -> dict[str, Any]:
    """One embedded CPU host running the venv's interpreter, hence the real vLLM."""
    entry = {
        "transport": "embedded",
        "python": str(python),
        "gpus": "none",
        "env": realvllm.CPU_HOST_ENV,
    }
    return {"hosts": {HOST: entry}}


def write_inputs(models: Path, python: Path, folder: Path = OUT) -> tuple[Path, Path]:
    """Write the filled-in playbook and the hosts file; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    book = folder / PLAYBOOK.name
    hosts = folder / "hosts.yaml"
    header = f"# written by scripts/demo_real.py from {PLAYBOOK.relative_to(ROOT)}\n"
    filled = filled_playbook(PLAYBOOK.read_text(), models)
    book.write_text(header + yaml.safe_dump(filled, sort_keys=False))
    hosts.write_text(header + yaml.safe_dump(hosts_document(python), sort_keys=False))
    return book, hosts


def main(argv: list[str]) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        models = realvllm.build_models(say)
        book, hosts = write_inputs(models, realvllm.venv_python())
    except (realvllm.SetupError, DemoError) as exc:
        say(f"demo-real: {exc}")
        return 1
    command = [sys.executable, "-m", "orchestrator", "run", str(book), "--hosts", str(hosts)]
    command += ["--fail-on", "failed", *argv]  # it collapses a broken drafter on purpose
    with realvllm.engine_slot(say):
        return subprocess.run(command, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
