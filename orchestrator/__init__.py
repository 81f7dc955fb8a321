"""orch: benchmark LLM serving engines on remote GPU hosts over SSH."""

from __future__ import annotations

__version__ = "0.1.0"
