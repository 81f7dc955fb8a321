"""Running playbooks: preflight (probe + doctor), per-run execution, summaries."""

from __future__ import annotations

from orchestrator.runner.pipeline import DoctorRefused, PlaybookOutcome, run_playbook

__all__ = ["DoctorRefused", "PlaybookOutcome", "run_playbook"]
