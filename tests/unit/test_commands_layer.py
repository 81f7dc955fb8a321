"""The layers: commands/ and runner/ say what happened in types; only cli/ prints and marks up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", ["commands", "runner"])
def test_no_rich_and_no_cli_below_the_cli(package: str) -> None:
    files = sorted((ROOT / package).glob("*.py"))
    assert files
    offending = {
        f"{path.name}: {name}"
        for path in files
        for name in imported_modules(path)
        if name == "rich" or name.startswith(("rich.", "orchestrator.cli"))
    }
    assert offending == set()
