"""Run results: the model (``model``), the files of a results folder, and the data for notebooks.

``orchestrator.results.load(path_or_paths)`` returns one pandas DataFrame row per measurement
(``orchestrator.results.frame``). It is imported on first use: pandas takes a while to import,
and most of orch (the CLI's other commands, the run itself) never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.results.frame import load as load

__all__ = ["load"]


def __getattr__(name: str) -> object:
    if name == "load":
        from orchestrator.results.frame import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
