"""Hostile and broken input to both loaders: only orch's own located ConfigError comes out.

A YAML bomb (aliases expanding to billions of values), a nest a thousand levels deep, control
characters, bytes that are not UTF-8, dates and numbers Python cannot hold: each is one error
naming file:line:column, never a traceback, a hang or a memory blow-up. Hypothesis then throws
random bytes and YAML-shaped text at both loaders (bounded examples, no deadline: no clock).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config import load_inventory, load_playbook
from orchestrator.config.yamlload import MAX_DEPTH, MAX_NODES
from orchestrator.errors import ConfigError

LOADERS: dict[str, Callable[[Path], Any]] = {
    "inventory": load_inventory,
    "playbook": load_playbook,
}


def billion_laughs() -> bytes:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return ("\n".join(lines) + "\n").encode()


def aliased_nests() -> bytes:
    """Each line nests 90 deep around the previous one: 1350 levels once expanded."""
    lines = ["n0: &n0 " + "[" * 90 + "1" + "]" * 90]
    lines += [f"n{i}: &n{i} " + "[" * 90 + f"*n{i - 1}" + "]" * 90 for i in range(1, 15)]
    return ("\n".join(lines) + "\n").encode()


HOSTILE = [
    # (file content, line, column, message start)
    (billion_laughs(), 5, 5, f"the file holds more than {MAX_NODES:,} values"),
    (b"a: " + b"[" * 1000 + b"]" * 1000 + b"\n", 1, MAX_DEPTH + 3, "values nested more than"),
    (
        b"x: 1\n" + b"".join(b" " * i + b"k%d:\n" % i for i in range(300)) + b" " * 300 + b"v: 1\n",
        MAX_DEPTH + 1,
        MAX_DEPTH,
        "values nested more than",
    ),
    (aliased_nests(), 2, 89, "the file holds values nested more than"),
    (b"name: r1\nmodel: \x1b[2Jx\n", 2, 8, "invalid YAML: the control character U+001B"),
    (b"name: r1\nmodel: \x07\n", 2, 8, "invalid YAML: the control character U+0007"),
    (b"name: r1\nmodel: \xffx\n", 2, 8, "not UTF-8 text (byte 0xff at byte 16"),
    (b"name: r1\n\nmodel: ab\xc3\n", 3, 10, "not UTF-8 text (byte 0xc3"),
    (b"a: 2001-13-01\n", 1, 4, "invalid YAML: cannot read the value '2001-13-01'"),
    (b"a: " + b"1" * 5000 + b"\n", 1, 4, "invalid YAML: cannot read the value"),
    (b"a: &x [*x]\n", 1, 4, "recursive alias"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize(("content", "line", "column", "message"), HOSTILE)
def test_hostile_files_get_one_located_error(
    tmp_path: Path, loader: str, content: bytes, line: int, column: int, message: str
) -> None:
    file = tmp_path / "input.yaml"
    file.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        LOADERS[loader](file)
    err = caught.value
    assert (err.file, err.line, err.column) == (str(file), line, column)
    assert err.message.startswith(message), err.message


def test_limits_leave_room_for_real_files(tmp_path: Path) -> None:
    """Aliases used as intended, and nesting a real file would use, still load."""
    file = tmp_path / "hosts.yaml"
    file.write_text(
        "defaults: &d {python: python3, env: {A: '1'}}\n"
        + "hosts:\n"
        + "".join(f"  h{i}: {{<<: *d, port: {2200 + i}}}\n" for i in range(200))
    )
    inventory = load_inventory(file)
    assert len(inventory.hosts) == 200
    assert inventory.hosts["h199"].port == 2399
    assert inventory.hosts["h0"].python == "python3"


# -- fuzz ----------------------------------------------------------------------------------------

_TOKENS = [
    "hosts:", "runs:", "name:", "engine: vllm", "model: m", "defaults:", "groups:", "matrix:",
    "- ", "  ", "    ", "\n", ": ", "{", "}", "[", "]", ",", "&a ", "*a", "&b ", "*b", "<<: *a",
    "!!int ", "!!str ", "!!binary ", "!!python/object:os.system ", "!foo ", "? ", "|", ">", "'",
    '"', "#", "---", "...", "%YAML 1.1", "%TAG ! x", "~", "null", "true", "yes", "1e309", "-0",
    "0x1F", "2001-02-30", "12:30:45", "${HOME}", "${", "\t", "\x1b", "\x85", "\ufeff", "é",
    "\\", "a", "1", "-1", "3.5", ".inf", ".nan", "workload:", "speculative:", "transport: embedded",
    "port:", "gpus: 2 x A6000", "env:", "HF_TOKEN:", "hosts: [a]", "tags: [x]",
]  # fmt: skip

yamlish = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _only_located_config_errors(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "input.yaml"
        file.write_bytes(content)
        for load in LOADERS.values():
            try:
                load(file)
            except ConfigError as err:
                assert err.file == str(file), repr(err)
                assert err.line is not None and err.line >= 1, repr(err)
                assert err.column is not None and err.column >= 1, repr(err)
                assert err.message, repr(err)


@pytest.mark.timeout(120)
@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(content: bytes) -> None:
    _only_located_config_errors(content)


@pytest.mark.timeout(120)
@FUZZ
@given(yamlish)
def test_fuzz_yaml_shaped_text(text: str) -> None:
    _only_located_config_errors(text.encode("utf-8", "surrogatepass"))
