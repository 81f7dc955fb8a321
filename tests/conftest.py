"""Test-suite wiring: shared fixture modules, a stable console width, and the `integration` mark.

The suite has two layers. Unit tests run in-process in milliseconds. Integration tests start a
server — a real OpenSSH sshd, an embedded SSH host, the engine simulator, or orch's own CLI
driving one of those — and are marked ``integration`` here, by where they live or by the
fixtures they use, so ``pytest -m "not integration"`` is the fast layer and no test module has
to remember the mark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.fixtures import FixtureDef

# `tests.fixtures...` is importable because pyproject sets pytest's pythonpath to the repo root.
pytest_plugins = [
    "tests.fixtures.sshd",
    "tests.fixtures.embedded",
    "tests.fixtures.slurm",
    "tests.fixtures.slurm_login",
    "tests.fixtures.realvllm",
]

# The CLI honours COLUMNS as the user's terminal width. pytest-xdist workers inherit a COLUMNS
# of 80 from somewhere in their start-up, a developer's shell may export any; tests that read
# the CLI's tables must see the same width under `-n 2` as in a plain run.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

TESTS = Path(__file__).resolve().parent

# Fixtures that start a server, by the file that defines them (names like `host` or `sim` are
# reused elsewhere for things that start nothing).
SERVER_FIXTURES = {
    ("fixtures/sshd.py", "sshd_factory"),
    ("fixtures/embedded.py", "embedded_hosts"),
    ("fixtures/slurm.py", "slurm_cluster"),
    ("fixtures/realvllm.py", "cpu_factory"),
    ("sim/conftest.py", "start_sim"),
    ("unit/test_loadgen.py", "sim"),
    ("unit/test_remote_lifecycle.py", "host"),
}


def _fixtures(item: pytest.Item) -> Iterator[tuple[str, FixtureDef[object]]]:
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in info.name2fixturedefs.items() if info is not None else ():
        for fixturedef in defs:
            yield name, fixturedef


def _defined_in(fixturedef: FixtureDef[object]) -> str | None:
    """The fixture's file relative to tests/, None for pytest's and plugins' own."""
    where = Path(fixturedef.func.__code__.co_filename).resolve()
    return str(where.relative_to(TESTS)) if where.is_relative_to(TESTS) else None


def _starts_a_server(item: pytest.Item) -> bool:
    if TESTS / "integration" in Path(str(item.path)).resolve().parents:
        return True
    return any((_defined_in(d), name) in SERVER_FIXTURES for name, d in _fixtures(item))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _starts_a_server(item):
            item.add_marker(pytest.mark.integration)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # `make pytest` hands whole modules to its workers (--dist loadscope: a module-scoped
        # `orch run` starts once), those with the most tests first (xdist's reorder); among
        # modules of one size, the server modules go first. Every worker sorts alike; a plain
        # run keeps the usual order. (Handing out the slow modules first instead, the real
        # tier as one unit, measured 728 s against 645 s: the real engine then starts beside
        # the heaviest simulator modules, and both slow down on 2 cores.)
        items.sort(key=lambda item: item.get_closest_marker("integration") is None)
