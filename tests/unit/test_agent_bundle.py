"""The agent zipapp: same bytes from the same source, runnable, and Python 3.9+ stdlib only."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.agent import bundle as bundle_mod
from orchestrator.agent.bundle import REMOTE_SOURCE, build_bundle
from orchestrator.remote.wire import CONTRACT_VERSION

OLD_PYTHONS = {  # interpreters this machine may have (pyenv); tests skip those it lacks
    "3.9": "/root/.pyenv/versions/3.9.18/bin/python",
    "2.7": "/root/.pyenv/versions/2.7.18/bin/python",
}


def source_files() -> list[Path]:
    return sorted(p for p in REMOTE_SOURCE.rglob("*.py") if "__pycache__" not in p.parts)


def test_same_bytes_on_every_build() -> None:
    first = build_bundle()
    again = bundle_mod._build.__wrapped__(str(REMOTE_SOURCE))  # bypass the per-process cache
    assert again.data == first.data
    assert build_bundle() is first  # cached per process
    assert first.sha256 == hashlib.sha256(first.data).hexdigest()
    assert first.filename == f"agent-{first.sha256[:16]}.pyz"


def test_same_bytes_from_a_copy_with_other_mtimes_and_junk(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "remote"
    shutil.copytree(REMOTE_SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for i, path in enumerate(sorted(copy.rglob("*"))):
        os.utime(path, (1_000_000_000 + i * 7777, 1_500_000_000 + i * 3333))
        path.chmod(0o600 if i % 2 else 0o755)
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\x00junk")
    (copy / "stale.pyc").write_bytes(b"junk")
    (copy / ".main.py.swp").write_bytes(b"editor")
    assert build_bundle(copy).data == build_bundle().data


def test_a_source_change_changes_the_name(tmp_path: Path) -> None:
    copy = tmp_path / "remote"
    shutil.copytree(REMOTE_SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "echo.py").open("a") as handle:
        handle.write("\n# changed\n")
    assert build_bundle(copy).filename != build_bundle().filename


def test_layout_timestamps_and_permissions() -> None:
    data = build_bundle().data
    assert data.startswith(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        expected = ["__main__.py"] + sorted(
            f"orch_remote/{p.relative_to(REMOTE_SOURCE).as_posix()}" for p in source_files()
        )
        assert names == expected
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.external_attr == 0o100644 << 16
            assert info.compress_type == zipfile.ZIP_DEFLATED
        for path in source_files():
            assert (
                archive.read(f"orch_remote/{path.relative_to(REMOTE_SOURCE).as_posix()}")
                == path.read_bytes()
            )


def test_the_bundle_runs_from_any_directory(tmp_path: Path) -> None:
    bundle = build_bundle()
    pyz = tmp_path / bundle.filename
    pyz.write_bytes(bundle.data)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"v": CONTRACT_VERSION, "payload": {"k": "v"}}))
    proc = subprocess.run(
        [sys.executable, str(pyz), "echo", str(spec)],
        capture_output=True,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["payload"] == {"k": "v"}


_OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a ``try`` that survives the import failing (optional: e.g. transformers)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if handler.type is None or any(
                    isinstance(n, ast.Name) and n.id in _OPTIONAL for n in names
                ):
                    return True
    return False


@pytest.mark.parametrize("path", source_files(), ids=lambda p: p.name)
def test_remote_code_is_python39_stdlib_with_relative_imports(path: Path) -> None:
    """The agent runs in the engine's interpreter: 3.9 syntax, stdlib only, never orchestrator.

    A third-party import is allowed only where its absence is handled (inside a try).
    """
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = [(node.module or "").split(".")[0]]
        else:
            continue
        for root in roots:
            assert root != "orchestrator", f"{path.name}:{node.lineno}: use a relative import"
            assert (
                root == "__future__" or root in sys.stdlib_module_names or _guarded(node, parents)
            ), (
                f"{path.name}:{node.lineno} imports {root!r}: the agent may only use the "
                "standard library (third-party imports only inside try/except ImportError)"
            )


@pytest.mark.parametrize("version", ["3.9"])
def test_runs_under_python39(version: str, tmp_path: Path) -> None:
    python = OLD_PYTHONS[version]
    if not os.access(python, os.X_OK):
        pytest.skip(f"no Python {version} at {python}")
    bundle = build_bundle()
    pyz = tmp_path / bundle.filename
    pyz.write_bytes(bundle.data)
    for verb, spec in (("echo", {"payload": {"a": "ü"}}), ("probe", {"ports": [1]})):
        spec_path = tmp_path / f"{verb}.json"
        spec_path.write_text(json.dumps({"v": CONTRACT_VERSION, **spec}))
        proc = subprocess.run(
            [python, str(pyz), verb, str(spec_path)], capture_output=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert json.loads(proc.stdout)["event"] == "result"
    assert json.loads(proc.stdout)["data"]["python"]["version"].startswith(version + ".")


def test_too_old_python_gets_one_error_event(tmp_path: Path) -> None:
    python = OLD_PYTHONS["2.7"]
    if not os.access(python, os.X_OK):
        pytest.skip(f"no Python 2.7 at {python}")
    bundle = build_bundle()
    pyz = tmp_path / bundle.filename
    pyz.write_bytes(bundle.data)
    spec_path = tmp_path / "secret.json"
    spec_path.write_text('{"token": "s"}')
    proc = subprocess.run(
        [python, str(pyz), "echo", str(spec_path)], capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == 1
    event = json.loads(proc.stdout)
    assert (event["v"], event["event"]) == (CONTRACT_VERSION, "error")
    assert event["kind"] == "python_too_old"
    assert event["message"] == f"the agent needs Python 3.9+, but {python} is Python 2.7.18"
    assert not spec_path.exists()
