"""Host, group and run names end up in paths (the embedded host's sandbox, result folders) and
command lines: '.', '..', a leading '-', '/' and NUL are refused where they are written."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_inventory, load_playbook
from orchestrator.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("..", "host name '..' is not allowed: it names a directory"),
        (".", "host name '.' is not allowed: it names a directory"),
        ("-oProxyCommand", "host names may not start with '-'; found '-oProxyCommand'"),
        ("a/b", "host names may only contain letters, digits, '.', '_' and '-'; found 'a/b'"),
        ("a\\0b", "host names may only contain letters, digits, '.', '_' and '-'; found 'a\\x00b'"),
    ],
)
def test_unsafe_host_names_are_refused_at_their_line(
    tmp_path: Path, name: str, message: str
) -> None:
    file = tmp_path / "hosts.yaml"
    file.write_text(f'hosts:\n  ok: {{}}\n  "{name}":\n    transport: embedded\n')
    with pytest.raises(ConfigError) as caught:
        load_inventory(file)
    err = caught.value
    assert (err.file, err.line, err.column) == (str(file), 3, 3)
    assert err.message == message


@pytest.mark.parametrize("name", ["a.b", "..a", "a..", "a-", "_x", "h.100"])
def test_ordinary_names_with_dots_and_dashes_load(tmp_path: Path, name: str) -> None:
    file = tmp_path / "hosts.yaml"
    file.write_text(f"hosts:\n  {name}: {{}}\n")
    assert list(load_inventory(file).hosts) == [name]


@pytest.mark.parametrize("name", ["..", "."])
def test_a_run_named_dot_dot_is_refused(tmp_path: Path, name: str) -> None:
    file = tmp_path / "play.yaml"
    file.write_text(
        f'name: p\nhosts: [a]\nruns:\n  - name: "{name}"\n    engine: vllm\n    model: m\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_playbook(file)
    assert caught.value.line == 4
    assert "it names a directory" in caught.value.message
