"""`--help` as a new user reads it: flags are shown bare, options that take a value say which."""

from __future__ import annotations

import contextlib
import io

import pytest

from orchestrator.cli.main import run as run_cli


def _help(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = run_cli([*command, "--help"])
    assert code == 0
    return out.getvalue()


@pytest.mark.parametrize("command", [("run",), ("hosts", "check"), ("stop",), ("doctor",)])
def test_flags_do_not_look_like_they_take_a_value(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "--help" in text and "--json" in text
    assert "<bool>" not in text


def test_options_with_a_value_still_name_its_type() -> None:
    line = next(line for line in _help("run").splitlines() if "--results" in line)
    assert "<path>" in line
