"""Test-suite wiring: fixture modules shared by every test directory are registered here."""

from __future__ import annotations

import sys
from pathlib import Path

# `tests.fixtures...` must be importable however pytest is started (`pytest`, `python -m pytest`).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest_plugins = ["tests.fixtures.sshd", "tests.fixtures.embedded"]
