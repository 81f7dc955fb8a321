"""`orch` mounts its sub-commands lazily (`cli/main.py: LAZY`): `orch --help` imports none of
them, yet prints what mounting them all would, and every command's own --help still works."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup

from orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[2]
# what `orch --help` must not import: the commands, and what they need to do their work
HEAVY = (
    "pandas",
    "matplotlib",
    "scipy",
    "numpy",
    "asyncssh",
    "pydantic",
    "yaml",
    "orchestrator.cli.common",
    "orchestrator.commands",
    "orchestrator.config",
)


def imported_after(code: str) -> dict[str, Any]:
    """Run ``code`` in a new Python (this checkout first on the path); what it printed last
    as JSON, and which of HEAVY it had imported by then."""
    script = (
        "import contextlib, io, json, sys\n"
        f"{code}\n"
        f"print(json.dumps({{'heavy': [m for m in {list(HEAVY)!r} if m in sys.modules]}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_orch_help_imports_no_command() -> None:
    found = imported_after(
        "from orchestrator.cli.main import run\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    assert run(['--help']) == 0\n"
        "assert 'Run a playbook' in out.getvalue(), out.getvalue()\n"
    )
    assert found["heavy"] == []


def test_the_run_path_imports_no_report_libraries() -> None:
    """`orch run` draws its plot at the end, importing matplotlib then; pandas and scipy are
    for `orch results` and reports."""
    found = imported_after("import orchestrator.cli.run")
    assert [m for m in found["heavy"] if m in ("pandas", "matplotlib", "scipy")] == []
    assert "asyncssh" in found["heavy"]  # the check sees the run path's imports at all


def help_text(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main.run([*argv, "--help"])
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_listing_is_what_mounting_every_command_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """LAZY's help texts, names and order against the commands themselves: the same help,
    rendered once from the table and once with every command loaded."""
    monkeypatch.setenv("COLUMNS", "100")
    listed = help_text()
    monkeypatch.setattr(main.LazyGroup, "format_help", TyperGroup.format_help)
    assert help_text() == listed
    assert "Run a playbook" in listed and "baseline" in listed


def command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = [("schema",)]
    for name in main.LAZY:
        command = main.load(name, "markdown")
        paths.append((name,))
        if isinstance(command, TyperGroup):
            paths += [(name, sub) for sub in command.commands]
    return paths


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_command_help_works_and_names_its_options(
    path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no option name cut short by a narrow table
    command: Any = main.load(path[0], "markdown") if path[0] in main.LAZY else None
    for sub in path[1:]:
        command = command.commands[sub]
    text = help_text(*path)
    assert f"Usage: orch {' '.join(path)}" in text
    options = [] if command is None else [o for p in command.params if not p.hidden for o in p.opts]
    for option in [*options, "--help"]:
        if option.startswith("-"):
            assert option in text, f"orch {' '.join(path)} --help does not name {option}"


def test_an_unknown_command_is_still_a_usage_error() -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main.run(["rnu"]) == 2
    assert "No such command 'rnu'" in err.getvalue()
