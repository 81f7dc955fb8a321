"""Where runs execute: one backend per kind of place (SSH hosts, Slurm clusters), behind the
`Backend` seam of ``base.py``. Commands go through it and never ask which kind a place is."""

from orchestrator.backends.base import Backend, backend_of, backends, by_backend, select_places

__all__ = ["Backend", "backend_of", "backends", "by_backend", "select_places"]
