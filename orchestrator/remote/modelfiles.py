"""``read_model_configs``: the small JSON files of models on this host, for the doctor.

Spec: ``{"models": [{"id": "Qwen/Qwen3-8B", "path": null}], "hf_home": null}``. Each model is
found at its ``path`` (a local directory), else at ``id`` when that is a directory, else in the
Hugging Face cache (``hf_home``, ``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface``):
``hub/models--ORG--NAME/snapshots/<refs/main, or the newest snapshot>/``.

Only config.json, tokenizer_config.json, generation_config.json and chat_template.jinja are
read, each up to ``MAX_FILE_BYTES``: never weights, never tokenizer.json (10 MB and more), and
no transformers import, so this takes milliseconds on any Python 3.9+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from .protocol import AgentFailure, Emit, parse_spec
from .wire import ErrorKind, ModelFiles, ReadModelConfigsResult, ReadModelConfigsSpec

MAX_FILE_BYTES = 4 * 1024 * 1024
JSON_FILES = {
    "config": "config.json",
    "tokenizer_config": "tokenizer_config.json",
    "generation_config": "generation_config.json",
}
TEMPLATE_FILE = "chat_template.jinja"


def run(raw: Dict[str, Any], emit: Emit) -> ReadModelConfigsResult:
    spec = parse_spec(ReadModelConfigsSpec, raw)
    if not spec.models:
        raise AgentFailure(
            ErrorKind.BAD_SPEC,
            "read_model_configs: 'models' must be a non-empty "
            "list of {'id': str, 'path': str or null}",
        )
    for index, model in enumerate(spec.models):
        if not model.id:
            raise AgentFailure(
                ErrorKind.BAD_SPEC,
                f"read_model_configs: models[{index}] needs a non-empty string 'id'",
                {"index": index},
            )
    hubs = hub_dirs(spec.hf_home, dict(os.environ))
    return ReadModelConfigsResult(
        models={m.id: read_model(m.id, m.path, hubs) for m in spec.models}
    )


def hub_dirs(hf_home: Optional[str], environ: Dict[str, str]) -> List[str]:
    """Cache directories to search, in huggingface_hub's order of precedence."""
    candidates: List[str] = []
    if hf_home:
        candidates.append(os.path.join(hf_home, "hub"))
    if environ.get("HF_HUB_CACHE"):
        candidates.append(environ["HF_HUB_CACHE"])
    if environ.get("HF_HOME"):
        candidates.append(os.path.join(environ["HF_HOME"], "hub"))
    candidates.append(os.path.join("~", ".cache", "huggingface", "hub"))
    seen: List[str] = []
    for path in candidates:
        full = os.path.abspath(os.path.expanduser(path))
        if full not in seen:
            seen.append(full)
    return seen


def cache_folder_name(model_id: str) -> str:
    """``Qwen/Qwen3-8B`` -> ``models--Qwen--Qwen3-8B``, as huggingface_hub names it."""
    return "models--" + "--".join(model_id.strip("/").split("/"))


def snapshot_dir(repo_dir: str) -> Optional[str]:
    """The snapshot refs/main points at, else the most recently modified snapshot."""
    snapshots = os.path.join(repo_dir, "snapshots")
    try:
        with open(os.path.join(repo_dir, "refs", "main"), encoding="utf-8") as handle:
            commit = handle.read().strip()
    except OSError:
        commit = ""
    if commit and os.path.isdir(os.path.join(snapshots, commit)):
        return os.path.join(snapshots, commit)
    try:
        names = [n for n in os.listdir(snapshots) if os.path.isdir(os.path.join(snapshots, n))]
    except OSError:
        return None
    if not names:
        return None
    return os.path.join(
        snapshots, max(names, key=lambda n: os.path.getmtime(os.path.join(snapshots, n)))
    )


def locate(model_id: str, path: Optional[str], hubs: List[str]) -> Tuple[Optional[str], str]:
    """(directory, how it was looked for): the directory is None when nothing was found."""
    if path:
        full = os.path.abspath(os.path.expanduser(path))
        return (full if os.path.isdir(full) else None), f"path {full}"
    local = os.path.abspath(os.path.expanduser(model_id))
    if model_id.startswith(("/", "~", ".")) or os.path.isdir(local):
        return (local if os.path.isdir(local) else None), f"path {local}"
    folder = cache_folder_name(model_id)
    for hub in hubs:
        repo = os.path.join(hub, folder)
        if os.path.isdir(repo):
            return snapshot_dir(repo), f"cache {repo}"
    return None, "Hugging Face cache " + ", ".join(os.path.join(h, folder) for h in hubs)


def read_model(model_id: str, path: Optional[str], hubs: List[str]) -> ModelFiles:
    directory, searched = locate(model_id, path, hubs)
    if directory is None:
        return ModelFiles(
            id=model_id,
            path=None,
            found=False,
            config=None,
            tokenizer_config=None,
            generation_config=None,
            chat_template=None,
            error=f"not found (looked in {searched})",
        )
    entry: Dict[str, Any] = {"config": None, "tokenizer_config": None, "generation_config": None}
    errors: List[str] = []
    for key, filename in JSON_FILES.items():
        text, problem = read_small(os.path.join(directory, filename))
        if problem:
            if key == "config" or "missing" not in problem:
                errors.append(f"{filename}: {problem}")
            continue
        try:
            value = json.loads(text or "")
        except ValueError as exc:
            errors.append(f"{filename}: not valid JSON ({exc})")
            continue
        if isinstance(value, dict):
            entry[key] = value
        else:
            errors.append(f"{filename}: holds a {type(value).__name__}, not an object")
    template, problem = read_small(os.path.join(directory, TEMPLATE_FILE))
    if template is None and problem and "missing" not in problem:
        errors.append(f"{TEMPLATE_FILE}: {problem}")
    return ModelFiles(
        id=model_id,
        path=directory,
        found=True,
        chat_template=template,
        error="; ".join(errors) or None,
        **entry,
    )


def read_small(path: str) -> Tuple[Optional[str], Optional[str]]:
    """(text, problem): problem is "missing", "too large (N bytes)" or the OS error."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return None, "missing" if not os.path.lexists(path) else f"unreadable ({exc.strerror})"
    if size > MAX_FILE_BYTES:
        return None, f"too large ({size} bytes > {MAX_FILE_BYTES}), skipped"
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(MAX_FILE_BYTES + 1), None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
