"""What the ``loadgen`` verb streams and returns, as the controller imports it.

Defined once in the wire contract (``orchestrator.remote.wire``), which the agent builds them
from on the host; re-exported here so the controller's loadgen code reads them by their home.
"""

from __future__ import annotations

from orchestrator.remote.wire import Chunk, ClientLag, LagStats, LoadgenResult, RequestRecord

__all__ = ["Chunk", "ClientLag", "LagStats", "LoadgenResult", "RequestRecord"]
