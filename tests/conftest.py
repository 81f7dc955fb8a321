"""Test-suite wiring: fixture modules shared by every test directory are registered here."""

from __future__ import annotations

# `tests.fixtures...` is importable because pyproject sets pytest's pythonpath to the repo root.
pytest_plugins = ["tests.fixtures.sshd", "tests.fixtures.embedded"]
